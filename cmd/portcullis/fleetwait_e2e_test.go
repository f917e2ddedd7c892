package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/portcullis-dev/portcullis/gateway/gatewaytest"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

// --wait counts the sandbox's proxies across the fleet, with a real proxy
// process: through replica B it waits for a proxy streaming from replica
// A (known to B only from the store) until it ACKed; and once that proxy
// has gone, just now, as one failing over does, it is still waited for —
// pending until --wait-timeout, exit 1 naming it — not ignored as "no
// proxy connected, nothing to wait for".
func TestWaitCountsTheFleet(t *testing.T) {
	a := gatewaytest.Start(t, "postgres")
	b := a.Replica()
	admin := gatewaytest.AdminToken
	dir := t.TempDir()
	doc := func(paths ...string) string {
		return writeFile(t, strings.Join(paths, "-")+".yaml", pushDoc(1, paths...))
	}
	created := jsonOut(t, a, admin, "sandbox", "create", "agent-1", "-f", doc("v1"))
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(created["token"].(string)), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startProxyProcess(t, a.URL, tokenFile, filepath.Join(dir, "p"), "p1")
	newPushAPIWith(a.URL, admin).waitStatuses(t, []string{"p1"}, "connected to A with version 1", func(s *portcullisv1.ProxyStatus) bool {
		return s.GetConnected() && s.GetAppliedVersion() == 1
	})

	stdout, stderr, code := cliAgainst(t, b, admin, "policy", "set", "agent-1", "-f", doc("v1", "v2"), "--wait", "-o", "json")
	if code != exitOK {
		t.Fatalf("set --wait through B: exit %d, stderr %s", code, stderr)
	}
	if v, e := waited(t, stdout); v != 2 || e.counts(t) != [4]int{1, 0, 0, 1} {
		t.Fatalf("set --wait through B, the proxy on A: version %d, enforcement %+v; want p1 acked", v, e)
	} else if state, _ := e.state("p1"); state != "acked" {
		t.Fatalf("p1 is %q, want acked", state)
	}

	// The proxy goes (killed, as its host died): no replica has it now,
	// but the fleet saw it just now, so a wait is for it, bounded.
	p.kill()
	newPushAPIWith(b.URL, admin).waitStatuses(t, []string{"p1"}, "disconnected", func(s *portcullisv1.ProxyStatus) bool { return !s.GetConnected() })
	stdout, stderr, code = cliAgainst(t, b, admin, "policy", "set", "agent-1", "-f", doc("v1", "v3"), "--wait", "--wait-timeout", "2s", "-o", "json")
	if code != exitNo || !strings.Contains(stderr, "not enforced within 2s") || !strings.Contains(stderr, "still pending: p1") {
		t.Fatalf("set --wait with p1 just gone: exit %d, stderr %s; want 1 naming p1 pending", code, stderr)
	}
	if v, e := waited(t, stdout); v != 3 || e.counts(t) != [4]int{0, 0, 1, 1} {
		t.Fatalf("set --wait with p1 just gone: version %d, enforcement %+v", v, e)
	}
}
