package main

import (
	"net"
	"strings"
	"testing"

	"github.com/portcullis-dev/portcullis/gateway/gatewaytest"
	"github.com/portcullis-dev/portcullis/policy"
)

// quickstartWarning is where the gateway warns about
// testdata/quickstart.yaml: an exact host without allowed_ips.
const quickstartWarning = "warning: network_policies.github_api.endpoints[0].host: "

// policyHash is the hash of the policy in a file, as the gateway stores it.
func policyHash(t *testing.T, doc []byte) string {
	t.Helper()
	p, _, err := policy.Parse(doc)
	if err != nil {
		t.Fatal(err)
	}
	return p.Hash()
}

// withBinary is quickstart with wget beside curl: another version.
func withBinary(doc []byte) string {
	return strings.Replace(string(doc), "- { path: /usr/bin/curl }", "- { path: /usr/bin/curl }\n      - { path: /usr/bin/wget }", 1)
}

func TestSandboxCommands(t *testing.T) {
	g := startGateway(t)
	admin := gatewaytest.AdminToken
	doc := mustReadFile(t, "testdata/quickstart.yaml")

	t.Run("create json", func(t *testing.T) {
		stdout, stderr, code := g.cli(t, admin, "sandbox", "create", "orders", "-f", "testdata/quickstart.yaml", "-o", "json")
		ok(t, code, stderr)
		m := decodeJSON(t, stdout)
		hasKeys(t, m, "name", "token", "sandbox", "policy_version")
		if pv := m["policy_version"].(map[string]any); pv["version"] != float64(1) || pv["hash"] != policyHash(t, doc) {
			// Versions are JSON numbers; the hash is the file's: the
			// policy was sent as given.
			t.Errorf("policy_version = %v", pv)
		}
		// The token printed is the sandbox's own: it reads its policy.
		tok, _ := m["token"].(string)
		if _, stderr, code := g.cli(t, tok, "policy", "get", "orders"); code != exitOK {
			t.Errorf("the printed token does not read the sandbox's policy: exit %d, %s", code, stderr)
		}
		if !strings.Contains(stderr, quickstartWarning) {
			t.Errorf("warnings not on stderr:\n%s", stderr)
		}
	})

	t.Run("create text from stdin", func(t *testing.T) {
		stdout, stderr, code := g.cliWith(t, cliInput{stdin: string(doc)}, admin, "sandbox", "create", "shipping", "-f", "-")
		ok(t, code, stderr)
		if got := g.json(t, admin, "policy", "get", "shipping")["hash"]; got != policyHash(t, doc) {
			t.Errorf("stdin not sent as the policy: stored hash %v", got)
		}
		for _, want := range []string{"sandbox shipping created", "policy: version 1 (sha256 " + short(policyHash(t, doc)) + ")", "token:  pcs_"} {
			if !strings.Contains(stdout, want) {
				t.Errorf("stdout lacks %q:\n%s", want, stdout)
			}
		}
	})

	// orders moves to version 3; empty-sandbox has no policy.
	g.must(t, admin, "sandbox", "create", "empty-sandbox")
	g.mustWith(t, cliInput{stdin: withBinary(doc)}, admin, "policy", "set", "orders", "-f", "-")
	g.must(t, admin, "policy", "set", "orders", "-f", "testdata/quickstart.yaml")
	orders := g.json(t, admin, "sandbox", "get", "orders")

	t.Run("list", func(t *testing.T) {
		stdout := g.must(t, admin, "sandbox", "list")
		ls := lines(stdout)
		if len(ls) != 4 || !strings.HasPrefix(ls[0], "NAME") {
			t.Fatalf("want a header and three rows:\n%s", stdout)
		}
		var row string
		for _, l := range ls {
			if strings.HasPrefix(l, "orders ") {
				row = l
			}
		}
		if !strings.Contains(row, short(orders["current_hash"])) || !strings.Contains(row, secondsOf(t, orders["created_at"])) {
			t.Errorf("orders row %q; want its short hash and creation time:\n%s", row, stdout)
		}
		if strings.Index(ls[0], "VERSION") != strings.Index(row, "3") {
			t.Errorf("columns not aligned:\n%s", stdout)
		}

		m := g.json(t, admin, "sandbox", "list")
		s, _ := m["sandboxes"].([]any)
		versions := map[any]any{}
		for _, sb := range s {
			versions[sb.(map[string]any)["name"]] = sb.(map[string]any)["current_version"]
		}
		if len(s) != 3 || versions["orders"] != float64(3) || versions["empty-sandbox"] != nil {
			t.Errorf("sandboxes = %v", m["sandboxes"])
		}
	})

	t.Run("get", func(t *testing.T) {
		if got := field(t, g.must(t, admin, "sandbox", "get", "orders"), "version"); got != "3" {
			t.Errorf("version %q, want 3", got)
		}
	})

	t.Run("delete", func(t *testing.T) {
		if m := g.json(t, admin, "sandbox", "delete", "orders", "--yes"); m["name"] != "orders" {
			t.Errorf("json = %v", m)
		}
		if _, stderr, code := g.cli(t, admin, "sandbox", "get", "orders"); code != exitNo || !strings.Contains(stderr, "not found") {
			t.Errorf("after delete, get: exit %d, stderr %q; want not found", code, stderr)
		}
	})

	t.Run("rotate-token", func(t *testing.T) {
		old := g.json(t, admin, "sandbox", "rotate-token", "shipping")["token"].(string)
		m := g.json(t, admin, "sandbox", "rotate-token", "shipping")
		tok, _ := m["token"].(string)
		if m["name"] != "shipping" || !strings.HasPrefix(tok, "pcs_") || tok == old {
			t.Errorf("json = %v", m)
		}
		if _, _, code := g.cli(t, tok, "policy", "get", "shipping"); code != exitOK {
			t.Errorf("the new token is refused: exit %d", code)
		}
		if _, _, code := g.cli(t, old, "policy", "get", "shipping"); code != exitNo {
			t.Errorf("the rotated-out token still works: exit %d", code)
		}
	})
}

func TestTokenCommands(t *testing.T) {
	g := startGateway(t)
	admin := gatewaytest.AdminToken
	g.must(t, admin, "sandbox", "create", "orders")

	m := g.json(t, admin, "token", "create", "--role", "operator", "--name", "alice")
	hasKeys(t, m, "name", "token", "role")
	alice, _ := m["token"].(string)
	if m["name"] != "alice" || m["role"] != "operator" {
		t.Errorf("json = %v", m)
	}
	// An operator reads, and may not write.
	if _, _, code := g.cli(t, alice, "sandbox", "list"); code != exitOK {
		t.Errorf("alice cannot read: exit %d", code)
	}
	if _, _, code := g.cli(t, alice, "sandbox", "create", "mine"); code != exitNo {
		t.Errorf("alice can create sandboxes: exit %d", code)
	}
	g.json(t, admin, "token", "create", "--role", "operator", "--name", "bob")
	g.must(t, admin, "token", "revoke", "bob")

	stdout := g.must(t, admin, "token", "list")
	var bob, sandbox string
	for _, l := range lines(stdout) {
		f := strings.Fields(l)
		switch {
		case f[0] == "bob":
			bob = l
		case len(f) > 2 && f[1] == "sandbox":
			sandbox = f[2]
		}
	}
	if !strings.Contains(stdout, "REVOKED") || strings.HasSuffix(bob, "-") || sandbox != "orders" ||
		strings.Contains(stdout, admin) || strings.Contains(stdout, alice) {
		t.Errorf("table (want bob revoked, the orders sandbox's token, no secrets):\n%s", stdout)
	}

	stdout = g.must(t, admin, "token", "revoke", "alice")
	if stdout != "token alice revoked\n" {
		t.Errorf("stdout:\n%s", stdout)
	}
	if _, stderr, code := g.cli(t, alice, "sandbox", "list"); code != exitNo || !strings.Contains(stderr, "token revoked") {
		t.Errorf("a revoked token: exit %d, stderr %q", code, stderr)
	}
}

// TestTokenSentry: a sentry token is created with its event source as its
// name, shows in the list with its role and no sandbox, is refused by the
// commands that exist today, and is revoked by that name.
func TestTokenSentry(t *testing.T) {
	g := startGateway(t)
	admin := gatewaytest.AdminToken
	m := g.json(t, admin, "token", "create", "--role", "sentry", "--name", "urn:dpu:node-17")
	watchdog, _ := m["token"].(string)
	if m["name"] != "urn:dpu:node-17" || m["role"] != "sentry" || watchdog == "" {
		t.Fatalf("json = %v", m)
	}
	var row []string
	for _, l := range lines(g.must(t, admin, "token", "list")) {
		if f := strings.Fields(l); f[0] == "urn:dpu:node-17" {
			row = f
		}
	}
	if len(row) < 3 || row[1] != "sentry" || row[2] != "-" {
		t.Errorf("token list row of the sentry token = %q, want role sentry and no sandbox", row)
	}
	if _, stderr, code := g.cli(t, watchdog, "sandbox", "list"); code != exitNo || !strings.Contains(stderr, "sentry") {
		t.Errorf("sandbox list with a sentry token: exit %d, stderr %q", code, stderr)
	}
	if _, stderr, code := g.cli(t, admin, "token", "create", "--role", "sentry", "--name", "node 17"); code == exitOK || !strings.Contains(stderr, "name") {
		t.Errorf("a sentry token named with a space: exit %d, stderr %q", code, stderr)
	}
	// Limited to the sandboxes it watches: shown in the list.
	g.must(t, admin, "token", "create", "--role", "sentry", "--name", "urn:dpu:node-18", "--sandboxes", "support,team-a-*")
	row = nil
	for _, l := range lines(g.must(t, admin, "token", "list")) {
		if f := strings.Fields(l); f[0] == "urn:dpu:node-18" {
			row = f
		}
	}
	if len(row) < 3 || row[2] != "support,team-a-*" {
		t.Errorf("token list row of the limited sentry token = %q, want its globs", row)
	}
	for _, c := range [][]string{
		{"--role", "sentry", "--name", "urn:dpu:node-19", "--sandboxes", "team-[a"},
		{"--role", "operator", "--name", "bob", "--sandboxes", "support"},
	} {
		if _, stderr, code := g.cli(t, admin, append([]string{"token", "create"}, c...)...); code == exitOK || !strings.Contains(stderr, "sandboxes") {
			t.Errorf("token create %v: exit %d, stderr %q", c, code, stderr)
		}
	}
	if out := g.must(t, admin, "token", "list"); strings.Contains(out, "node-19") || strings.Contains(out, "bob") {
		t.Errorf("a refused token was stored:\n%s", out)
	}
	g.must(t, admin, "token", "revoke", "urn:dpu:node-17")
}

func TestPolicySet(t *testing.T) {
	g := startGateway(t)
	admin := gatewaytest.AdminToken
	doc := mustReadFile(t, "testdata/quickstart.yaml")
	g.must(t, admin, "sandbox", "create", "orders")
	g.must(t, admin, "sandbox", "create", "fresh")

	t.Run("json", func(t *testing.T) {
		for i, in := range []string{string(doc), withBinary(doc)} {
			// No --expect-version: the second set applies over version 1.
			stdout, stderr, code := g.cliWith(t, cliInput{stdin: in}, admin, "policy", "set", "orders", "-f", "-", "-o", "json")
			ok(t, code, stderr)
			m := decodeJSON(t, stdout)
			hasKeys(t, m, "version", "hash", "policy", "sandbox", "created_at")
			if m["version"] != float64(i+1) || m["hash"] != policyHash(t, []byte(in)) {
				t.Errorf("set %d: version %v hash %v", i+1, m["version"], m["hash"])
			}
			if _, ok := m["unchanged"]; ok {
				t.Errorf("unchanged present for a stored version: %v", m)
			}
		}
	})

	t.Run("expect-version 0 is sent", func(t *testing.T) {
		stdout := g.must(t, admin, "policy", "set", "fresh", "-f", "testdata/quickstart.yaml", "--expect-version", "0")
		if !strings.HasPrefix(stdout, "fresh: version 1 (sha256 "+short(policyHash(t, doc))+")") {
			t.Errorf("stdout:\n%s", stdout)
		}
		// 0 is sent, not left out: a sandbox with a policy refuses it.
		_, stderr, code := g.cli(t, admin, "policy", "set", "orders", "-f", "testdata/quickstart.yaml", "--expect-version", "0")
		if code != exitConflict || !strings.Contains(stderr, "expected version 0, but the current version of \"orders\" is 2") {
			t.Errorf("exit %d, stderr %q; want 3", code, stderr)
		}
	})

	t.Run("unchanged", func(t *testing.T) {
		in := cliInput{stdin: withBinary(doc)}
		stdout, stderr, code := g.cliWith(t, in, admin, "policy", "set", "orders", "-f", "-", "--expect-version", "2")
		ok(t, code, stderr)
		if stdout != "orders: unchanged, still version 2\n" {
			t.Errorf("stdout:\n%s", stdout)
		}
		// The expected version is sent: a stale one is a conflict.
		if _, stderr, code := g.cliWith(t, in, admin, "policy", "set", "orders", "-f", "-", "--expect-version", "1"); code != exitConflict {
			t.Errorf("stale --expect-version: exit %d, stderr %q", code, stderr)
		}
		stdout, stderr, code = g.cliWith(t, in, admin, "policy", "set", "orders", "-f", "-", "-o", "json")
		ok(t, code, stderr)
		if m := decodeJSON(t, stdout); m["unchanged"] != true || m["version"] != float64(2) {
			t.Errorf("json = %v", m)
		}
	})

	t.Run("problems", func(t *testing.T) {
		stdout, stderr, code := g.cli(t, admin, "policy", "set", "orders", "-f", "testdata/invalid.yaml")
		if code != exitInvalid || stdout != "" {
			t.Fatalf("exit code %d, stdout %q", code, stdout)
		}
		if m := methods(g.took()); !strings.HasSuffix(m, "PolicyService.SetPolicy") {
			t.Errorf("calls %s: the gateway did not judge the document", m)
		}
		for _, want := range []string{
			"error: invalid policy:\n",
			"  network_policies.github_api.endpoints[0].hots: unknown field\n",
			"  network_policies.github_api.endpoints[0].port: must be between 1 and 65535\n",
		} {
			if !strings.Contains(stderr, want) {
				t.Errorf("stderr lacks %q:\n%s", want, stderr)
			}
		}
	})
}

// readV3 is quickstart renamed, with an entry for python3 added.
func readV3(doc []byte) string {
	return strings.Replace(string(doc), "github-api-readonly", "github-api", 1) + `  shipping:
    name: shipping
    endpoints:
      - { host: ship.example.com, port: 443, protocol: rest, access: read-only }
    binaries:
      - { path: /usr/bin/python3 }
`
}

func TestPolicyReadCommands(t *testing.T) {
	g := startGateway(t)
	admin := gatewaytest.AdminToken
	doc := mustReadFile(t, "testdata/quickstart.yaml")
	// Version 1 with wget, 2 quickstart, 3 renamed with shipping.
	g.mustWith(t, cliInput{stdin: withBinary(doc)}, admin, "sandbox", "create", "orders", "-f", "-")
	g.must(t, admin, "policy", "set", "orders", "-f", "testdata/quickstart.yaml")
	g.mustWith(t, cliInput{stdin: readV3(doc)}, admin, "policy", "set", "orders", "-f", "-")

	t.Run("rollback", func(t *testing.T) {
		stdout, stderr, code := g.cli(t, admin, "policy", "rollback", "orders", "--to", "2", "--expect-version", "3", "-o", "json")
		ok(t, code, stderr)
		m := decodeJSON(t, stdout)
		hasKeys(t, m, "version", "hash", "policy")
		if m["version"] != float64(4) || m["hash"] != policyHash(t, doc) || m["source"] != "rollback" {
			t.Errorf("json = %v; want version 4 with version 2's content", m)
		}
		if _, stderr, code := g.cli(t, admin, "policy", "rollback", "orders", "--to", "2", "--expect-version", "3"); code != exitConflict {
			t.Errorf("stale --expect-version: exit %d, stderr %q; want 3", code, stderr)
		}
	})

	t.Run("get yaml is the canonical document", func(t *testing.T) {
		stdout := g.must(t, admin, "policy", "get", "orders", "--version", "1", "-o", "yaml")
		want, _, _ := runCLIWith(t, cliInput{stdin: withBinary(doc)}, "policy", "fmt", "-")
		if stdout != want {
			t.Errorf("get -o yaml:\n%s\nwant (policy fmt):\n%s", stdout, want)
		}
	})

	t.Run("get json", func(t *testing.T) {
		m := g.json(t, admin, "policy", "get", "orders")
		hasKeys(t, m, "version", "hash", "policy", "source")
		if m["version"] != float64(4) || m["policy"].(map[string]any)["version"] != float64(1) {
			t.Errorf("json = %v; want the current version, 4", m)
		}
	})

	t.Run("get text", func(t *testing.T) {
		stdout := g.must(t, admin, "policy", "get", "orders")
		if !strings.Contains(stdout, "version: 4") || !strings.Contains(stdout, "---\nversion: 1\n") {
			t.Errorf("stdout:\n%s", stdout)
		}
	})

	t.Run("history", func(t *testing.T) {
		vs, _ := g.json(t, admin, "policy", "history", "orders")["versions"].([]any)
		if len(vs) != 4 || vs[3].(map[string]any)["source"] != "rollback" {
			t.Errorf("versions = %v", vs)
		}
		if stdout := g.must(t, admin, "policy", "history", "orders"); !strings.Contains(stdout, "rollback (rollback_to=2)") {
			t.Errorf("stdout:\n%s", stdout)
		}
	})

	t.Run("diff", func(t *testing.T) {
		stdout := g.must(t, admin, "policy", "diff", "orders", "1", "3")
		for _, want := range []string{
			"orders: version 1 (sha256 " + short(policyHash(t, []byte(withBinary(doc)))) + ") → 3 (sha256 " + short(policyHash(t, []byte(readV3(doc)))) + ")\n",
			"+ network_policies.shipping: added network policy shipping: ",
			"- network_policies.github_api.binaries: removed binary /usr/bin/wget\n",
			`~ network_policies.github_api.name: name changed from "github-api-readonly" to "github-api" ("github-api-readonly" → "github-api")` + "\n",
		} {
			if !strings.Contains(stdout, want) {
				t.Errorf("stdout lacks %q:\n%s", want, stdout)
			}
		}
	})
}

// TestErrorExitCodes provokes each kind of gateway answer for real and
// checks its exit code and message, and that the token never appears in
// an error.
func TestErrorExitCodes(t *testing.T) {
	g := startGateway(t)
	admin := gatewaytest.AdminToken
	sb := g.json(t, admin, "sandbox", "create", "orders", "-f", "testdata/quickstart.yaml")["token"].(string)
	tests := []struct {
		name  string
		token string
		args  []string
		msg   string
		want  int
	}{
		{"NotFound", admin, []string{"sandbox", "get", "nope"}, `sandbox "nope" not found`, exitNo},
		{"PermissionDenied", sb, []string{"sandbox", "get", "orders"}, "error: a sandbox token cannot read sandboxes: that takes an admin or operator token", exitNo},
		{"Unauthenticated", "pcs_not-a-token", []string{"sandbox", "get", "orders"}, "invalid token", exitNo},
		{"InvalidArgument", admin, []string{"sandbox", "get", "Bad_Name"}, "name: must be", exitInvalid},
		{"Aborted", admin, []string{"policy", "set", "orders", "-f", "testdata/quickstart.yaml", "--expect-version", "3"}, "expected version 3, but the current version", exitConflict},
		{"FailedPrecondition", admin, []string{"token", "revoke", "admin"}, "refusing to revoke the last admin token", exitConflict},
		{"AlreadyExists", admin, []string{"sandbox", "create", "orders"}, `sandbox "orders" already exists`, exitConflict},
	}
	check := func(t *testing.T, token string, args []string, msg string, want int) {
		t.Helper()
		stdout, stderr, code := g.cli(t, token, args...)
		if code != want {
			t.Errorf("exit code %d, want %d", code, want)
		}
		if stdout != "" || !strings.Contains(stderr, "error: ") || !strings.Contains(stderr, msg) {
			t.Errorf("stdout %q, stderr %q; want %q", stdout, stderr, msg)
		}
		if strings.Contains(stdout+stderr, token) {
			t.Errorf("the token was printed:\n%s%s", stdout, stderr)
		}
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { check(t, tt.token, tt.args, tt.msg, tt.want) })
	}

	t.Run("no token hint", func(t *testing.T) {
		_, stderr, code := runCLI(t, "--gateway", g.url, "sandbox", "list")
		if code != exitNo || !strings.Contains(stderr, "no token given") {
			t.Errorf("code %d, stderr:\n%s", code, stderr)
		}
	})

	t.Run("Internal", func(t *testing.T) {
		// The store gone under the gateway: an error it cannot classify.
		if err := g.Store.Close(); err != nil {
			t.Fatal(err)
		}
		check(t, admin, []string{"sandbox", "get", "orders"}, "internal error", exitNo)
	})

	t.Run("Unavailable", func(t *testing.T) {
		// The gateway stopped behind a proxy that answers 502.
		g.Stop()
		check(t, admin, []string{"sandbox", "get", "orders"}, "error: gateway "+g.url+" unavailable", exitUnavailable)
	})
}

// TestGatewayUnavailable checks exit code 4, "unreachable", when nothing
// listens.
func TestGatewayUnavailable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + l.Addr().String()
	l.Close()
	for _, args := range [][]string{
		{"sandbox", "list"},
		{"policy", "set", "orders", "-f", "testdata/quickstart.yaml"},
		{"token", "list", "-o", "json"},
	} {
		stdout, stderr, code := runCLI(t, append([]string{"--gateway", url, "--token", gatewaytest.AdminToken}, args...)...)
		if code != exitUnavailable {
			t.Errorf("%v: exit code %d, want %d; stderr:\n%s", args, code, exitUnavailable, stderr)
		}
		if stdout != "" || !strings.Contains(stderr, "error: gateway "+url+" is unreachable") || strings.Contains(stderr, gatewaytest.AdminToken) {
			t.Errorf("%v: stdout %q, stderr:\n%s", args, stdout, stderr)
		}
	}
}
