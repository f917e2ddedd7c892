package main

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/portcullis-dev/portcullis/gateway/gatewaytest"
)

// TestExamplesSubmit keeps examples/ valid: every policy file there
// validates, and every proposal file under examples/proposals/ is
// submitted with the CLI, as docs/proposals.md says, to a real gateway
// whose sandbox has examples/support.yaml as its policy, examples/boundary.yaml
// as its boundary and the carrier's API as a credentialed destination
// (docs/boundaries.md). Each must be accepted as pending with the findings
// the docs describe, and together they show every operation.
func TestExamplesSubmit(t *testing.T) {
	const dir = "../../examples"
	policies, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(policies) < 4 {
		t.Fatalf("policy examples %v: %v", policies, err)
	}
	for _, p := range policies {
		if _, stderr, code := runCLI(t, "policy", "validate", p); code != exitOK {
			t.Errorf("%s: exit %d: %s", p, code, stderr)
		}
	}

	g := startGateway(t)
	admin := gatewaytest.AdminToken
	sb := g.json(t, admin, "sandbox", "create", "support", "-f", filepath.Join(dir, "support.yaml"))["token"].(string)
	g.must(t, admin, "sandbox", "set-boundary", "support", "-f", filepath.Join(dir, "boundary.yaml"))
	g.must(t, admin, "sandbox", "credentials", "support", "--add", "api.carrier.example:443")

	// What each example must be found to add (docs/proposals.md).
	want := map[string][]string{
		"add-allow-rules.yaml": {"new_mcp_tool"},
		"add-rule.yaml":        {"exceeds_boundary", "new_credentialed_reach", "wildcard_widening"},
		"add-binary.yaml":      {"new_reach"},
		"add-deny-rules.yaml":  nil,
		"repin.yaml":           {"tool_definition_changed"},
	}
	files, err := filepath.Glob(filepath.Join(dir, "proposals", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	ops := map[string]bool{}
	for _, f := range files {
		name := filepath.Base(f)
		names = append(names, name)
		kinds, listed := want[name]
		if !listed {
			t.Errorf("%s: a new example: say in this test (and docs/proposals.md) what it adds", f)
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range regexp.MustCompile(`(?m)^  - (add_rule|add_allow_rules|add_binary|add_deny_rules|repin):`).FindAllStringSubmatch(string(data), -1) {
			ops[m[1]] = true
		}
		p := g.json(t, sb, "propose", "-f", f)
		if p["status"] != "pending" {
			t.Errorf("%s: status %v, want pending", name, p["status"])
		}
		var got []string
		findings, _ := p["findings"].([]any)
		for _, f := range findings {
			if k, _ := f.(map[string]any)["kind"].(string); !slices.Contains(got, k) {
				got = append(got, k)
			}
		}
		slices.Sort(got)
		if strings.Join(got, " ") != strings.Join(kinds, " ") {
			t.Errorf("%s: findings %v, want %v", name, got, kinds)
		}
	}
	for name := range want {
		if !slices.Contains(names, name) {
			t.Errorf("examples/proposals/%s is missing", name)
		}
	}
	for _, op := range []string{"add_rule", "add_allow_rules", "add_binary", "add_deny_rules", "repin"} {
		if !ops[op] {
			t.Errorf("no example under examples/proposals/ shows %s", op)
		}
	}
}

// mdLink is a relative Markdown link: [text](target).
var mdLink = regexp.MustCompile(`\]\(([^)#:\s]+)(#[^)]*)?\)`)

// TestDocLinks checks that every relative link of README.md and docs/
// names a file of the repository (README once pointed to a DESIGN.md it
// does not have).
func TestDocLinks(t *testing.T) {
	docs, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range append([]string{"../../README.md", "../../ARCHITECTURE.md"}, docs...) {
		data, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range mdLink.FindAllStringSubmatch(string(data), -1) {
			target := filepath.Join(filepath.Dir(doc), m[1])
			if _, err := os.Stat(target); err != nil {
				t.Errorf("%s links to %s, which does not exist", doc, m[1])
			}
		}
	}
}
