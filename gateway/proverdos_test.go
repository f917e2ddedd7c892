package gateway_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"connectrpc.com/connect/v2"
	"connectrpc.com/connect/v2/connecthttp"

	"github.com/portcullis-dev/portcullis/gateway/gatewaytest"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
	"github.com/portcullis-dev/portcullis/proto/portcullis/v1/portcullisv1connect"
)

// globPaths are n paths with `segments` globbed segments of `stars` stars
// each (`/v1/*a*b*c*`, `/v1/*a*b*c*/*d*e*f*`), every one with letters of
// its own: n of them realise 2^n combinations of matches, which the
// prover used to enumerate (issue 11, finding 1).
func globPaths(n, segments, stars int) []string {
	const letters = "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"
	var out []string
	k := 0
	for range n {
		p := "/v1"
		for range segments {
			seg := "*"
			for range stars - 1 {
				seg += string(letters[k%len(letters)]) + "*"
				k++
			}
			p += "/" + seg
		}
		out = append(out, p)
	}
	return out
}

func globProposal(paths []string) string {
	var b strings.Builder
	b.WriteString("rationale: x\noperations:\n  - add_rule:\n      name: evil\n      rule:\n        binaries: [ { path: /usr/bin/curl } ]\n        endpoints:\n          - host: evil.example.com\n            port: 443\n            protocol: rest\n            rules:\n")
	for _, p := range paths {
		fmt.Fprintf(&b, "              - allow: { method: GET, path: %q }\n", p)
	}
	return b.String()
}

// The attack through the AdvisorService with a sandbox token: each
// proposal is refused as too_complex (at intake, or when its proof would
// exceed the prover's budget) and nothing is stored.
func TestAdversarialProposalsRefused(t *testing.T) {
	e := startAdvisor(t, "sqlite")
	for _, c := range []struct {
		name  string
		paths []string
	}{
		{"8 rules /v1/*a*b*c*", globPaths(8, 1, 4)},
		{"12 rules /v1/*a*b*c*", globPaths(12, 1, 4)},
		{"16 rules /v1/*a*", globPaths(16, 1, 2)}, // within the intake bounds: the budget refuses it
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := e.submit(t, globProposal(c.paths))
			if connect.CodeOf(err) != connect.CodeInvalidArgument {
				t.Fatalf("want InvalidArgument, got %v", err)
			}
			if r := refusal(t, err); r.GetRule() != "too_complex" {
				t.Fatalf("want rule too_complex, got %v", r)
			}
		})
	}
	if ps := e.list(t); len(ps) != 0 {
		t.Fatalf("refused proposals were stored: %v", ps)
	}
}

// ProverService.Prove, open to sandbox tokens, answers documents beyond
// the prover's budget with InvalidArgument "too complex to prove —
// refused", one- and two-segment variants alike.
func TestProveTooComplex(t *testing.T) {
	e := startAdvisor(t, "sqlite")
	pc := portcullisv1connect.NewProverServiceClient(connect.NewClient(connecthttp.NewTransport(http.DefaultClient, e.gw.URL), gatewaytest.Bearer(e.token)))
	for _, segs := range []int{1, 2} {
		doc := "version: 1\nnetwork_policies:\n  evil:\n    binaries: [ { path: /usr/bin/curl } ]\n    endpoints:\n      - host: evil.example.com\n        port: 443\n        protocol: rest\n        rules:\n"
		for _, p := range globPaths(12, segs, 4) {
			doc += fmt.Sprintf("          - allow: { method: GET, path: %q }\n", p)
		}
		_, err := pc.Prove(t.Context(), &portcullisv1.ProveRequest{Current: advisorPolicy, Proposed: doc})
		if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "too complex to prove — refused") {
			t.Fatalf("%d segments: want InvalidArgument too complex, got %v", segs, err)
		}
	}
	// The gateway still proves ordinary changes afterwards.
	if res, err := pc.Prove(t.Context(), &portcullisv1.ProveRequest{Current: advisorPolicy, Proposed: advisorPolicy}); err != nil || len(res.GetFindings()) != 0 {
		t.Fatalf("same policy: %v, %v", res, err)
	}
}
