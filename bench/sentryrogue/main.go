// Command sentryrogue measures issue 34's "one Sentry source can disable
// quarantine for everyone" on real binaries: for each binary given, a
// gateway (`portcullis gateway`, embedded SQLite, default budgets) with
// ten bystander sandboxes and a culprit followed by a real `portcullis
// proxy`; a rogue sentry source quarantines the ten bystanders in one
// batch, then the legitimate watchdog quarantines the culprit on its own
// (POST /v1/sentry/events). It reports what the rogue froze and held,
// the culprit's action, and the time from the watchdog's POST until the
// culprit's proxy applied the deny-all version (ListProxies), or that it
// never did within -wait. With -scoped the rogue's token is created with
// --sandboxes rogue-* (a binary without scopes ignores the field).
//
//	go run ./bench/sentryrogue before=/tmp/portcullis-main after=/tmp/portcullis
//	go run ./bench/sentryrogue -scoped after=/tmp/portcullis
//	go run ./bench/sentryrogue -json before=… after=…
package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"connectrpc.com/connect/v2"
	"connectrpc.com/connect/v2/connecthttp"

	"github.com/portcullis-dev/portcullis/bench/internal/benchcli"
	"github.com/portcullis-dev/portcullis/bench/internal/benchenv"
	"github.com/portcullis-dev/portcullis/gateway/gatewaytest"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
	"github.com/portcullis-dev/portcullis/proto/portcullis/v1/portcullisv1connect"
)

type config struct {
	policy   string
	scoped   bool
	asJSON   bool
	wait     time.Duration
	bystands int
	runs     int
}

// result is one run of one binary.
type result struct {
	Binary         string  `json:"binary"`
	Run            int     `json:"run"`
	RogueFrozen    int     `json:"rogue_frozen"`
	RogueHeld      int     `json:"rogue_held"`
	RogueRefused   int     `json:"rogue_refused"`
	CulpritStatus  string  `json:"culprit_status"`
	CulpritReason  string  `json:"culprit_reason,omitempty"`
	PostMs         float64 `json:"post_ms"`
	ProxyApplied   bool    `json:"proxy_applied"`
	PostToAppliedM float64 `json:"post_to_proxy_applied_ms,omitempty"`
}

func main() {
	var cfg config
	flag.StringVar(&cfg.policy, "policy", "examples/orders.yaml", "the sandboxes' policy")
	flag.BoolVar(&cfg.scoped, "scoped", false, "create the rogue's token with --sandboxes rogue-* (limited to sandboxes it does not quarantine)")
	flag.BoolVar(&cfg.asJSON, "json", false, "print the report as JSON")
	flag.DurationVar(&cfg.wait, "wait", 10*time.Second, "how long to wait for the culprit's proxy to apply the deny-all")
	flag.IntVar(&cfg.bystands, "bystanders", 10, "sandboxes the rogue quarantines (the fleet's budget is 10)")
	flag.IntVar(&cfg.runs, "runs", 3, "runs per binary")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: go run ./bench/sentryrogue [flags] LABEL=BINARY...\n\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	benchcli.Main("sentryrogue", func(ctx context.Context) error { return run(ctx, cfg, flag.Args()) })
}

func run(ctx context.Context, cfg config, args []string) error {
	if len(args) == 0 {
		return benchcli.Usagef("give at least one LABEL=BINARY")
	}
	policy, err := os.ReadFile(cfg.policy)
	if err != nil {
		return err
	}
	var out []result
	for _, a := range args {
		label, bin, ok := strings.Cut(a, "=")
		if !ok {
			label, bin = filepath.Base(a), a
		}
		for i := range cfg.runs {
			r, err := once(ctx, cfg, bin, string(policy))
			if err != nil {
				return fmt.Errorf("%s: %w", label, err)
			}
			r.Binary, r.Run = label, i+1
			out = append(out, r)
		}
	}
	if cfg.asJSON {
		return benchcli.WriteJSON(os.Stdout, map[string]any{"machine": benchenv.Describe(), "scoped": cfg.scoped, "results": out})
	}
	fmt.Printf("%s; rogue quarantines %d bystanders, then the watchdog the culprit (scoped rogue: %v)\n",
		benchenv.Describe(), cfg.bystands, cfg.scoped)
	fmt.Printf("%-8s %3s %6s %5s %7s %-15s %8s %s\n", "BINARY", "RUN", "FROZEN", "HELD", "REFUSED", "CULPRIT", "POST ms", "POST→PROXY DENY-ALL")
	for _, r := range out {
		applied := fmt.Sprintf("never (within %s)", cfg.wait)
		if r.ProxyApplied {
			applied = fmt.Sprintf("%.1f ms", r.PostToAppliedM)
		}
		fmt.Printf("%-8s %3d %6d %5d %7d %-15s %8.1f %s\n", r.Binary, r.Run, r.RogueFrozen, r.RogueHeld, r.RogueRefused, r.CulpritStatus, r.PostMs, applied)
	}
	return nil
}

// once runs the scenario on a fresh gateway of bin.
func once(ctx context.Context, cfg config, bin, policy string) (result, error) {
	var res result
	dir, err := os.MkdirTemp("", "sentryrogue-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	gw, err := startGateway(ctx, bin, dir)
	if err != nil {
		return res, err
	}
	defer gw.stop()
	c := connect.NewClient(connecthttp.NewTransport(http.DefaultClient, "http://"+gw.addr), gatewaytest.Bearer(gw.admin))
	sandboxes := portcullisv1connect.NewSandboxServiceClient(c)
	tokens := portcullisv1connect.NewTokenServiceClient(c)
	sentry := portcullisv1connect.NewSentryServiceClient(c)
	proxies := portcullisv1connect.NewProxyServiceClient(c)

	culprit, err := sandboxes.CreateSandbox(ctx, &portcullisv1.CreateSandboxRequest{Name: "culprit", Policy: policy})
	if err != nil {
		return res, fmt.Errorf("create culprit: %w", err)
	}
	for i := range cfg.bystands {
		if _, err := sandboxes.CreateSandbox(ctx, &portcullisv1.CreateSandboxRequest{Name: fmt.Sprintf("bystander-%d", i), Policy: policy}); err != nil {
			return res, err
		}
	}
	rogueReq := &portcullisv1.CreateTokenRequest{Name: "sentry://rogue", Role: "sentry"}
	if cfg.scoped {
		rogueReq.Sandboxes = []string{"rogue-*"}
	}
	rogue, err := tokens.CreateToken(ctx, rogueReq)
	if err != nil {
		return res, err
	}
	watchdog, err := tokens.CreateToken(ctx, &portcullisv1.CreateTokenRequest{Name: "sentry://watchdog", Role: "sentry"})
	if err != nil {
		return res, err
	}

	// The culprit's proxy, following the gateway.
	tokenFile := filepath.Join(dir, "culprit.token")
	if err := os.WriteFile(tokenFile, []byte(culprit.GetToken()), 0o600); err != nil {
		return res, err
	}
	px := exec.Command(bin, "proxy", "--listen", "127.0.0.1:0", "--data-dir", filepath.Join(dir, "proxy"),
		"--gateway", "http://"+gw.addr, "--sandbox", "culprit", "--token-file", tokenFile, "--proxy-id", "p1")
	px.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var pxErr bytes.Buffer
	px.Stderr, px.Stdout = &pxErr, io.Discard
	if err := px.Start(); err != nil {
		return res, err
	}
	defer func() {
		px.Process.Signal(syscall.SIGTERM)
		px.Wait()
	}()
	applied := func(v uint32) bool {
		l, err := proxies.ListProxies(ctx, &portcullisv1.ListProxiesRequest{Sandbox: "culprit"})
		if err != nil {
			return false
		}
		for _, p := range l.GetProxies() {
			if p.GetProxyId() == "p1" && p.GetConnected() && p.GetAppliedVersion() >= v {
				return true
			}
		}
		return false
	}
	if !poll(ctx, 60*time.Second, func() bool { return applied(1) }) {
		return res, fmt.Errorf("the culprit's proxy never applied version 1\n%s", pxErr.String())
	}

	// The rogue's flood, then the watchdog's quarantine.
	var flood []map[string]any
	for i := range cfg.bystands {
		flood = append(flood, quarantine("sentry://rogue", fmt.Sprintf("r%d", i), uint64(i+1), fmt.Sprintf("bystander-%d", i)))
	}
	a, _, err := post(ctx, gw.addr, rogue.GetToken(), "application/cloudevents-batch+json", flood)
	if err != nil {
		return res, fmt.Errorf("the rogue's batch: %w", err)
	}
	res.RogueRefused = len(a.Refused)
	_, took, err := post(ctx, gw.addr, watchdog.GetToken(), "application/cloudevents+json", quarantine("sentry://watchdog", "q-culprit", 1, "culprit"))
	if err != nil {
		return res, fmt.Errorf("the watchdog's quarantine: %w", err)
	}
	posted := time.Now().Add(-took)
	res.PostMs = ms(took)
	acts, err := sentry.ListActions(ctx, &portcullisv1.ListSentryActionsRequest{Limit: 100})
	if err != nil {
		return res, err
	}
	var version uint32
	for _, act := range acts.GetActions() {
		switch {
		case act.GetSandbox() == "culprit":
			res.CulpritStatus, res.CulpritReason, version = act.GetStatus(), act.GetReason(), act.GetVersion()
		case act.GetSource() == "sentry://rogue" && act.GetStatus() == "frozen":
			res.RogueFrozen++
		case act.GetSource() == "sentry://rogue" && act.GetStatus() == "held":
			res.RogueHeld++
		}
	}
	if version > 0 {
		deadline := time.Now().Add(cfg.wait)
		for time.Now().Before(deadline) && !applied(version) {
			time.Sleep(2 * time.Millisecond)
		}
		if applied(version) {
			res.ProxyApplied, res.PostToAppliedM = true, ms(time.Since(posted))
		}
	} else {
		// Held: wait as long anyway, to show nothing reaches the proxy.
		time.Sleep(cfg.wait)
		res.ProxyApplied = applied(2)
	}
	return res, nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// poll calls ok until it reports true or within passes.
func poll(ctx context.Context, within time.Duration, ok func() bool) bool {
	deadline := time.Now().Add(within)
	for !ok() {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

func quarantine(source, id string, seq uint64, subject string) map[string]any {
	return map[string]any{
		"specversion": "1.0", "id": id, "source": source, "sequence": seq,
		"type": "portcullis.sentry.v1.quarantine", "subject": subject, "time": time.Now().UTC().Format(time.RFC3339Nano),
		"data": map[string]any{"severity": "critical", "processing": "remediate", "finding": map[string]any{"title": "exfiltration"}},
	}
}

type answer struct {
	Stored  int `json:"stored"`
	Refused []struct {
		Reason string `json:"reason"`
	} `json:"refused"`
}

// post sends body as JSON to the HTTP intake and returns its answer and
// how long the request took.
func post(ctx context.Context, addr, token, media string, body any) (answer, time.Duration, error) {
	var a answer
	raw, err := json.Marshal(body)
	if err != nil {
		return a, 0, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/v1/sentry/events", bytes.NewReader(raw))
	if err != nil {
		return a, 0, err
	}
	req.Header.Set("Content-Type", media)
	req.Header.Set("Authorization", "Bearer "+token)
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return a, 0, err
	}
	defer resp.Body.Close()
	got, _ := io.ReadAll(resp.Body)
	took := time.Since(start)
	if resp.StatusCode != http.StatusOK {
		return a, took, fmt.Errorf("HTTP %d: %s", resp.StatusCode, got)
	}
	return a, took, json.Unmarshal(got, &a)
}

// gateway is `portcullis gateway` on SQLite in a temp dir.
type gateway struct {
	cmd    *exec.Cmd
	exited chan error
	addr   string
	admin  string
}

func startGateway(ctx context.Context, bin, dir string) (*gateway, error) {
	var b [24]byte
	rand.Read(b[:])
	g := &gateway{admin: "pcs_sentryrogue-" + hex.EncodeToString(b[:]), exited: make(chan error, 1)}
	g.cmd = exec.Command(bin, "gateway", "--listen", "127.0.0.1:0", "--data-dir", filepath.Join(dir, "gateway"))
	g.cmd.Env = append(os.Environ(), "PORTCULLIS_BOOTSTRAP_TOKEN="+g.admin, "PORTCULLIS_DATABASE_URL=")
	g.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var stderr strings.Builder
	g.cmd.Stderr = &stderr
	stdout, err := g.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := g.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start gateway: %w", err)
	}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if a, ok := strings.CutPrefix(sc.Text(), "Portcullis gateway listening on "); ok {
				addr <- a
			}
		}
		g.exited <- g.cmd.Wait()
	}()
	select {
	case g.addr = <-addr:
		return g, nil
	case err := <-g.exited:
		return nil, fmt.Errorf("gateway exited: %v\n%s", err, stderr.String())
	case <-time.After(60 * time.Second):
		g.stop()
		return nil, fmt.Errorf("gateway not listening after 60s\n%s", stderr.String())
	case <-ctx.Done():
		g.stop()
		return nil, ctx.Err()
	}
}

func (g *gateway) stop() {
	g.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-g.exited:
	case <-time.After(10 * time.Second):
		g.cmd.Process.Kill()
		<-g.exited
	}
}
