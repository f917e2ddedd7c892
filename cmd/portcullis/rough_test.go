package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/portcullis-dev/portcullis/gateway/gatewaytest"
)

// runTerminal runs the CLI as run does, with stdin taken for a terminal.
func runTerminal(t *testing.T, stdin string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errOut bytes.Buffer
	env := newEnvironment(strings.NewReader(stdin), &out, &errOut, func(string) string { return "" })
	env.interactive = true
	defer env.close()
	root := newRootCmd(env)
	root.SetArgs(args)
	root.SetIn(env.stdin)
	root.SetOut(&out)
	root.SetErr(&errOut)
	err = root.ExecuteContext(t.Context())
	return out.String(), errOut.String(), err
}

// sandbox delete asks on a terminal for the sandbox's name and needs
// --yes anywhere else; nothing is deleted until then.
func TestSandboxDeleteConfirms(t *testing.T) {
	g := startGateway(t)
	admin := gatewaytest.AdminToken
	g.must(t, admin, "sandbox", "create", "orders")
	exists := func() bool {
		t.Helper()
		_, _, code := g.cli(t, admin, "sandbox", "get", "orders")
		return code == exitOK
	}

	_, stderr, code := g.cli(t, admin, "sandbox", "delete", "orders")
	if code != exitInvalid || !strings.Contains(stderr, "--yes") || !exists() {
		t.Fatalf("delete without --yes off a terminal: exit %d, stderr %q, sandbox kept %v; want exit 2 naming --yes, kept", code, stderr, exists())
	}
	gw := []string{"--gateway", g.url, "--token", admin}
	_, stderr, err := runTerminal(t, "order\n", append(gw, "sandbox", "delete", "orders")...)
	if err == nil || !strings.Contains(stderr, "Type the sandbox's name to confirm") || !exists() {
		t.Fatalf("a wrong answer on a terminal: err %v, stderr %q, kept %v; want refused, asked, kept", err, stderr, exists())
	}
	stdout, _, err := runTerminal(t, "orders\n", append(gw, "sandbox", "delete", "orders")...)
	if err != nil || !strings.Contains(stdout, "sandbox orders deleted") || exists() {
		t.Fatalf("the name typed on a terminal: err %v, stdout %q, kept %v; want deleted", err, stdout, exists())
	}
	g.must(t, admin, "sandbox", "create", "orders")
	g.must(t, admin, "sandbox", "delete", "orders", "--yes")
	if exists() {
		t.Fatal("delete --yes kept the sandbox")
	}
}
