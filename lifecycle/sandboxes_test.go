package lifecycle

import (
	"errors"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/portcullis-dev/portcullis/advisor"
	"github.com/portcullis-dev/portcullis/policy"
	"github.com/portcullis-dev/portcullis/prover"
	"github.com/portcullis-dev/portcullis/store"
	"github.com/portcullis-dev/portcullis/store/storetest"
)

// contextPolicy is a sandbox's version 1: an MCP server and a REST API.
const contextPolicy = `
version: 1
network_policies:
  orders:
    name: orders
    endpoints:
      - host: orders.example.com
        port: 443
        path: /mcp
        protocol: mcp
        rules:
          - allow: { method: initialize }
          - allow: { method: tools/call, tool: lookup_order }
    binaries: [ { path: /usr/bin/python3 } ]
  github:
    name: github
    endpoints:
      - host: api.github.com
        port: 443
        protocol: rest
        rules:
          - allow: { method: GET, path: "/repos/acme/app/**" }
    binaries: [ { path: /usr/bin/git } ]
`

// contextSandbox creates the sandbox box at contextPolicy and returns the
// policy.
func contextSandbox(t *testing.T, l *Lifecycle) *policy.Policy {
	t.Helper()
	base, _, err := policy.Parse([]byte(contextPolicy))
	if err != nil {
		t.Fatal(err)
	}
	base = base.Canonical()
	if _, err := l.CreateSandbox(ctx(t), store.CreateSandbox{
		Name: "box", Actor: "op", Token: storetest.NewToken("sandbox-box", "", ""),
		Policy: &store.PolicyVersion{Hash: base.Hash(), Document: base.CanonicalJSON(), Author: "op"},
	}); err != nil {
		t.Fatal(err)
	}
	return base
}

// TestContextChangeReproves: a boundary or credentialed hosts written
// through the lifecycle re-prove the sandbox's pending proposals by
// themselves (no caller has to ask), so that an approver sees findings
// against the context the sandbox has now.
func TestContextChangeReproves(t *testing.T) {
	s := openSQLite(t)
	l := New(Config{Logger: slog.New(slog.DiscardHandler)}, s)
	base := contextSandbox(t, l)
	submit := func(doc string) int64 {
		t.Helper()
		p, err := advisor.ParseProposal([]byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		out, err := l.Submit(ctx(t), Submission{Sandbox: "box", Proposer: "sandbox-box", Actor: "sandbox:box", Proposal: p})
		if err != nil || out.Proposal.Status != store.ProposalPending {
			t.Fatalf("submit: %+v, %v", out, err)
		}
		return out.Proposal.ID
	}
	track := submit("rationale: track shipments\noperations:\n  - add_allow_rules: { policy: orders, host: orders.example.com, port: 443, rules: [ { allow: { method: tools/call, tool: track_shipment } } ] }\n")
	issues := submit("rationale: file issues\noperations:\n  - add_allow_rules: { policy: github, host: api.github.com, port: 443, rules: [ { allow: { method: POST, path: /repos/acme/app/issues } } ] }\n")
	findings := func(id int64) []Finding {
		t.Helper()
		f, err := DecodeFindings(storetest.GetProposal(t, s, id).Findings)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	// eventually waits, on the lifecycle's change signal, until ok holds
	// of proposal id's findings.
	eventually := func(what string, id int64, ok func([]Finding) bool) {
		t.Helper()
		deadline := time.After(10 * time.Second)
		for {
			changed := l.Changed("box")
			f := findings(id)
			if ok(f) {
				return
			}
			select {
			case <-changed:
			case <-deadline:
				t.Fatalf("%s: proposal %d's findings are %+v", what, id, f)
			}
		}
	}
	kind := func(k string) func([]Finding) bool {
		return func(f []Finding) bool { return slices.ContainsFunc(f, func(f Finding) bool { return f.Kind == k }) }
	}
	credentialed := func(f []Finding) bool {
		return slices.ContainsFunc(f, func(f Finding) bool { return f.Credentialed })
	}
	if kind(prover.ExceedsBoundary)(findings(track)) || credentialed(findings(issues)) {
		t.Fatalf("before any context: %+v, %+v", findings(track), findings(issues))
	}

	// The boundary is the current version: what the proposal adds
	// exceeds it.
	if _, err := l.SetSandboxBoundary(ctx(t), "box", base.CanonicalJSON(), base.Hash(), "op"); err != nil {
		t.Fatal(err)
	}
	eventually("after the boundary was set", track, kind(prover.ExceedsBoundary))

	// The API the POST goes to now carries injected credentials.
	if _, err := l.UpdateCredentialedHosts(ctx(t), "box", []string{"api.github.com:443"}, nil, "op"); err != nil {
		t.Fatal(err)
	}
	eventually("after the API was credentialed", issues, credentialed)

	// An unknown sandbox is the store's error, as it was.
	if _, err := l.SetSandboxBoundary(ctx(t), "ghost", base.CanonicalJSON(), base.Hash(), "op"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("boundary of an unknown sandbox: %v, want store.ErrNotFound", err)
	}
	if _, err := l.UpdateCredentialedHosts(ctx(t), "ghost", []string{"api.github.com:443"}, nil, "op"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("credentialed hosts of an unknown sandbox: %v, want store.ErrNotFound", err)
	}
}
