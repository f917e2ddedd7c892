package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

// credRecorder is an upstream that records the Authorization each
// request brought.
type credRecorder struct {
	mu   sync.Mutex
	auth []string
}

func (rc *credRecorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rc.mu.Lock()
	rc.auth = append(rc.auth, r.URL.Path+" "+r.Header.Get("Authorization"))
	rc.mu.Unlock()
	fmt.Fprint(w, "ok")
}

// take returns what arrived since the last take.
func (rc *credRecorder) take() []string {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	s := rc.auth
	rc.auth = nil
	return s
}

// rawCollector is an OTLP/HTTP endpoint that keeps every export's bytes.
type rawCollector struct {
	mu  sync.Mutex
	raw bytes.Buffer
}

func (c *rawCollector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	c.mu.Lock()
	c.raw.Write(b)
	c.mu.Unlock()
	w.Header().Set("Content-Type", "application/x-protobuf")
}

func (c *rawCollector) bytes() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return bytes.Clone(c.raw.Bytes())
}

// credentialDoc binds each path scope of the upstream to the provider of
// that name, and leaves /plain unbound.
func credentialDoc(port int, bound ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "version: 1\nnetwork_policies:\n  upstream:\n    name: upstream\n    endpoints:\n")
	endpoint := func(path, binding string) {
		fmt.Fprintf(&b, "      - host: 127.0.0.1\n        port: %d\n        path: \"/%s/**\"\n        protocol: rest\n%s        rules: [ { allow: { method: GET, path: \"/%s/**\" } } ]\n",
			port, path, binding, path)
	}
	for _, p := range bound {
		endpoint(p, fmt.Sprintf("        credential_binding: { provider: %s }\n", p))
	}
	endpoint("plain", "")
	return b.String()
}

// agentGet sends GET path through the proxy with the Authorization
// header auth (none when empty), as an agent holding no secret does.
func agentGet(t *testing.T, proxyAddr, upstream, path, auth string) (int, string) {
	t.Helper()
	c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: proxyAddr}), DisableKeepAlives: true}, Timeout: 10 * time.Second}
	req, _ := http.NewRequest(http.MethodGet, upstream+path, nil)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	res, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// The acceptance of issue 39 with the real binaries: a gateway keeping
// providers, a proxy injecting them, an upstream recording what it gets.
func TestCredentialProvidersEndToEnd(t *testing.T) {
	t.Setenv("PORTCULLIS_LOG_LEVEL", "debug") // the processes' logs too must hold no secret
	up := &credRecorder{}
	upstream := httptest.NewServer(up)
	defer upstream.Close()
	upPort := upstream.Listener.Addr().(*net.TCPAddr).Port
	collector := &rawCollector{}
	otlp := httptest.NewServer(collector)
	defer otlp.Close()

	const first, second, exchanged = "s3cr3t-first-value-9d2f", "s3cr3t-second-value-77ab", "xchg-token-5e61c0"
	const subject = "subject-token-4a1b7c"
	sts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.ParseForm()
		if r.PostForm.Get("subject_token") != subject || r.PostForm.Get("grant_type") != "urn:ietf:params:oauth:grant-type:token-exchange" {
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprint(w, `{"error":"invalid_grant"}`)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"access_token":%q,"issued_token_type":"urn:ietf:params:oauth:token-type:access_token","token_type":"Bearer","expires_in":300}`, exchanged)
	}))
	defer sts.Close()
	refusing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprint(w, `{"error":"invalid_target","error_description":"audience not allowed"}`)
	}))
	defer refusing.Close()
	closed, _ := net.Listen("tcp", "127.0.0.1:0")
	downURL := "http://" + closed.Addr().String() + "/token"
	closed.Close() // nothing listens there: the exchange cannot reach its server

	dir := t.TempDir()
	gwDir, pxDir := filepath.Join(dir, "gateway"), filepath.Join(dir, "p1")
	gwOCSF, pxOCSF := filepath.Join(dir, "gateway.ocsf.jsonl"), filepath.Join(dir, "proxy.ocsf.jsonl")
	gw := startGatewayProcess(t, []string{"PORTCULLIS_BOOTSTRAP_TOKEN=" + pushAdminToken, "PORTCULLIS_DATABASE_URL="},
		"--data-dir", gwDir, "--ocsf-file", gwOCSF, "--otlp-endpoint", otlp.URL)
	gatewayURL := "http://" + gw.addr
	api := newPushAPI(gatewayURL)
	created, err := api.sandbox.CreateSandbox(t.Context(), &portcullisv1.CreateSandboxRequest{
		Name: "agent-1", Policy: credentialDoc(upPort, "up", "sts", "down", "refuse")})
	if err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(created.GetToken()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	px := startOCSFProxy(t, gatewayURL, tokenFile, pxDir, "p1", "--ocsf-file", pxOCSF, "--otlp-endpoint", otlp.URL)
	api.waitStatuses(t, []string{"p1"}, "version 1 applied", func(p *portcullisv1.ProxyStatus) bool { return p.GetConnected() && p.GetAppliedVersion() == 1 })

	env := []string{"PORTCULLIS_GATEWAY=" + gatewayURL, "PORTCULLIS_TOKEN=" + pushAdminToken, "SUBJECT=" + subject}
	cli := func(want int, args ...string) string {
		t.Helper()
		out, code := runBinary(t, env, args...)
		if code != want {
			t.Fatalf("portcullis %s: exit %d, want %d\n%s", strings.Join(args, " "), code, want, out)
		}
		return out
	}
	hosts := fmt.Sprintf("http://127.0.0.1:%d", upPort) // plain HTTP: opted in
	cli(0, "provider", "create", "up", "--type", "bearer", "--hosts", hosts, "--secret-file", writeFile(t, "up.token", first+"\n"))
	for name, tokenURL := range map[string]string{"sts": sts.URL + "/token", "down": downURL, "refuse": refusing.URL + "/token"} {
		cli(0, "provider", "create", name, "--type", "token-exchange", "--hosts", hosts, "--setting", "token_url="+tokenURL,
			"--setting", "audience=orders", "--secret-env", "subject_token=SUBJECT")
	}
	// Before it is attached, the proxy holds nothing: bound requests are
	// refused and nothing reaches the upstream.
	if code, body := agentGet(t, px.addr, upstream.URL, "/up/a", ""); code != http.StatusForbidden || !strings.Contains(body, "credential_unavailable") {
		t.Fatalf("bound request before attach: %d %s", code, body)
	}
	for _, name := range []string{"up", "sts", "down", "refuse"} {
		cli(0, "sandbox", "providers", "attach", "agent-1", name) // waits until the proxy holds it
	}

	// The agent sends nothing, or the placeholder: the upstream gets the
	// secret.
	for _, auth := range []string{"", "Bearer portcullis:provider:up"} {
		if code, body := agentGet(t, px.addr, upstream.URL, "/up/a", auth); code != http.StatusOK {
			t.Fatalf("GET /up/a with %q: %d %s", auth, code, body)
		}
	}
	if got := up.take(); len(got) != 2 || got[0] != "/up/a Bearer "+first || got[1] != got[0] {
		t.Fatalf("upstream received %q, want the first secret twice", got)
	}

	// Rotation: the very next request after the command returns carries
	// the new value (the command waited for the proxy's ACK).
	cli(0, "provider", "rotate", "up", "--secret-file", writeFile(t, "up2.token", second+"\n"))
	if code, _ := agentGet(t, px.addr, upstream.URL, "/up/b", ""); code != http.StatusOK {
		t.Fatalf("GET /up/b after rotate: %d", code)
	}
	if got := up.take(); len(got) != 1 || got[0] != "/up/b Bearer "+second {
		t.Fatalf("after rotate the upstream received %q, want the second secret", got)
	}
	st := api.waitStatuses(t, []string{"p1"}, "credentials acked", func(p *portcullisv1.ProxyStatus) bool { return p.GetCredentialsGeneration() > 0 })
	sb, err := api.sandbox.GetSandbox(t.Context(), &portcullisv1.GetSandboxRequest{Name: "agent-1"})
	if err != nil || st["p1"].GetCredentialsGeneration() != sb.GetCredentialsGeneration() || st["p1"].GetCredentialsError() != "" {
		t.Fatalf("proxy holds generation %d (%q), sandbox at %d (%v)", st["p1"].GetCredentialsGeneration(), st["p1"].GetCredentialsError(), sb.GetCredentialsGeneration(), err)
	}

	// Token exchange: exchanged at the proxy; refused, or unreachable,
	// the request fails closed with the reason.
	if code, body := agentGet(t, px.addr, upstream.URL, "/sts/a", ""); code != http.StatusOK {
		t.Fatalf("GET /sts/a: %d %s", code, body)
	}
	if got := up.take(); len(got) != 1 || got[0] != "/sts/a Bearer "+exchanged {
		t.Fatalf("token exchange: upstream received %q", got)
	}
	refusals := []struct{ path, auth, code, why string }{
		{"/down/a", "", "credential_unavailable", ""},
		{"/refuse/a", "", "credential_unavailable", "invalid_target"},
		{"/plain/a", "Bearer portcullis:provider:up", "credential_placeholder", ""}, // a placeholder to an unbound endpoint
		{"/up/c", "Bearer ghp_agentHeldTokenValue1", "credential_supplied", ""},     // the agent's own token to a credentialed host
		{"/plain/b", "Bearer " + second, "credential_supplied", ""},                 // a real secret, anywhere
	}
	for _, r := range refusals {
		code, body := agentGet(t, px.addr, upstream.URL, r.path, r.auth)
		if code != http.StatusForbidden || !strings.Contains(body, r.code) || !strings.Contains(body, r.why) {
			t.Errorf("GET %s with %q: %d %s; want 403 %s", r.path, r.auth, code, body, r.code)
		}
	}
	if got := up.take(); len(got) != 0 {
		t.Fatalf("refused requests reached the upstream: %q", got)
	}

	// Who may read a secret: nobody. The sandbox's own token is refused
	// the provider calls; an operator sees names and fields, no values.
	opTok := cli(0, "token", "create", "--role", "operator", "--name", "olive", "-o", "json")
	var op struct{ Token string }
	json.Unmarshal([]byte(opTok), &op)
	for _, tok := range []string{created.GetToken(), op.Token} {
		out, _ := runBinary(t, []string{"PORTCULLIS_GATEWAY=" + gatewayURL, "PORTCULLIS_TOKEN=" + tok}, "provider", "show", "up", "-o", "json")
		if strings.Contains(out, first) || strings.Contains(out, second) {
			t.Fatalf("provider show leaked the secret: %s", out)
		}
	}
	if out, code := runBinary(t, []string{"PORTCULLIS_GATEWAY=" + gatewayURL, "PORTCULLIS_TOKEN=" + created.GetToken()}, "provider", "list"); code != exitNo {
		t.Fatalf("a sandbox token listed providers: exit %d\n%s", code, out)
	}

	// Nothing anywhere holds a secret: the proxy's data dir (decision
	// log, kept versions), both OCSF files, the gateway's store (sealed),
	// both logs, and every span and OCSF record exported over OTLP.
	waitOCSF(t, gwOCSF, func(e map[string]any) bool { return unmapped(e, "action") == "provider.rotate" })
	px.stop(t)
	gw.stop(t)
	secrets := []string{first, second, exchanged, subject}
	check := func(where string, b []byte) {
		for _, s := range secrets {
			if bytes.Contains(b, []byte(s)) {
				t.Errorf("%s holds a secret (%s…)", where, s[:6])
			}
		}
	}
	for _, root := range []string{pxDir, gwDir} {
		filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				b, _ := os.ReadFile(path)
				check(path, b)
			}
			return nil
		})
	}
	for _, f := range []string{pxOCSF, gwOCSF} {
		b, _ := os.ReadFile(f)
		if len(b) == 0 {
			t.Errorf("%s is empty: the check saw nothing", filepath.Base(f))
		}
		check(filepath.Base(f), b)
	}
	check("the proxy's log", []byte(px.stderr.String()))
	check("the gateway's log", []byte(gw.stderr.String()))
	exported := collector.bytes()
	if len(exported) == 0 {
		t.Error("nothing was exported over OTLP: the trace check saw nothing")
	}
	check("OTLP exports (spans, OCSF records)", exported)
	if b, _ := os.ReadFile(filepath.Join(pxDir, "decisions.jsonl")); !bytes.Contains(b, []byte("credential_supplied")) {
		t.Errorf("the decision log has no credential_supplied denial:\n%s", b)
	}
}
