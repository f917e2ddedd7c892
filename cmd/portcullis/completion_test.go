package main

import (
	"strings"
	"testing"

	"github.com/portcullis-dev/portcullis/gateway/gatewaytest"
)

// Shell completion offers the gateway's sandbox names and pending
// proposal ids, and nothing (not files) when the gateway cannot say.
func TestCompletionFromGateway(t *testing.T) {
	q := newQueue(t, 2, false) // one approval of two: still pending
	g, admin := q.g, gatewaytest.AdminToken
	g.must(t, admin, "sandbox", "create", "shipping")
	complete := func(args ...string) []string {
		t.Helper()
		stdout := g.must(t, admin, append([]string{"__complete"}, args...)...)
		lines := strings.Split(strings.TrimSpace(stdout), "\n")
		if last := lines[len(lines)-1]; last != ":4" { // ShellCompDirectiveNoFileComp
			t.Fatalf("__complete %v: directive %q; want :4 (no files)", args, last)
		}
		return lines[:len(lines)-1]
	}
	for _, args := range [][]string{
		{"sandbox", "get", ""},
		{"policy", "set", ""},
		{"logs", ""},
		{"proposals", "list", "--sandbox", ""},
	} {
		got := strings.Join(complete(args...), ",")
		if got != "orders,shipping" {
			t.Errorf("__complete %v = %q; want orders,shipping", args, got)
		}
	}
	if got := complete("sandbox", "get", "orders", ""); len(got) != 0 {
		t.Errorf("a second argument completed with %q", got)
	}
	ids := complete("proposals", "approve", "")
	if len(ids) != 1 || !strings.HasPrefix(ids[0], q.id+"\torders: ") {
		t.Errorf("__complete proposals approve = %q; want the pending proposal %s", ids, q.id)
	}
	// A gateway that cannot be reached completes nothing, quickly.
	stdout, _, _ := runCLI(t, "--gateway", "http://127.0.0.1:1", "--token", admin, "__complete", "sandbox", "get", "")
	if strings.TrimSpace(stdout) != ":4" {
		t.Errorf("unreachable gateway: %q; want no names", stdout)
	}
}
