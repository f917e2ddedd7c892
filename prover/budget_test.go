package prover

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/portcullis-dev/portcullis/policy"
)

// globLetters are the letters the adversarial globs are spelt with: each
// glob uses letters no other one uses, so that n globs realise 2^n
// combinations of matches.
const globLetters = "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"

// adversarialPaths is the attack: n one-segment globs like
// `/v1/*a*b*c*` (segments > 1: one such segment per path segment, e.g.
// `/v1/*a*b*c*/*d*e*f*`, which only the prover, not the advisor, accepts).
func adversarialPaths(n, segments int) []string {
	var out []string
	k := 0
	for range n {
		p := "/v1"
		for range segments {
			seg := "*"
			for range 3 {
				seg += string(globLetters[k%len(globLetters)]) + "*"
				k++
			}
			p += "/" + seg
		}
		out = append(out, p)
	}
	return out
}

// restDoc is a policy with one REST endpoint on evil.example.com allowing
// GET on each path.
func restDoc(paths []string) string {
	var sb strings.Builder
	sb.WriteString("version: 1\nnetwork_policies:\n  evil:\n    binaries: [ { path: /usr/bin/curl } ]\n    endpoints:\n      - host: evil.example.com\n        port: 443\n        protocol: rest\n        rules:\n")
	for _, p := range paths {
		fmt.Fprintf(&sb, "          - allow: { method: GET, path: %q }\n", p)
	}
	return sb.String()
}

const adversarialBase = `
version: 1
network_policies:
  github:
    binaries: [ { path: /usr/bin/gh } ]
    endpoints:
      - host: api.github.com
        port: 443
        protocol: rest
        rules:
          - allow: { method: GET, path: "/repos/**" }
`

// The DoS: 8 and 12 one-segment globs (and two-segment variants)
// were exponential (12 ran the gateway out of memory). Each proof now stops
// at the budget with the too-complex refusal, having done at most the
// budget's work.
func TestProveTooComplexRefused(t *testing.T) {
	base := parse(t, adversarialBase)
	for _, c := range []struct{ n, segs int }{{8, 1}, {12, 1}, {8, 2}, {12, 2}} {
		t.Run(fmt.Sprintf("rules=%d/segments=%d", c.n, c.segs), func(t *testing.T) {
			prop := parse(t, adversarialBase+strings.TrimPrefix(restDoc(adversarialPaths(c.n, c.segs)), "version: 1\nnetwork_policies:\n"))
			rep, err := Prove(context.Background(), base, prop, Options{Now: now})
			var tc *TooComplexError
			if !errors.As(err, &tc) || !errors.Is(err, ErrTooComplex) {
				t.Fatalf("want a too-complex refusal, got report %v, err %v", rep != nil, err)
			}
			if rep != nil {
				t.Fatal("a refused proof returned a (partial) report")
			}
			if (tc.Memory && tc.Limit != MemoryBudget || !tc.Memory && tc.Limit != DefaultBudget) || tc.Used > tc.Limit || tc.Stage == "" {
				t.Fatalf("budget: used %d of %d at %q", tc.Used, tc.Limit, tc.Stage)
			}
			if !strings.Contains(err.Error(), "too complex to prove — refused") {
				t.Fatalf("message: %v", err)
			}
		})
	}
}

// The same attack with a smaller budget is refused at that budget: the
// bound is the caller's.
func TestProveBudgetOption(t *testing.T) {
	base := parse(t, adversarialBase)
	prop := parse(t, restDoc(adversarialPaths(8, 1)))
	_, err := Prove(context.Background(), base, prop, Options{Now: now, Budget: 100_000})
	var tc *TooComplexError
	if !errors.As(err, &tc) || tc.Limit != 100_000 || tc.Used > 100_000 {
		t.Fatalf("want a refusal at 100000 units, got %v", err)
	}
	// Four such globs are fine within the default budget, and the report
	// says what the proof used.
	rep, err := Prove(context.Background(), base, parse(t, restDoc(adversarialPaths(4, 1))), Options{Now: now})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Findings) == 0 || rep.Work <= 0 || rep.Work > DefaultBudget {
		t.Fatalf("findings %d, work %d", len(rep.Findings), rep.Work)
	}
}

// countdownCtx is a context that reports itself cancelled after its Err
// has been asked a given number of times: a cancellation in the middle of
// a search, without timing.
type countdownCtx struct {
	context.Context
	left atomic.Int64
}

func (c *countdownCtx) Err() error {
	if c.left.Add(-1) < 0 {
		return context.Canceled
	}
	return nil
}

// A cancelled context stops the search: the 12-glob proof returns the
// context's error (not the budget's) after the third look at it.
func TestProveCancelled(t *testing.T) {
	base := parse(t, adversarialBase)
	prop := parse(t, restDoc(adversarialPaths(12, 1)))
	ctx := &countdownCtx{Context: context.Background()}
	ctx.left.Store(3)
	rep, err := Prove(ctx, base, prop, Options{Now: now})
	if !errors.Is(err, context.Canceled) || errors.Is(err, ErrTooComplex) || rep != nil {
		t.Fatalf("want context.Canceled, got %v", err)
	}
	if ctx.left.Load() != -1 {
		t.Fatalf("the search went on after the cancellation was seen (%d further looks)", -1-ctx.left.Load())
	}

	// Already cancelled: nothing is searched.
	done, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Prove(done, base, prop, Options{Now: now}); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled before the proof: %v", err)
	}
}

// writtenPolicies are the policies people wrote: every example and
// OpenShell fixture this validator loads, by file.
func writtenPolicies(t *testing.T) map[string]*policy.Policy {
	files, _ := filepath.Glob("../examples/*.yaml")
	more, _ := filepath.Glob("../policy/testdata/openshell/*.yaml")
	out := map[string]*policy.Policy{}
	for _, f := range append(files, more...) {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if p, _, err := policy.Parse(data); err == nil {
			out[f] = p
		} // else a fixture this validator refuses (documented divergences)
	}
	if len(out) < 10 {
		t.Fatalf("only %d policy files load", len(out))
	}
	return out
}

// Policies written by people prove well within the budget: every example
// and OpenShell fixture against nothing and against itself, and a
// one-rule change to the 1,000-rule benchmark policy with a 1,000-rule
// boundary.
func TestLegitimatePoliciesWithinBudget(t *testing.T) {
	empty := &policy.Policy{Version: 1}
	for f, p := range writtenPolicies(t) {
		for _, cur := range []*policy.Policy{empty, p} {
			rep, err := Prove(context.Background(), cur, p, Options{Now: now})
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if rep.Work > DefaultBudget/20 {
				t.Errorf("%s: %d work units, over 5%% of the budget", f, rep.Work)
			}
		}
	}
	cur := parse(t, benchDoc(1000, false))
	prop := cur.Clone()
	ep := prop.NetworkPolicies["svc0"].Endpoints[0]
	ep.Rules = append(ep.Rules, policy.Rule{Allow: &policy.L7Rule{Method: "POST", Path: "/v1/items/0/notes"}})
	rep, err := Prove(context.Background(), cur, prop, Options{Now: now, Boundary: parse(t, benchDoc(1000, true))})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Findings) == 0 || rep.Work > DefaultBudget/20 {
		t.Fatalf("1,000 rules: %d findings, %d work units", len(rep.Findings), rep.Work)
	}
	// The whole 1,000-rule policy as new.
	rep, err = Prove(context.Background(), empty, cur, Options{Now: now})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Work > DefaultBudget*3/4 {
		t.Fatalf("1,000 new rules: %d work units", rep.Work)
	}
}

// openShellProviderHosts are the hosts of every provider profile OpenShell
// ships (providers/*.yaml at 2f7fb655), patterns included: a sandbox with
// all of them attached.
var openShellProviderHosts = func() []HostPort {
	var out []HostPort
	for _, h := range strings.Fields(`*-aiplatform.googleapis.com *.s3.*.amazonaws.com *.s3.amazonaws.com
		*.s3.dualstack.*.amazonaws.com aiplatform.eu.rep.googleapis.com aiplatform.googleapis.com
		aiplatform.us.rep.googleapis.com s3.*.amazonaws.com s3.amazonaws.com s3.dualstack.*.amazonaws.com
		ab.chatgpt.com api.anthropic.com api.business.githubcopilot.com api.deepinfra.com
		api.enterprise.githubcopilot.com api.github.com api.githubcopilot.com api.individual.githubcopilot.com
		api.openai.com api2.cursor.sh auth.openai.com chatgpt.com copilot-proxy.githubusercontent.com
		cursor.blob.core.windows.net cursor.download.prss.microsoft.com default.exp-tas.com download.cursor.sh
		downloads.python.org files.pythonhosted.org github.com integrate.api.nvidia.com
		objects.githubusercontent.com pypi.org repo.cursor.sh sentry.io statsig.anthropic.com
		telemetry.enterprise.githubcopilot.com`) {
		out = append(out, HostPort{Host: h, Port: 443})
	}
	return out
}()

// Every provider OpenShell ships attached at once (37 hosts, 6 of them
// patterns) leaves the policies people write well within the budget.
func TestCredentialedPatternsWithinBudget(t *testing.T) {
	empty := &policy.Policy{Version: 1}
	for f, p := range writtenPolicies(t) {
		rep, err := Prove(context.Background(), empty, p, Options{Now: now, Credentialed: openShellProviderHosts})
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if rep.Work > DefaultBudget/20 {
			t.Errorf("%s: %d work units, over 5%% of the budget", f, rep.Work)
		}
	}
	// A proposal of wildcard endpoints under every pattern's domain.
	var sb strings.Builder
	sb.WriteString("version: 1\nnetwork_policies:\n  wide:\n    binaries: [ { path: /usr/bin/curl }, { path: /usr/bin/git } ]\n    endpoints:\n")
	for _, h := range []string{"*.amazonaws.com", "**.amazonaws.com", "*.googleapis.com", "**.github.com", "*.githubcopilot.com", "*.openai.com"} {
		fmt.Fprintf(&sb, "      - { host: %q, port: 443 }\n", h)
	}
	rep, err := Prove(context.Background(), empty, parse(t, sb.String()), Options{Now: now, Credentialed: openShellProviderHosts})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Work > DefaultBudget/20 {
		t.Errorf("wildcards over the providers' domains: %d work units, over 5%% of the budget", rep.Work)
	}
	if k := kinds(rep); len(k[NewCredentialedReach]) == 0 || len(k[L7BypassCredentialed]) == 0 {
		t.Fatalf("want credentialed reach and an L7 bypass:%s", show(rep.Findings))
	}
}
