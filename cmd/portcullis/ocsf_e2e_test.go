package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/portcullis-dev/portcullis/internal/ocsf/ocsftest"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

// startOCSFProxy is startProxyProcess with extra flags.
func startOCSFProxy(t *testing.T, gatewayURL, tokenFile, dataDir, id string, flags ...string) *proxyProcess {
	t.Helper()
	bin, err := buildBinary()
	if err != nil {
		t.Fatalf("build: %v", err)
	}
	args := append([]string{"proxy", "--sandbox", "agent-1", "--gateway", gatewayURL, "--token-file", tokenFile,
		"--listen", "127.0.0.1:0", "--data-dir", dataDir, "--proxy-id", id, "--dev-allow-loopback", "--max-reconnect-delay", "500ms"}, flags...)
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "PORTCULLIS_TOKEN=")
	p := &proxyProcess{id: id, dataDir: dataDir, cmd: cmd, done: make(chan error, 1), stderr: &lockedBuffer{}}
	cmd.Stderr = p.stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	listening := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if addr, ok := strings.CutPrefix(sc.Text(), "Portcullis proxy listening on "); ok {
				listening <- addr
			}
		}
		io.Copy(io.Discard, stdout)
		p.done <- cmd.Wait()
	}()
	select {
	case p.addr = <-listening:
	case err := <-p.done:
		t.Fatalf("proxy exited before listening: %v\n%s", err, p.stderr.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("proxy did not start listening\n%s", p.stderr.String())
	}
	t.Cleanup(func() { p.kill() })
	return p
}

// readOCSF reads an OCSF JSON-lines file; every line must validate
// against the vendored class definitions.
func readOCSF(t *testing.T, path string) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if line == "" {
			continue
		}
		if err := ocsftest.Validate([]byte(line)); err != nil {
			t.Errorf("%s: %v\n%s", filepath.Base(path), err, line)
		}
		var m map[string]any
		json.Unmarshal([]byte(line), &m)
		out = append(out, m)
	}
	return out
}

func unmapped(e map[string]any, k string) any { return dig(e, "unmapped", k) }

// dig follows keys through nested objects (nil where one is missing).
func dig(e map[string]any, keys ...string) any {
	var v any = e
	for _, k := range keys {
		m, _ := v.(map[string]any)
		v = m[k]
	}
	return v
}

// waitOCSF reads path until match finds an event, with a deadline (the
// gateway reads its audit log every second).
func waitOCSF(t *testing.T, path string, match func(map[string]any) bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(path); err == nil {
			for _, line := range strings.Split(string(b), "\n") {
				var m map[string]any
				if json.Unmarshal([]byte(line), &m) == nil && match(m) {
					return
				}
			}
		}
		<-tick.C
	}
	t.Fatalf("no matching event in %s", path)
}

// The OCSF acceptance with real processes: --ocsf-file on the gateway
// and the proxy; a denial, a policy change with its actor and hashes,
// and an approval each appear exactly once, and every line validates.
func TestOCSFFileEndToEnd(t *testing.T) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") }))
	defer upstream.Close()
	upPort := upstream.Listener.Addr().(*net.TCPAddr).Port

	dir := t.TempDir()
	gwFile, pxFile := filepath.Join(dir, "gateway.ocsf.jsonl"), filepath.Join(dir, "proxy.ocsf.jsonl")
	gw := startGatewayProcess(t, []string{"PORTCULLIS_BOOTSTRAP_TOKEN=" + pushAdminToken, "PORTCULLIS_DATABASE_URL="},
		"--data-dir", filepath.Join(dir, "gateway"), "--ocsf-file", gwFile)
	gatewayURL := "http://" + gw.addr
	api := newPushAPI(gatewayURL)
	created, err := api.sandbox.CreateSandbox(t.Context(), &portcullisv1.CreateSandboxRequest{Name: "agent-1", Policy: pushDoc(upPort, "v1")})
	if err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(created.GetToken()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	px := startOCSFProxy(t, gatewayURL, tokenFile, filepath.Join(dir, "p1"), "p1", "--ocsf-file", pxFile)
	applied := func(v uint32) func(*portcullisv1.ProxyStatus) bool {
		return func(p *portcullisv1.ProxyStatus) bool { return p.GetConnected() && p.GetAppliedVersion() == v }
	}
	api.waitStatuses(t, []string{"p1"}, "version 1 applied", applied(1))
	px.wantStatus(t, upstream.URL, "/v1/a", 200)
	if got := px.get(t, upstream.URL, "/v2/denied"); got != 403 {
		t.Fatalf("/v2/denied: %d, want 403", got)
	}
	denial := waitDenial(t, api, "p1", "/v2/denied")

	// A policy change, then a proposal from the sandbox and its approval.
	v2 := api.set(t, pushDoc(upPort, "v1", "v2"))
	api.waitStatuses(t, []string{"p1"}, "version 2 applied", applied(v2))
	env := []string{"PORTCULLIS_GATEWAY=" + gatewayURL, "PORTCULLIS_TOKEN=" + created.GetToken()}
	out, code := runBinary(t, env, "propose", "-o", "json", "-f", writeFile(t, "proposal.yaml", shippingRule))
	if code != 0 {
		t.Fatalf("propose: exit %d\n%s", code, out)
	}
	var prop map[string]any
	if err := json.Unmarshal([]byte(out), &prop); err != nil {
		t.Fatalf("propose output: %v\n%s", err, out)
	}
	id := fmt.Sprint(prop["id"]) // a JSON number
	hash, _ := prop["resulting_hash"].(string)
	env[1] = "PORTCULLIS_TOKEN=" + pushAdminToken
	if out, code := runBinary(t, env, "proposals", "approve", id, "--reason", "carrier status", "--hash", hash); code != 0 {
		t.Fatalf("approve: exit %d\n%s", code, out)
	}
	isApproval := func(e map[string]any) bool { return unmapped(e, "action") == "proposal.approve" }
	waitOCSF(t, gwFile, isApproval)
	waitOCSF(t, gwFile, func(e map[string]any) bool { return unmapped(e, "action") == "proposal.apply" })
	px.stop(t)
	gw.stop(t)
	if b, err := os.ReadFile(gwFile); err == nil && testing.Verbose() {
		t.Logf("gateway OCSF file:\n%s", b)
	}

	// The proxy's file: the denial once, with its id.
	var denials int
	for _, e := range readOCSF(t, pxFile) {
		req, _ := e["http_request"].(map[string]any)
		u, _ := req["url"].(map[string]any)
		if u["path"] != "/v2/denied" {
			continue
		}
		denials++
		md := e["metadata"].(map[string]any)
		if e["class_uid"] != float64(4002) || e["action_id"] != float64(2) || md["uid"] != denial.GetDenialId() ||
			unmapped(e, "denial_id") != denial.GetDenialId() || md["version"] != "1.8.0" {
			t.Errorf("denial event %v; want HTTP Activity, denied, denial id %s", e, denial.GetDenialId())
		}
	}
	if denials != 1 {
		t.Errorf("%d denial events for /v2/denied in the proxy's file, want 1", denials)
	}

	// The gateway's file: the policy set once with actor and both hashes,
	// the approval once, the proposal as a finding.
	var sets, approvals, findings int
	for _, e := range readOCSF(t, gwFile) {
		switch {
		case unmapped(e, "action") == "policy.set" && dig(e, "unmapped", "detail", "source") == "set":
			sets++
			actor, _ := dig(e, "actor", "user", "name").(string)
			before, _ := dig(e, "entity", "data", "hash").(string)
			after, _ := dig(e, "entity_result", "data", "hash").(string)
			if e["class_uid"] != float64(3004) || actor == "" || actor == "unknown" || before == "" || after == "" || before == after || e["status_id"] != float64(1) || e["activity_id"] != float64(3) {
				t.Errorf("policy set event %v", e)
			}
		case isApproval(e):
			approvals++
			if e["activity_name"] != "Approve" || e["comment"] != "carrier status" || unmapped(e, "target") != id {
				t.Errorf("approval event %v", e)
			}
		case e["class_uid"] == float64(2004):
			findings++
		}
	}
	if sets != 1 || approvals != 1 || findings == 0 {
		t.Errorf("gateway file: %d policy sets, %d approvals, %d findings; want 1, 1, some", sets, approvals, findings)
	}
}

// A proxy whose OCSF sink is down (a HEC collector refusing
// connections) drops its events, counts them, and ships the count with
// its decision records: the gateway exports it as
// portcullis_proxy_ocsf_dropped_total, the proxy having no /metrics.
func TestProxyOCSFDropsReachTheGateway(t *testing.T) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") }))
	defer upstream.Close()
	upPort := upstream.Listener.Addr().(*net.TCPAddr).Port
	down, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	collector := "http://" + down.Addr().String() + "/services/collector/event"
	down.Close() // nobody listens there: the sink's every write is refused

	dir := t.TempDir()
	gw := startGatewayProcess(t, []string{"PORTCULLIS_BOOTSTRAP_TOKEN=" + pushAdminToken, "PORTCULLIS_DATABASE_URL="},
		"--data-dir", filepath.Join(dir, "gateway"))
	defer gw.stop(t)
	gatewayURL := "http://" + gw.addr
	api := newPushAPI(gatewayURL)
	created, err := api.sandbox.CreateSandbox(t.Context(), &portcullisv1.CreateSandboxRequest{Name: "agent-1", Policy: pushDoc(upPort, "v1")})
	if err != nil {
		t.Fatal(err)
	}
	tokenFile, hecToken := filepath.Join(dir, "token"), filepath.Join(dir, "hec-token")
	if err := os.WriteFile(tokenFile, []byte(created.GetToken()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(hecToken, []byte("hec-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	px := startOCSFProxy(t, gatewayURL, tokenFile, filepath.Join(dir, "p1"), "p1", "--ocsf-hec-url", collector, "--ocsf-hec-token-file", hecToken)
	defer px.stop(t)
	api.waitStatuses(t, []string{"p1"}, "version 1 applied", func(p *portcullisv1.ProxyStatus) bool { return p.GetConnected() && p.GetAppliedVersion() == 1 })
	const requests = 5
	for range requests {
		px.wantStatus(t, upstream.URL, "/v1/a", 200)
	}
	dropped := func() float64 {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, gatewayURL+"/metrics", nil)
		req.Header.Set("Authorization", "Bearer "+pushAdminToken)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return -1
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "portcullis_proxy_ocsf_dropped_total "); ok {
				var n float64
				fmt.Sscan(v, &n)
				return n
			}
		}
		return -1
	}
	if err := pollUntil(20*time.Second, func() bool { return dropped() >= requests }); err != nil {
		t.Fatalf("portcullis_proxy_ocsf_dropped_total = %v; want at least %d (one event per decision, none written)", dropped(), requests)
	}
}
