package approval

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"
)

// testInput is a full input, as package lifecycle builds one from a
// stored proposal.
func testInput() Input {
	return Input{
		Proposal: ProposalInput{ID: 12, Sandbox: "orders", Rationale: "track shipments", Proposer: "orders-proxy",
			BaseVersion: 4, ResultingHash: "abcd", DenialID: "dn_1", Operations: []any{map[string]any{"add_allow_rules": map[string]any{
				"policy": "web", "host": "api.example.com", "port": float64(443),
				"rules": []any{map[string]any{"allow": map[string]any{"method": "GET", "path": "/v1/shipments/**"}}},
			}}}},
		Findings: []FindingInput{
			{Kind: "new_path", Blocking: false, Entry: "web", Endpoint: "api.example.com:443", Rule: "rules[1]", Detail: "GET was allowed on other paths only",
				Counterexample: RequestInput{Binary: "/usr/bin/curl", Host: "api.example.com", Port: 443, HTTPMethod: "GET", Path: "/v1/shipments/x"}},
			{Kind: "new_credentialed_reach", Blocking: true, Credentialed: true, Entry: "gh", Detail: "d",
				Counterexample: RequestInput{Host: "api.github.com", Port: 443, HTTPMethod: "POST", MCPMethod: "tools/call", Tool: "t"}},
			{Kind: "enforcement_weakened", Blocking: true, Entry: "web", Detail: "tls: skip"},
		},
		Sandbox:   SandboxInput{Name: "orders", CurrentVersion: 5, CredentialedHosts: []string{"api.github.com:443"}, HasBoundary: true},
		Approvers: []string{"alice", "bob"},
	}
}

// The value the rules see is the JSON form the struct tags document.
func TestValueIsJSON(t *testing.T) {
	for _, in := range []Input{testInput(), {}, samples[3].in} {
		b, err := json.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		var fromTags any
		if err := json.Unmarshal(b, &fromTags); err != nil {
			t.Fatal(err)
		}
		b, err = json.Marshal(in.value())
		if err != nil {
			t.Fatal(err)
		}
		var fromValue any
		if err := json.Unmarshal(b, &fromValue); err != nil {
			t.Fatal(err)
		}
		// A nil slice in the struct is null in JSON; value() gives [].
		normalize(fromTags)
		if !reflect.DeepEqual(fromTags, fromValue) {
			t.Errorf("value() differs from the JSON form:\n tags  %v\n value %v", fromTags, fromValue)
		}
	}
}

func normalize(v any) {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			if e == nil && k != "counterexample" {
				v[k] = []any{}
			}
			normalize(v[k])
		}
	case []any:
		for _, e := range v {
			normalize(e)
		}
	}
}

// docs/approvals.md's rules decide on a stored proposal's input: the
// new_credentialed_reach needs two approvers.
func TestExamplesDecide(t *testing.T) {
	in := testInput()
	in.Approvers = nil
	d := examples(t).Decide(context.Background(), in)
	if d.Required != 2 || d.AutoApprove || d.Fallback {
		t.Errorf("%+v, want two approvers", d)
	}
	in.Findings = in.Findings[:1]
	if d := examples(t).Decide(context.Background(), in); !d.AutoApprove || d.Fallback {
		t.Errorf("new GET path only: %+v, want auto-approved", d)
	}
}

func FuzzCompile(f *testing.F) {
	f.Add(Default().Module())
	f.Add("package portcullis.approval\ndefault approvals_required := 0\ndefault auto_approve := true\n")
	f.Add("package portcullis.approval\napprovals_required := count(input.approvers)\nauto_approve := true\ndeny contains input.proposal.rationale\n")
	f.Fuzz(func(t *testing.T, module string) {
		r, err := Compile(module)
		if err != nil {
			return
		}
		// Accepted rules answer every sample without a fallback, and the
		// invariants hold whatever the input.
		for _, s := range samples {
			d := r.Decide(context.Background(), s.in)
			if d.Fallback {
				t.Fatalf("sample %q falls back: %+v", s.name, d)
			}
			if d.Required > MaxApprovals || (d.Required < 1 && (!d.AutoApprove || len(s.in.Findings) > 0)) {
				t.Fatalf("sample %q: %+v out of bounds", s.name, d)
			}
			for _, fi := range s.in.Findings {
				if fi.Blocking && d.AutoApprove {
					t.Fatalf("sample %q auto-approved with %s", s.name, fi.Kind)
				}
			}
		}
	})
}
