package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/portcullis-dev/portcullis/gateway"
	"github.com/portcullis-dev/portcullis/gateway/gatewaytest"
)

// A token made with --ttl works until it expires, then is refused as
// expired (not merely invalid); token list shows the expiry.
func TestTokenTTL(t *testing.T) {
	g := startGateway(t, func(c *gateway.Config) { c.Now = time.Now })
	res := g.json(t, gatewaytest.AdminToken, "token", "create", "--role", "operator", "--name", "short", "--ttl", "2s")
	tok, _ := res["token"].(string)
	if tok == "" || res["expires_at"] == nil {
		t.Fatalf("token create --ttl 2s -o json = %v, want a token and expires_at", res)
	}
	g.must(t, tok, "sandbox", "list")
	list := g.must(t, gatewaytest.AdminToken, "token", "list")
	if !strings.Contains(list, "EXPIRES") {
		t.Errorf("token list has no EXPIRES column:\n%s", list)
	}
	listed := g.json(t, gatewaytest.AdminToken, "token", "list")["tokens"].([]any)
	var seen bool
	for _, x := range listed {
		if m := x.(map[string]any); m["name"] == "short" {
			seen = m["expiresAt"] != nil || m["expires_at"] != nil
		}
	}
	if !seen {
		t.Errorf("token list -o json: no expiry for short in %v", listed)
	}
	time.Sleep(2100 * time.Millisecond)
	_, stderr, code := g.cli(t, tok, "sandbox", "list")
	if code != exitNo || !strings.Contains(stderr, "token expired at") {
		t.Fatalf("expired token: exit %d, stderr %q; want exit %d saying it expired", code, stderr, exitNo)
	}
	for _, ttl := range []string{"0s", "-1h"} {
		_, stderr, code := g.cli(t, gatewaytest.AdminToken, "token", "create", "--role", "operator", "--name", "never", "--ttl", ttl)
		if code != exitInvalid || !strings.Contains(stderr, "ttl: must be a positive duration") {
			t.Errorf("--ttl %s: exit %d, stderr %q; want a refusal", ttl, code, stderr)
		}
	}
}

// Break-glass: an admin token made offline in a SQLite data dir, with no
// gateway and no token, works against the gateway started on it after,
// and the audit log says it was made so. Only admin tokens are made so.
func TestTokenBreakGlass(t *testing.T) {
	dir := t.TempDir()
	_, stderr, code := runCLI(t, "migrate", "--data-dir", dir)
	ok(t, code, stderr)
	if _, stderr, code := runCLI(t, "token", "create", "--role", "operator", "--name", "op", "--data-dir", dir); code != exitInvalid || !strings.Contains(stderr, "admin token") {
		t.Errorf("offline operator token: exit %d, stderr %q; want a refusal", code, stderr)
	}
	stdout, stderr, code := runCLI(t, "token", "create", "--role", "admin", "--name", "rescue", "--data-dir", dir, "--ttl", "1h", "-o", "json")
	ok(t, code, stderr)
	tok, _ := decodeJSON(t, stdout)["token"].(string)
	if !strings.HasPrefix(tok, "pcs_") {
		t.Fatalf("break-glass token create printed %q", stdout)
	}
	gw := gatewaytest.StartOn(t, filepath.Join(dir, "portcullis.db"))
	cli := func(args ...string) string {
		t.Helper()
		stdout, stderr, code := runCLI(t, append([]string{"--gateway", gw.URL, "--token", tok}, args...)...)
		ok(t, code, stderr)
		return stdout
	}
	cli("sandbox", "create", "orders")
	audit := cli("audit", "list")
	if !strings.Contains(audit, gateway.BreakGlassActor) || !strings.Contains(audit, "rescue") {
		t.Errorf("audit list has no break-glass entry:\n%s", audit)
	}
	// The bootstrap token was not made: the store had an admin token.
	if _, _, code := runCLI(t, "--gateway", gw.URL, "--token", gatewaytest.AdminToken, "sandbox", "list"); code != exitNo {
		t.Errorf("bootstrap token on a store with an admin token: exit %d, want refused", code)
	}
}
