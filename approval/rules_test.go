package approval

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

func examples(t testing.TB) *Rules {
	t.Helper()
	b, err := os.ReadFile("testdata/examples.rego")
	if err != nil {
		t.Fatal(err)
	}
	r, err := Compile(string(b))
	if err != nil {
		t.Fatalf("Compile(examples.rego): %v", err)
	}
	return r
}

// finding returns a finding of kind whose counterexample uses method.
func finding(kind, method string) FindingInput {
	return FindingInput{Kind: kind, Blocking: Blocking(kind), Entry: "web", Endpoint: "api.example.com:443",
		Counterexample: RequestInput{Binary: "/usr/bin/curl", Host: "api.example.com", Port: 443, HTTPMethod: method, Path: "/v1/x"}}
}

func input(sandbox string, fs ...FindingInput) Input {
	return Input{Proposal: sampleProposal(), Findings: fs, Sandbox: SandboxInput{Name: sandbox, CurrentVersion: 3}}
}

func compileT(t *testing.T, module string) *Rules {
	t.Helper()
	r, err := Compile(module)
	if err != nil {
		t.Fatalf("Compile: %v\n%s", err, module)
	}
	return r
}

func TestBlocking(t *testing.T) {
	for _, k := range []string{"new_reach", "new_http_method", "new_mcp_method", "new_mcp_tool", "new_credentialed_reach",
		"private_network", "wildcard_widening", "exceeds_boundary", "arguments_widened", "enforcement_weakened",
		"cloud_metadata", "some_future_kind", ""} {
		if !Blocking(k) {
			t.Errorf("Blocking(%q) = false", k)
		}
	}
	if Blocking("new_path") {
		t.Error(`Blocking("new_path") = true`)
	}
}

func TestDefault(t *testing.T) {
	r := Default()
	if sum := sha256.Sum256([]byte(r.Module())); r.Hash() != hex.EncodeToString(sum[:]) {
		t.Errorf("Hash() = %s, not the SHA-256 of Module()", r.Hash())
	}
	if !strings.Contains(r.Module(), "package portcullis.approval") {
		t.Errorf("Module() = %q", r.Module())
	}
	for _, in := range []Input{
		input("web"),
		input("web", finding("new_path", "GET")),
		input("web", finding("new_reach", "GET")),
		input("web", finding("new_credentialed_reach", "POST"), finding("exceeds_boundary", "POST")),
	} {
		d := r.Decide(context.Background(), in)
		if d.Required != 1 || d.AutoApprove || d.Fallback || len(d.Refusals) > 0 {
			t.Errorf("findings %v: %+v, want one human approval", in.Findings, d)
		}
		if d.Approved(nil) || !d.Approved([]string{"alice"}) {
			t.Errorf("findings %v: Approved(nil) or not Approved([alice])", in.Findings)
		}
	}
}

func TestExamples(t *testing.T) {
	r := examples(t)
	for _, tc := range []struct {
		name     string
		findings []FindingInput
		required int
		auto     bool
		refusals []string
	}{
		{"deny rules only", nil, 1, false, nil},
		{"new GET path", []FindingInput{finding("new_path", "GET")}, 1, true, nil},
		{"two new GET paths", []FindingInput{finding("new_path", "GET"), finding("new_path", "GET")}, 1, true, nil},
		{"new POST path", []FindingInput{finding("new_path", "POST")}, 1, false, nil},
		{"new GET path and new reach", []FindingInput{finding("new_path", "GET"), finding("new_reach", "GET")}, 1, false, nil},
		{"new GET method", []FindingInput{finding("new_http_method", "GET")}, 1, false, nil},
		{"credentialed reach", []FindingInput{finding("new_credentialed_reach", "GET")}, 2, false, nil},
		// The prover reports git, ssh or nc gaining credentialed reach as
		// both kinds: the rule keyed on new_credentialed_reach sees it.
		{"credentialed reach by an L7-bypass binary", []FindingInput{finding("l7_bypass_credentialed", ""), finding("new_credentialed_reach", "")}, 2, false, nil},
		{"cloud metadata", []FindingInput{finding("new_reach", "GET"), {Kind: "cloud_metadata", Blocking: true}}, 1, false,
			[]string{"cloud metadata is never granted"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := r.Decide(context.Background(), input("web", tc.findings...))
			if d.Required != tc.required || d.AutoApprove != tc.auto || d.Fallback || !slices.Equal(d.Refusals, tc.refusals) {
				t.Errorf("%+v, want required %d, auto %v, refusals %q", d, tc.required, tc.auto, tc.refusals)
			}
			if got := d.Approved(nil); got != tc.auto {
				t.Errorf("Approved(nil) = %v", got)
			}
		})
	}
}

func TestTwoApproversMustDiffer(t *testing.T) {
	d := examples(t).Decide(context.Background(), input("web", finding("new_credentialed_reach", "GET")))
	for _, tc := range []struct {
		approvers []string
		want      bool
	}{
		{nil, false},
		{[]string{"alice"}, false},
		{[]string{"alice", "alice"}, false},
		{[]string{"alice", ""}, false},
		{[]string{"alice", "bob"}, true},
		{[]string{"alice", "alice", "bob"}, true},
	} {
		if got := d.Approved(tc.approvers); got != tc.want {
			t.Errorf("Approved(%q) = %v, want %v", tc.approvers, got, tc.want)
		}
	}
}

func TestRefusalsBlockApproval(t *testing.T) {
	r := compileT(t, `package portcullis.approval
default approvals_required := 1
default auto_approve := true
deny contains "needs a security approver" if {
	count(input.findings) > 0
	not "sec" in input.approvers
}`)
	in := input("web", finding("new_path", "GET"))
	d := r.Decide(context.Background(), in)
	if d.AutoApprove || d.Fallback || !slices.Equal(d.Refusals, []string{"needs a security approver"}) || d.Approved([]string{"alice", "bob"}) {
		t.Errorf("without sec: %+v, want refused", d)
	}
	in.Approvers = []string{"sec"}
	if d := r.Decide(context.Background(), in); len(d.Refusals) > 0 || !d.Approved([]string{"sec"}) {
		t.Errorf("with sec: %+v, want approvable", d)
	}
}

func TestBlockingFindingOverridesAutoApprove(t *testing.T) {
	r := compileT(t, `package portcullis.approval
default approvals_required := 1
default auto_approve := true`)
	for _, kind := range []string{"new_reach", "new_credentialed_reach", "exceeds_boundary", "cloud_metadata", "unknown_kind"} {
		d := r.Decide(context.Background(), input("web", finding("new_path", "GET"), finding(kind, "GET")))
		if d.AutoApprove || d.Required != 1 || d.Fallback || d.Approved(nil) {
			t.Errorf("%s: %+v, want a human", kind, d)
		}
		if !slices.ContainsFunc(d.Notes, func(n string) bool { return strings.Contains(n, kind) }) {
			t.Errorf("%s: notes %q do not name the finding", kind, d.Notes)
		}
	}
	if d := r.Decide(context.Background(), input("web", finding("new_path", "GET"))); !d.AutoApprove {
		t.Errorf("new_path only: %+v, want auto-approved", d)
	}
}

func TestZeroApprovals(t *testing.T) {
	r := compileT(t, `package portcullis.approval
default approvals_required := 1
approvals_required := 0 if count(input.findings) == 0
default auto_approve := false
auto_approve if count(input.findings) == 0
auto_approve if input.sandbox.name == "auto"`)
	d := r.Decide(context.Background(), input("web"))
	if d.Required != 0 || !d.AutoApprove || d.Fallback || !d.Approved(nil) {
		t.Errorf("deny-only: %+v, want 0 approvals, auto", d)
	}
	// The same zero quorum without auto_approve is out of bounds.
	r = compileT(t, `package portcullis.approval
default approvals_required := 1
approvals_required := 0 if input.sandbox.name == "zero"
default auto_approve := false`)
	d = r.Decide(context.Background(), input("zero"))
	if d.Required != 1 || d.AutoApprove || !d.Fallback {
		t.Errorf("zero without auto: %+v, want fallback", d)
	}
}

func TestCap(t *testing.T) {
	r := compileT(t, `package portcullis.approval
default approvals_required := 1
approvals_required := 1e9 if input.sandbox.name == "big"
default auto_approve := false`)
	d := r.Decide(context.Background(), input("big", finding("new_reach", "GET")))
	if d.Required != MaxApprovals || d.Fallback || len(d.Notes) != 1 || !strings.Contains(d.Notes[0], "1e9 lowered to 10") {
		t.Errorf("%+v, want %d with a note", d, MaxApprovals)
	}
}

// The modules below pass Compile (the samples never trigger them) and
// fail on the proposal named by the sandbox "trigger".
func TestFallback(t *testing.T) {
	const head = "package portcullis.approval\n"
	for _, tc := range []struct {
		name, module, note string
		findings           []FindingInput
	}{
		{"division by zero", head + `default approvals_required := 1
approvals_required := 1 / count(input.approvers) if input.sandbox.name == "trigger"
default auto_approve := true`, "divide by zero", nil},
		{"conflict", head + `default approvals_required := 1
approvals_required := 2 if input.sandbox.name == "trigger"
approvals_required := 3 if input.sandbox.name == "trigger"
default auto_approve := true`, "conflict", nil},
		{"undefined approvals_required", head + `approvals_required := 1 if input.sandbox.name != "trigger"
default auto_approve := true`, "approvals_required is undefined", nil},
		{"undefined auto_approve", head + `default approvals_required := 1
auto_approve if input.sandbox.name != "trigger"`, "auto_approve is undefined", nil},
		{"string quorum", head + `default approvals_required := 1
approvals_required := "two" if input.sandbox.name == "trigger"
default auto_approve := true`, `"two", not a number`, nil},
		{"fractional quorum", head + `default approvals_required := 1
approvals_required := 1.5 if input.sandbox.name == "trigger"
default auto_approve := true`, "not a whole number", nil},
		{"zero quorum with findings", head + `default approvals_required := 1
approvals_required := 0 if input.sandbox.name == "trigger"
default auto_approve := true`, "for a proposal with findings", []FindingInput{finding("new_path", "GET")}},
		{"negative quorum", head + `default approvals_required := 1
approvals_required := -3 if input.sandbox.name == "trigger"
default auto_approve := true`, "-3", []FindingInput{finding("new_path", "GET")}},
		{"string auto_approve", head + `default approvals_required := 1
default auto_approve := false
auto_approve := "yes" if input.sandbox.name == "trigger"`, `"yes", not a boolean`, nil},
		{"number in deny", head + `default approvals_required := 1
default auto_approve := true
deny contains input.sandbox.current_version if input.sandbox.name == "trigger"`, "not a string", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := compileT(t, tc.module)
			if d := r.Decide(context.Background(), input("web", tc.findings...)); d.Fallback {
				t.Fatalf("untriggered: %+v", d)
			}
			d := r.Decide(context.Background(), input("trigger", tc.findings...))
			if !d.Fallback || d.AutoApprove || d.Required < 1 || d.Approved(nil) {
				t.Errorf("%+v, want a fallback to a human", d)
			}
			if !slices.ContainsFunc(d.Notes, func(n string) bool { return strings.Contains(n, tc.note) }) {
				t.Errorf("notes %q lack %q", d.Notes, tc.note)
			}
		})
	}
}

// A stored module that errors on every proposal (say one accepted by an
// older release) makes every proposal need a human.
func TestErrorEverywhere(t *testing.T) {
	r, err := compile(`package portcullis.approval
default auto_approve := true
approvals_required := 1 / count(input.approvers)`)
	if err != nil {
		t.Fatal(err)
	}
	ins := []Input{input("web"), input("web", finding("new_path", "GET")), input("web", finding("new_reach", "GET"))}
	for _, s := range samples {
		if len(s.in.Approvers) == 0 {
			ins = append(ins, s.in)
		}
	}
	for _, in := range ins {
		d := r.Decide(context.Background(), in)
		if !d.Fallback || d.AutoApprove || d.Required != 1 || len(d.Notes) == 0 {
			t.Errorf("findings %v: %+v, want a fallback to one human", in.Findings, d)
		}
	}
}

func TestSlowRulesAreBounded(t *testing.T) {
	r := compileT(t, `package portcullis.approval
default approvals_required := 1
approvals_required := 2 if {
	input.sandbox.name == "trigger"
	some i in numbers.range(1, 100000)
	some j in numbers.range(1, 100000)
	i == j + 1000000
}
default auto_approve := true`)
	start := time.Now()
	d := r.Decide(context.Background(), input("trigger"))
	if el := time.Since(start); el > 5*EvalTimeout {
		t.Errorf("Decide took %v", el)
	}
	if !d.Fallback || d.AutoApprove || d.Required != 1 {
		t.Errorf("%+v, want a fallback", d)
	}
	if !slices.ContainsFunc(d.Notes, func(n string) bool { return strings.Contains(n, "stopped after") }) {
		t.Errorf("notes %q do not say it was stopped", d.Notes)
	}

	// A cancelled caller stops it too.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if d := r.Decide(ctx, input("web")); !d.Fallback {
		t.Errorf("cancelled: %+v, want a fallback", d)
	}
}

func TestCompileErrors(t *testing.T) {
	const head = "package portcullis.approval\n"
	const outputs = "default approvals_required := 1\ndefault auto_approve := false\n"
	for _, tc := range []struct {
		name, module, want string
	}{
		{"empty", "", "empty module"},
		{"syntax error", head + "default approvals_required := \n", "rego_parse_error"},
		{"wrong package", "package approval\n" + outputs, "package is approval, want portcullis.approval"},
		{"nested package", "package portcullis.approval.extra\n" + outputs, "package is portcullis.approval.extra"},
		{"no approvals_required", head + "default auto_approve := false\n", "approvals_required is not defined"},
		{"no auto_approve", head + "default approvals_required := 1\n", "auto_approve is not defined"},
		{"string approvals_required", head + `approvals_required := "two"` + "\ndefault auto_approve := false\n",
			"approvals_required is string, want a number"},
		{"number auto_approve", head + "default approvals_required := 1\nauto_approve := 1\n", "auto_approve is number, want a boolean"},
		{"number in deny", head + outputs + "deny contains 7\n", "deny is set[number], want a set of strings"},
		{"string deny", head + outputs + `deny := "no"` + "\n", "deny is string, want a set of strings"},
		{"undefined on a sample", head + "approvals_required := 2 if count(input.findings) > 0\ndefault auto_approve := false\n",
			`sample "deny rules only": approvals_required is undefined`},
		{"error on a sample", head + "approvals_required := 1 / count(input.approvers)\ndefault auto_approve := false\n",
			`sample "deny rules only": the approval rules failed`},
		{"zero quorum for findings", head + "default approvals_required := 0\ndefault auto_approve := true\n",
			`sample "new GET path": approvals_required is 0 for a proposal with findings`},
		{"type error", head + outputs + "x := 1 + \"a\"\n", "rego_type_error"},
		{"unsafe variable", head + outputs + "y if x > 1\n", "rego_unsafe_var_error"},
		{"http.send", head + outputs + `deny contains "x" if http.send({"method": "GET", "url": "http://127.0.0.1:1"}).status_code == 200` + "\n",
			"undefined function http.send"},
		{"too large", head + outputs + "# " + strings.Repeat("x", MaxModuleBytes), "bytes, at most"},
		{"too slow on a sample", head + `default approvals_required := 1
approvals_required := 2 if {
	some i in numbers.range(1, 100000)
	some j in numbers.range(1, 100000)
	i == j + 1000000
}
default auto_approve := false`, "stopped after"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Compile(tc.module)
			if err == nil {
				t.Fatalf("Compile accepted it: %+v", r)
			}
			if !errors.Is(err, ErrInvalidModule) {
				t.Errorf("error %v does not wrap ErrInvalidModule", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q lacks %q", err, tc.want)
			}
		})
	}
}

func TestConcurrentDecide(t *testing.T) {
	r := examples(t)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for range 50 {
				in := input("web", finding("new_path", "GET"))
				if i%2 == 1 {
					in = input("web", finding("new_credentialed_reach", "GET"))
				}
				d := r.Decide(context.Background(), in)
				if d.AutoApprove != (i%2 == 0) || d.Required != 1+i%2 || d.Fallback {
					t.Errorf("goroutine %d: %+v", i, d)
					return
				}
			}
		})
	}
	wg.Wait()
}

func BenchmarkDecide(b *testing.B) {
	r := examples(b)
	in := input("web", finding("new_path", "GET"), finding("new_reach", "POST"), finding("new_credentialed_reach", "GET"))
	in.Approvers = []string{"alice"}
	b.ReportAllocs()
	for b.Loop() {
		if d := r.Decide(context.Background(), in); d.Required != 2 || d.Fallback {
			b.Fatalf("%+v", d)
		}
	}
}

// docs/approvals.md shows examples.rego as it is.
func TestApprovalsDocShowsExamples(t *testing.T) {
	doc, err := os.ReadFile("../docs/approvals.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), "```rego\n"+examples(t).Module()+"```\n") {
		t.Error("docs/approvals.md does not show testdata/examples.rego verbatim")
	}
}
