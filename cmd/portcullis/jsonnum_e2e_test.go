package main

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http/httptest"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"github.com/portcullis-dev/portcullis/demo"
	"github.com/portcullis-dev/portcullis/gateway"
	"github.com/portcullis-dev/portcullis/gateway/gatewaytest"
)

// noJSON are the commands that print no JSON whatever -o says: servers,
// PEM and key material.
var noJSON = map[string]string{
	"portcullis gateway":            "a server",
	"portcullis proxy":              "a server",
	"portcullis demo mcp-server":    "a server",
	"portcullis demo agent":         "a scripted agent: prints its steps",
	"portcullis healthcheck":        "an exit code",
	"portcullis doctor":             "one line per check and an exit code",
	"portcullis migrate":            "works on the database",
	"portcullis proxy ca":           "prints PEM",
	"portcullis sandbox ca":         "prints PEM",
	"portcullis signing-key rotate": "works on the database",
	"portcullis backup":             "works on the database",
	"portcullis restore":            "works on the database",
	"portcullis policy fmt":         "prints the document",
	"portcullis run":                "runs a command: what it prints is the command's",
}

// stringsAllowed are the keys under which a string of digits is a
// string by the contract: user-written documents (a policy, a proposal,
// an event's data), free-form string maps, and the version a proxy
// reports in a decision record (a string field of the proxy's own).
var stringsAllowed = map[string]bool{
	"policy": true, "proposal": true, "resulting_policy": true, "suggestion": true, "boundary": true, "data": true,
	"document": true, "detail": true, "provenance": true, "refs": true, "policy_version": true, "arguments": true,
	"target": true, // an audit entry's: a name or a proposal's id
}

var digits = regexp.MustCompile(`^-?[0-9]+$`)

// TestJSONNumbersEverywhere runs every command that prints -o json
// against a real gateway holding one of everything, and walks each
// answer: no number may arrive as a string of digits. Every command of
// the tree is either run here or listed in noJSON, so a new command
// cannot slip past.
func TestJSONNumbersEverywhere(t *testing.T) {
	// One quarantine freezes shipping, the next is held (receiving). The
	// events carry fixed times, so --sentry-max-age is off (negative).
	q := newQueue(t, 2, false, func(c *gateway.Config) {
		c.QuarantineBudget, c.SentrySettle, c.SentryMaxAge = 1, time.Hour, -1
	})
	g, admin := q.g, gatewaytest.AdminToken
	shipRecords(t, g.Gateway, q.sb, mcpDenial("d-1", "refund_order"), mcpDenial("d-2", "cancel_order"))
	for _, sb := range []string{"shipping", "receiving", "scratch"} {
		g.must(t, admin, "sandbox", "create", sb, "-f", "testdata/quickstart.yaml")
	}
	watch := sentryToken(t, g.url, admin)
	postEvents(t, g.url, watch,
		toolAccessEvent("e1", 1, "shipping", "2026-12-01T19:00:00Z"),
		quarantineEvent("e3", 3, "shipping", "2026-12-01T19:01:00Z"),
		quarantineEvent("e4", 4, "receiving", "2026-12-01T19:02:00Z"))
	mcpServer := httptest.NewServer(demo.OrdersHandler(&mcp.StreamableHTTPOptions{Stateless: true, DisableLocalhostProtection: true}))
	defer mcpServer.Close()
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	keyFile := writeFile(t, "node.b64", base64.StdEncoding.EncodeToString(pub)+"\n")
	cur := g.must(t, admin, "policy", "get", "orders", "-o", "yaml")
	curFile := writeFile(t, "current.yaml", cur)
	nextFile := writeFile(t, "next.yaml", strings.Replace(cur, "tools/list", "ping", 1))
	action := fmt.Sprint(g.json(t, admin, "sentry", "actions", "--status", "held")["actions"].([]any)[0].(map[string]any)["id"])
	// Two calls held as the sandbox's proxy files them: one to approve,
	// one to deny.
	heldCall := func(arguments string) string {
		c := gatewaytest.ToolCall(t, "orders", "refund_order", arguments)
		c.PolicyVersion = uint32(g.json(t, admin, "policy", "get", "orders")["version"].(float64))
		return fmt.Sprint(g.HoldCall(t, q.sb, c).ID)
	}
	approveCall, denyCall := heldCall(`{"order_id":"A-1","amount":12.50}`), heldCall(`{"order_id":"A-2","amount":1e2}`)

	runs := []struct {
		token string
		args  []string
		code  int // prove answers 1 when it finds something
	}{
		{"", []string{"version"}, 0},
		{"", []string{"policy", "validate", curFile}, 0},
		{"", []string{"prove", "--current", "testdata/prove/rest-widened/current.yaml", "--proposed", "testdata/prove/rest-widened/proposed.yaml"}, exitNo},
		{"", []string{"mcp", "fingerprint", mcpServer.URL + "/mcp", "--protocol-version", "2026-07-28"}, 0},
		{admin, []string{"sandbox", "list"}, 0},
		{admin, []string{"sandbox", "get", "orders"}, 0},
		{admin, []string{"sandbox", "create", "scratch2"}, 0},
		{admin, []string{"sandbox", "rotate-token", "scratch"}, 0},
		{admin, []string{"sandbox", "credentials", "scratch", "--add", "api.example.com:443"}, 0},
		{admin, []string{"sandbox", "set-boundary", "scratch", "-f", ordersExample}, 0},
		{admin, []string{"sandbox", "tools", "orders"}, 0},
		{admin, []string{"sandbox", "freeze", "scratch", "--reason", "test"}, 0},
		{admin, []string{"sandbox", "unfreeze", "scratch", "--reason", "test"}, 0},
		{admin, []string{"sandbox", "delete", "scratch2", "--yes"}, 0},
		{admin, []string{"token", "create", "--role", "operator", "--name", "numbers"}, 0},
		{admin, []string{"token", "list"}, 0},
		{admin, []string{"token", "revoke", "numbers"}, 0},
		// "$last" is the id the last propose printed: a new proposal
		// supersedes the sandbox's pending ones.
		{q.olive, []string{"proposals", "approve", q.id, "--reason", "fine", "--hash", q.hash}, 0},
		{q.sb, []string{"propose", "-f", writeFile(t, "x2.yaml", addTool("x2"))}, 0},
		{admin, []string{"proposals", "reject", "$last", "--reason", "no"}, 0},
		{q.sb, []string{"propose", "-f", writeFile(t, "x3.yaml", addTool("x3"))}, 0},
		{q.sb, []string{"proposals", "withdraw", "$last"}, 0},
		{q.sb, []string{"propose", "-f", writeFile(t, "x4.yaml", addTool("x4"))}, 0},
		{q.sb, []string{"proposals", "list"}, 0},
		{admin, []string{"proposals", "list"}, 0},
		{admin, []string{"proposals", "show", "$last"}, 0},
		{admin, []string{"policy", "get", "orders"}, 0},
		{admin, []string{"policy", "history", "orders"}, 0},
		{admin, []string{"policy", "diff", "orders", "1", "2"}, 0},
		{admin, []string{"policy", "set", "orders", "-f", nextFile}, 0},
		{admin, []string{"policy", "rollback", "orders", "--to", "1"}, 0},
		{admin, []string{"proxies", "list"}, 0},
		{admin, []string{"logs", "orders"}, 0},
		{admin, []string{"audit", "list"}, 0},
		{admin, []string{"audit", "verify"}, 0},
		{admin, []string{"approval-policy", "get"}, 0},
		{admin, []string{"approval-policy", "set", "-f", writeFile(t, "rules.rego", approvalRules(1))}, 0},
		{admin, []string{"sentry", "events"}, 0},
		{admin, []string{"sentry", "gaps"}, 0},
		{admin, []string{"sentry", "actions"}, 0},
		{admin, []string{"sentry", "timeline", "shipping"}, 0},
		{admin, []string{"sentry", "decide", action, "--dismiss", "--reason", "drill"}, 0},
		{admin, []string{"sentry", "key", "set", "sentry://node-9", "--public-key", keyFile}, 0},
		{admin, []string{"sentry", "key", "delete", "sentry://node-9"}, 0},
		{admin, []string{"signing-key", "list"}, 0},
		{admin, []string{"calls", "list"}, 0},
		{admin, []string{"calls", "show", approveCall}, 0},
		{admin, []string{"calls", "approve", approveCall, "--reason", "fine"}, 0},
		{admin, []string{"calls", "deny", denyCall, "--reason", "no"}, 0},
		{admin, []string{"provider", "create", "numbers", "--type", "bearer", "--hosts", "api.example.com", "--secret-file", writeFile(t, "tok", "t0ken-value\n")}, 0},
		{admin, []string{"provider", "list"}, 0},
		{admin, []string{"provider", "show", "numbers"}, 0},
		{admin, []string{"sandbox", "providers", "attach", "shipping", "numbers"}, 0},
		{admin, []string{"provider", "rotate", "numbers", "--secret-file", writeFile(t, "tok2", "t0ken-value-2\n")}, 0},
		{admin, []string{"sandbox", "providers", "detach", "shipping", "numbers"}, 0},
		{admin, []string{"provider", "delete", "numbers"}, 0},
	}
	ran := map[string]bool{}
	last := ""
	root := newRootCmd(newEnvironment(nil, io.Discard, io.Discard, nil))
	for _, r := range runs {
		cmd, _, err := root.Find(r.args)
		if err != nil {
			t.Fatalf("%v: %v", r.args, err)
		}
		ran[cmd.CommandPath()] = true
		args := slices.Clone(r.args)
		for i, a := range args {
			if a == "$last" {
				args[i] = last
			}
		}
		stdout, stderr, code := g.cli(t, r.token, append(args, "-o", "json")...)
		if code != r.code {
			t.Errorf("%v -o json: exit %d, want %d; stderr %s", r.args, code, r.code, stderr)
			continue
		}
		dec := json.NewDecoder(strings.NewReader(stdout))
		dec.UseNumber()
		docs := 0
		for {
			var v any
			if err := dec.Decode(&v); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Errorf("%v -o json: not JSON: %v\n%s", r.args, err, stdout)
				break
			}
			docs++
			walkJSON(t, strings.Join(r.args, " "), "", v)
		}
		if args[0] == "propose" && docs > 0 {
			last = fmt.Sprint(decodeJSON(t, stdout)["id"])
		}
		if docs == 0 {
			t.Errorf("%v -o json printed nothing", r.args)
		}
	}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			walk(sub)
		}
		if c.HasSubCommands() || c.Hidden || c.Name() == "help" || c.Name() == "completion" {
			return
		}
		if path := c.CommandPath(); !ran[path] && noJSON[path] == "" {
			t.Errorf("%s: neither run with -o json here nor listed in noJSON", path)
		}
	}
	walk(root)
}

// walkJSON fails on every string of digits not under a key of
// stringsAllowed.
func walkJSON(t *testing.T, cmd, path string, v any) {
	t.Helper()
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			if stringsAllowed[k] {
				continue
			}
			walkJSON(t, cmd, path+"."+k, e)
		}
	case []any:
		for i, e := range v {
			walkJSON(t, cmd, path+"["+strconv.Itoa(i)+"]", e)
		}
	case string:
		if digits.MatchString(v) {
			t.Errorf("%s -o json: %s is the string %q, want a number", cmd, path, v)
		}
	}
}
