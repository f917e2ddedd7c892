package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// proveFiles writes the orders example and variants of it to a temp dir.
func proveFiles(t *testing.T) (dir string) {
	t.Helper()
	dir = t.TempDir()
	base, err := os.ReadFile("../../examples/orders.yaml")
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, content string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("current.yaml", string(base))
	write("track.yaml", strings.Replace(string(base), "          - allow: { method: tools/list }\n",
		"          - allow: { method: tools/list }\n          - allow: { method: tools/call, tool: track_shipment }\n", 1))
	write("metadata.yaml", strings.Replace(string(base), "host: demo-mcp", "host: 169.254.169.254", 1))
	write("broken.yaml", "version: 1\nnetwork_policies: [\n")
	return dir
}

// proveJSON runs prove -o json and decodes what it printed, which must be
// one JSON object whatever the exit code.
func proveJSON(t *testing.T, args ...string) (map[string]any, int) {
	t.Helper()
	stdout, stderr, code := runCLI(t, append([]string{"prove", "-o", "json"}, args...)...)
	var out map[string]any
	if err := json.Unmarshal([]byte(stdout), &out); err != nil {
		t.Fatalf("prove -o json printed no JSON object (exit %d): %v\nstdout: %s\nstderr: %s", code, err, stdout, stderr)
	}
	if _, ok := out["findings"].([]any); !ok {
		t.Fatalf("no findings list in %s", stdout)
	}
	return out, code
}

func TestProveCommand(t *testing.T) {
	dir := proveFiles(t)
	f := func(name string) string { return filepath.Join(dir, name) }

	// Nothing added: exit 0.
	stdout, stderr, code := runCLI(t, "prove", "--current", f("current.yaml"), "--proposed", f("current.yaml"))
	if code != exitOK || !strings.Contains(stdout, "no findings") {
		t.Fatalf("same policy: exit %d\n%s%s", code, stdout, stderr)
	}
	out, code := proveJSON(t, "--current", f("current.yaml"), "--proposed", f("current.yaml"))
	if code != exitOK || len(out["findings"].([]any)) != 0 {
		t.Fatalf("same policy, JSON: exit %d, %v", code, out)
	}

	// A new tool: exit 1, the finding with its counterexample.
	stdout, _, code = runCLI(t, "prove", "--current", f("current.yaml"), "--proposed", f("track.yaml"))
	if code != exitNo || !strings.Contains(stdout, "new_mcp_tool") || !strings.Contains(stdout, "track_shipment") {
		t.Fatalf("new tool: exit %d\n%s", code, stdout)
	}
	out, code = proveJSON(t, "--current", f("current.yaml"), "--proposed", f("track.yaml"))
	findings := out["findings"].([]any)
	if code != exitNo || len(findings) != 1 {
		t.Fatalf("new tool, JSON: exit %d, %v", code, out)
	}
	first := findings[0].(map[string]any)
	ce, _ := first["counterexample"].(map[string]any)
	if first["kind"] != "new_mcp_tool" || ce["tool"] != "track_shipment" || ce["mcp_method"] != "tools/call" || ce["host"] != "demo-mcp" {
		t.Fatalf("finding %v", first)
	}
	// The reverse change only narrows: nothing to report.
	if _, _, code := runCLI(t, "prove", "--current", f("track.yaml"), "--proposed", f("current.yaml")); code != exitOK {
		t.Fatalf("narrowing: exit %d", code)
	}

	// A metadata address in the proposal is a finding, not an error.
	out, code = proveJSON(t, "--current", f("current.yaml"), "--proposed", f("metadata.yaml"))
	findings = out["findings"].([]any)
	if code != exitNo || len(findings) != 1 || findings[0].(map[string]any)["kind"] != "cloud_metadata" {
		t.Fatalf("metadata: exit %d, %v", code, out)
	}

	// Errors: exit 2, and with -o json still one object, with the problems.
	out, code = proveJSON(t, "--current", f("current.yaml"), "--proposed", f("broken.yaml"))
	if code != exitInvalid || out["error"] == nil || out["problems"] == nil {
		t.Fatalf("broken proposal: exit %d, %v", code, out)
	}
	out, code = proveJSON(t, "--current", f("current.yaml"))
	if code != exitInvalid || !strings.Contains(out["error"].(string), "--proposed") {
		t.Fatalf("missing --proposed: exit %d, %v", code, out)
	}
	for _, bad := range []string{"api.example.com", "api.example.com:0", ":443", "api.example.com:http"} {
		if _, _, code := runCLI(t, "prove", "--current", f("current.yaml"), "--proposed", f("track.yaml"), "--credentialed", bad); code != exitInvalid {
			t.Errorf("--credentialed %q: exit %d, want %d", bad, code, exitInvalid)
		}
	}
	if _, _, code := runCLI(t, "prove", "--current", f("nope.yaml"), "--proposed", f("track.yaml")); code != exitInvalid {
		t.Errorf("missing file: exit %d", code)
	}
}

var updateGolden = flag.Bool("update", false, "rewrite the prove reports under testdata/prove")

// TestProveGoldenReports runs prove -o json on each case under
// testdata/prove (current.yaml, proposed.yaml, optional args) and compares
// the report with want.json (-update rewrites it). A changed report is a
// changed answer: review the diff.
func TestProveGoldenReports(t *testing.T) {
	cases, err := filepath.Glob("testdata/prove/*")
	if err != nil || len(cases) == 0 {
		t.Fatalf("no cases: %v", err)
	}
	for _, dir := range cases {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			args := []string{"prove", "-o", "json", "--current", filepath.Join(dir, "current.yaml"), "--proposed", filepath.Join(dir, "proposed.yaml")}
			if extra, err := os.ReadFile(filepath.Join(dir, "args")); err == nil {
				args = append(args, strings.Fields(string(extra))...)
			}
			stdout, stderr, code := runCLI(t, args...)
			if code != exitOK && code != exitNo {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			golden := filepath.Join(dir, "want.json")
			if *updateGolden {
				if err := os.WriteFile(golden, []byte(stdout), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if stdout != string(want) {
				t.Errorf("report differs from %s:\n got: %s\nwant: %s", golden, stdout, want)
			}
		})
	}
}

// globPolicy is a policy whose endpoint allows GET on n two-segment globs
// like `/v1/*a*b*c*/*d*e*f*`: before the prover had a budget, `prove` on
// such a file grew to 23 GB and ignored SIGTERM (issue 11, finding 1).
func globPolicy(n int) string {
	const letters = "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"
	var b strings.Builder
	b.WriteString("version: 1\nnetwork_policies:\n  evil:\n    binaries: [ { path: /usr/bin/curl } ]\n    endpoints:\n      - host: evil.example.com\n        port: 443\n        protocol: rest\n        rules:\n")
	k := 0
	for range n {
		p := "/v1"
		for range 2 {
			seg := "*"
			for range 3 {
				seg += string(letters[k%len(letters)]) + "*"
				k++
			}
			p += "/" + seg
		}
		b.WriteString("          - allow: { method: GET, path: \"" + p + "\" }\n")
	}
	return b.String()
}

// A change too complex to prove is refused with exit 2 and the reason; a
// cancelled context (SIGINT/SIGTERM in main) stops the proof.
func TestProveTooComplex(t *testing.T) {
	dir := t.TempDir()
	evil := filepath.Join(dir, "evil.yaml")
	if err := os.WriteFile(evil, []byte(globPolicy(12)), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty.yaml")
	if err := os.WriteFile(empty, []byte("version: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, stderr, code := runCLI(t, "prove", "--current", empty, "--proposed", evil)
	if code != exitInvalid || !strings.Contains(stderr, "too complex to prove — refused") {
		t.Fatalf("exit %d, stderr %s", code, stderr)
	}
	out, code := proveJSON(t, "--current", empty, "--proposed", evil)
	if code != exitInvalid || !strings.Contains(out["error"].(string), "too complex") || len(out["findings"].([]any)) != 0 {
		t.Fatalf("JSON: exit %d, %v", code, out)
	}

	// The budget is the caller's: a small one refuses an ordinary change,
	// and a budget that is not a positive number is a usage error.
	_, stderr, code = runCLI(t, "prove", "--current", empty, "--proposed", filepath.Join("..", "..", "examples", "orders.yaml"), "--budget", "1000")
	if code != exitInvalid || !strings.Contains(stderr, "budget of 1000 work units") {
		t.Fatalf("--budget 1000: exit %d, stderr %s", code, stderr)
	}
	if _, stderr, code = runCLI(t, "prove", "--current", empty, "--proposed", evil, "--budget", "0"); code != exitInvalid || !strings.Contains(stderr, "--budget") {
		t.Fatalf("--budget 0: exit %d, stderr %s", code, stderr)
	}

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	var stdout, errOut bytes.Buffer
	code = run(ctx, []string{"prove", "--current", empty, "--proposed", evil}, strings.NewReader(""), &stdout, &errOut, func(string) string { return "" })
	if code == exitOK || !strings.Contains(errOut.String(), "context canceled") {
		t.Fatalf("cancelled: exit %d, stderr %s", code, errOut.String())
	}
}
