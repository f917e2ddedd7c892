//go:build drills

package gateway

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

// proxy is `portcullis proxy` following one replica for a sandbox.
type proxy struct {
	*process
	dataDir string
}

func newProxy(t *testing.T, name, sandbox, gatewayURL, token string) *proxy {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	p := &proxy{dataDir: data, process: newProcess(t, name, "Portcullis proxy listening on ", []string{"PORTCULLIS_TOKEN="},
		"proxy", "--sandbox", sandbox, "--gateway", gatewayURL, "--token-file", tokenFile, "--listen", "127.0.0.1:0",
		"--data-dir", data, "--proxy-id", name, "--max-reconnect-delay", "500ms")}
	p.start()
	return p
}

// waitVersion waits until each proxy persisted version v (or a later
// one) as its last good one — it verified and applied it — and returns,
// per proxy, how long that took from since (-1: not within).
func waitVersion(proxies []*proxy, v uint32, since time.Time, within time.Duration) []time.Duration {
	took := make([]time.Duration, len(proxies))
	left := len(proxies)
	for i := range took {
		took[i] = -1
	}
	for deadline := time.Now().Add(within); left > 0 && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		for i, p := range proxies {
			if took[i] < 0 && readSignedVersion(p.dataDir) >= v {
				took[i] = time.Since(since)
				left--
			}
		}
	}
	return took
}

// TestPostgresRestart: two replicas on a PostgreSQL cluster of the
// drill's own, two setters writing through both, and two real proxies of
// one sandbox, one following each replica. PostgreSQL is stopped with
// pg_ctl -m fast, started again, then crashed (-m immediate) and started
// again (the long variant repeats both, with longer outages).
//
// Asserts: both replicas report not ready (/readyz) while PostgreSQL is
// down, and ready again by themselves after it is back (no restart of
// the replicas) within 60 s; writes through both succeed again; every
// acked write is in the history, versions run without gaps, no document
// is stored twice, the audit chain verifies; after the last write, both
// proxies converge on the current version (within 30 s), and the
// gateways record it as applied. Prints, per outage, the time to not
// ready, PostgreSQL's start, each replica's recovery and the first acked
// write, the proxies' convergence on the version current then (all from
// PostgreSQL's start), then on the last version, and the counts.
func TestPostgresRestart(t *testing.T) {
	modes, running, outage := []string{"fast", "immediate"}, 2*time.Second, 2*time.Second
	if long() {
		modes, running, outage = []string{"fast", "immediate", "fast", "immediate"}, 10*time.Second, 15*time.Second
	}
	pg := newPGCluster(t)
	env := []string{"PORTCULLIS_DATABASE_URL=" + pg.url()}
	a := newGateway(t, "replica-a", env)
	a.start()
	b := newGateway(t, "replica-b", env)
	b.start()
	admin := newClient(a.url, adminToken)

	bu := &burst{t: t, replicas: []*gateway{a, b}, tokens: map[string]string{}, setters: 2}
	for i := range 3 {
		sb := fmt.Sprintf("pg-%d", i)
		bu.sandboxes = append(bu.sandboxes, sb)
		bu.tokens[sb] = createSandbox(t, admin, sb, setDoc("init", i))
	}
	proxies := []*proxy{
		newProxy(t, "proxy-a", "pg-0", a.url, bu.tokens["pg-0"]),
		newProxy(t, "proxy-b", "pg-0", b.url, bu.tokens["pg-0"]),
	}
	for i, took := range waitVersion(proxies, 1, time.Now(), 30*time.Second) {
		if took < 0 {
			t.Fatalf("%s never applied version 1", proxies[i].name)
		}
	}

	ctx, stop := context.WithCancel(t.Context())
	wg := bu.run(ctx)
	for i, mode := range modes {
		time.Sleep(running)
		stopped := time.Now()
		pg.stop(mode)
		stopMs := time.Since(stopped).Milliseconds()
		// Both replicas say so.
		notReady := map[string]time.Duration{}
		for deadline := time.Now().Add(15 * time.Second); len(notReady) < 2 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			for _, g := range bu.replicas {
				if _, seen := notReady[g.name]; !seen && !g.ready() {
					notReady[g.name] = time.Since(stopped)
				}
			}
		}
		for _, g := range bu.replicas {
			if _, seen := notReady[g.name]; !seen {
				t.Errorf("outage %d (%s): %s reported ready for 15s with PostgreSQL down", i+1, mode, g.name)
			}
		}
		time.Sleep(time.Until(stopped.Add(outage)))
		started := time.Now()
		pgStart := pg.start()
		fields := []any{"outage", i + 1, "mode", mode, "pg_stop_ms", stopMs, "pg_start_ms", pgStart.Milliseconds()}
		for _, g := range bu.replicas {
			took := g.waitReady(started, 60*time.Second)
			fields = append(fields, g.name+"_not_ready_ms", notReady[g.name].Milliseconds(), g.name+"_ready_ms", took.Milliseconds())
		}
		// The writers find their way back through both replicas.
		deadline := time.Now().Add(60 * time.Second)
		for {
			if first, ok := bu.led.firstAckedSince(started); ok {
				fields = append(fields, "first_acked_write_ms", first.Milliseconds())
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("outage %d (%s): no write acked within 60s of PostgreSQL's start", i+1, mode)
			}
			time.Sleep(20 * time.Millisecond)
		}
		// The proxies converge on what was committed since, whichever
		// replica committed it.
		cctx, cancel := callCtx(t)
		sb, err := newClient(b.url, adminToken).sandbox.GetSandbox(cctx, &portcullisv1.GetSandboxRequest{Name: "pg-0"})
		cancel()
		if err != nil {
			t.Fatalf("outage %d (%s): get pg-0: %v", i+1, mode, err)
		}
		fields = append(fields, "proxies_at_v", sb.GetCurrentVersion())
		for j, took := range waitVersion(proxies, sb.GetCurrentVersion(), started, 30*time.Second) {
			p := proxies[j]
			if took < 0 {
				t.Errorf("outage %d (%s): %s did not reach version %d within 30s of PostgreSQL's start: it holds %d", i+1, mode, p.name, sb.GetCurrentVersion(), readSignedVersion(p.dataDir))
			}
			fields = append(fields, p.name+"_converge_ms", took.Milliseconds())
		}
		figure(t, "pgrestart", fields...)
	}
	time.Sleep(running)
	stop()
	wg.Wait()
	for k, v := range bu.led.errorKinds() {
		t.Logf("errored calls %s: %s", k, v)
	}
	for _, g := range bu.replicas {
		g.internalErrors(t)
	}

	// The last version of the proxies' sandbox, committed through
	// replica b: the proxy on a hears of it from PostgreSQL.
	cctx, cancel := callCtx(t)
	last, err := newClient(b.url, adminToken).policy.SetPolicy(cctx, &portcullisv1.SetPolicyRequest{Sandbox: "pg-0", Document: setDoc("last", 0)})
	cancel()
	if err != nil {
		t.Fatalf("last set: %v", err)
	}
	committed := time.Now()
	for i, took := range waitVersion(proxies, last.GetVersion(), committed, 30*time.Second) {
		p := proxies[i]
		if took < 0 {
			t.Errorf("%s did not converge on version %d within 30s: it holds %d", p.name, last.GetVersion(), readSignedVersion(p.dataDir))
			continue
		}
		figure(t, "pgrestart", "proxy", p.name, "version", last.GetVersion(), "converge_ms", took.Milliseconds())
	}
	// The gateways' record of it.
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		cctx, cancel := callCtx(t)
		res, err := admin.proxies.ListProxies(cctx, &portcullisv1.ListProxiesRequest{Sandbox: "pg-0"})
		cancel()
		n := 0
		for _, p := range res.GetProxies() {
			if p.GetConnected() && p.GetAppliedVersion() == last.GetVersion() {
				n++
			}
		}
		if err == nil && n == len(proxies) {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("the gateways do not record both proxies connected at version %d: %v, %v", last.GetVersion(), res.GetProxies(), err)
			break
		}
	}

	settle(t, admin)
	h := readHistory(t, admin, bu.sandboxes)
	c := h.verify(&bu.led)
	for _, p := range c.problems {
		t.Error(p)
	}
	ackedSets, errSets, _, _ := bu.led.counts()
	figure(t, "pgrestart", "acked", ackedSets, "found", c.foundSets, "errored", errSets, "errored_committed", c.erroredCommitted,
		"errored_absent", c.erroredAbsent, "versions", c.versions, "audit_entries", h.auditEntries, "audit_verified", true)
	if ackedSets == 0 {
		t.Error("no write was acked: the drill exercised nothing")
	}
}
