package main

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
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
	// A sandbox that is not there is said so before anything is asked.
	_, stderr, err = runTerminal(t, "nope\n", append(gw, "sandbox", "delete", "nope")...)
	if err == nil || strings.Contains(stderr, "Type the sandbox's name") || !strings.Contains(err.Error(), `sandbox "nope" not found`) {
		t.Fatalf("delete nope: err %v, stderr %q; want not found, nothing asked", err, stderr)
	}
}

// A --gateway that is another web server exits 4 saying so; one where
// nothing listens says it is unreachable.
func TestWrongGateway(t *testing.T) {
	notFound := httptest.NewServer(http.NotFoundHandler())
	defer notFound.Close()
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, "<html>a wiki</html>")
	}))
	defer page.Close()
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()

	for _, tt := range []struct {
		url, want string
	}{
		{notFound.URL, "error: " + notFound.URL + " is not a Portcullis gateway: it answered 404 Not Found"},
		{page.URL, "error: " + page.URL + " is not a Portcullis gateway: it answered 200 OK"},
		{closed.URL, "error: gateway " + closed.URL + " is unreachable: "},
	} {
		for _, args := range [][]string{{"sandbox", "list"}, {"logs", "orders", "--tail"}, {"proposals", "show", "1"}} {
			_, stderr, code := runCLI(t, append([]string{"--gateway", tt.url, "--token", "pcs_x"}, args...)...)
			if code != exitUnavailable || !strings.HasPrefix(stderr, tt.want) {
				t.Errorf("%v at %s: exit %d, stderr %q; want exit 4 and %q", args, tt.url, code, stderr, tt.want)
			}
		}
	}
}

// A mistyped subcommand gets the nearest ones suggested, whatever flags
// follow it; the servers' help leaves out the client flags.
func TestSuggestionsAndHelp(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"sandbox", "lst"}, `unknown command "lst" for "portcullis sandbox"; did you mean get or list?`},
		{[]string{"policy", "st", "orders", "-f", "p.yaml"}, `unknown command "st" for "portcullis policy"; did you mean fmt, get or set?`},
		{[]string{"audit", "verfy"}, "did you mean verify?"},
	} {
		_, stderr, code := runCLI(t, tt.args...)
		if code != exitInvalid || !strings.Contains(stderr, tt.want) || strings.Contains(stderr, "shorthand") {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and %q", tt.args, code, stderr, tt.want)
		}
	}
	for _, tt := range []struct {
		args   []string
		client bool
	}{
		{[]string{"gateway", "--help"}, false},
		{[]string{"demo", "mcp-server", "--help"}, false},
		{[]string{"migrate", "--help"}, false},
		{[]string{"sandbox", "list", "--help"}, true},
		{[]string{"proxy", "--help"}, true}, // a gateway-mode proxy takes --gateway and --token-file
	} {
		stdout, stderr, code := runCLI(t, tt.args...)
		ok(t, code, stderr)
		if has := strings.Contains(stdout, "--gateway URL") && strings.Contains(stdout, "--token TOKEN"); has != tt.client {
			t.Errorf("%v lists --gateway and --token: %v, want %v\n%s", tt.args, has, tt.client, stdout)
		}
	}
}
