package prover

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/portcullis-dev/portcullis/policy"
)

// Finding kinds.
const (
	NewReach              = "new_reach"
	NewPath               = "new_path"
	NewHTTPMethod         = "new_http_method"
	NewMCPMethod          = "new_mcp_method"
	NewMCPTool            = "new_mcp_tool"
	NewMCPPrompt          = "new_mcp_prompt"
	NewMCPResource        = "new_mcp_resource"
	NewCredentialedReach  = "new_credentialed_reach"
	PrivateNetwork        = "private_network"
	WildcardWidening      = "wildcard_widening"
	ExceedsBoundary       = "exceeds_boundary"
	ArgumentsWidened      = "arguments_widened"
	EnforcementWeakened   = "enforcement_weakened"
	CloudMetadata         = "cloud_metadata"
	L7BypassCredentialed  = "l7_bypass_credentialed"
	RateLimitWidened      = "rate_limit_widened"
	ToolDefinitionChanged = policy.ToolDefinitionChanged
	MCPOAuthOpened        = "mcp_oauth_opened"
	// ReviewRemoved: requests the current policy allows only after a
	// person's review (policy.Decision.Review) that the proposed one
	// allows without; ReviewAdded: the reverse, a tightening reported so
	// that a reviewer sees it (review.go).
	ReviewRemoved = "review_removed"
	ReviewAdded   = "review_added"
)

// L7Bypass is OpenShell's binary registry (crates/openshell-prover/registry/
// binaries) cut to the entries with a protocol marked bypasses_l7: binaries
// whose wire protocol the L7 proxy cannot inspect, by exact path, with why.
// A request from one of them that reaches a credentialed destination the
// binary could not reach before is l7_bypass_credentialed. The registry's
// other entries (claude, curl, gh, node, python3.13, wget) speak HTTP the
// proxy inspects.
var L7Bypass = map[string]string{
	"/usr/bin/git": "git smart HTTP through a CONNECT tunnel and git over SSH are not REST",
	"/usr/bin/ssh": "SSH is an encrypted tunnel (port forwarding, scp)",
	"/usr/bin/nc":  "netcat sends arbitrary data over raw TCP",
}

// l7Bypass lists the keys of L7Bypass in order.
var l7Bypass = func() []string {
	out := make([]string, 0, len(L7Bypass))
	for b := range L7Bypass {
		out = append(out, b)
	}
	sort.Strings(out)
	return out
}()

// HostPort is a destination.
type HostPort struct {
	Host string `json:"host"`
	Port int    `json:"port"`
}

// Options are the context of a proof.
type Options struct {
	// Boundary, when set, is the most the sandbox may ever get: what the
	// change adds beyond it is exceeds_boundary.
	Boundary *policy.Policy
	// Credentialed destinations carry credentials injected for the sandbox.
	Credentialed []HostPort
	// Now is the time expires_at is judged at (zero: time.Now()).
	Now time.Time
	// DevAllowLoopback proves as a proxy run with --dev-allow-loopback.
	DevAllowLoopback bool
	// Budget is the most work the proof may do, in work units (zero:
	// DefaultBudget); beyond it Prove returns a *TooComplexError.
	Budget int64
}

// Report is the outcome of a proof: no findings means the proposed policy
// allows nothing the current one denies, and lets nothing through without
// review that the current one holds for review (within the scope in
// doc.go).
type Report struct {
	Findings []Finding `json:"findings"`
	// Work is the work units the proof used (of Options.Budget).
	Work int64 `json:"-"`
}

// Finding is one kind of added access, where it comes from, and for
// request-level kinds a concrete request proving it.
type Finding struct {
	Kind string `json:"kind"`
	// Counterexample is allowed by the proposed policy and denied by the
	// current one (exceeds_boundary: denied by the boundary;
	// review_removed: allowed by both, after review by the current one
	// only; review_added: the reverse). Nil for rule-level kinds.
	Counterexample *policy.Request `json:"counterexample,omitempty"`
	Entry          string          `json:"entry,omitempty"`    // network_policies key in the proposed policy
	Endpoint       string          `json:"endpoint,omitempty"` // policy.EndpointLabel
	Rule           string          `json:"rule,omitempty"`
	Detail         string          `json:"detail"`
	// Credentialed: the counterexample goes to a destination that carries
	// credentials injected for the sandbox (always, for
	// l7_bypass_credentialed).
	Credentialed bool `json:"credentialed,omitempty"`

	atoms []atom
}

// atom is one class of requests (all Decide cannot tell apart) in one
// destination group.
type atom struct {
	g   *group
	sig string
}

// Covers reports whether r belongs to one of the request classes the
// finding stands for. Every request of such a class gets the same
// decisions as the counterexample.
func (f *Finding) Covers(r policy.Request) bool {
	for _, a := range f.atoms {
		if sig, ok := a.g.signature(r); ok && sig == a.sig {
			return true
		}
	}
	return false
}

// Prove returns what proposed allows that current denies, plus the
// rule-level findings. It never samples: see doc.go for why it is exact.
//
// Every proof runs within a budget of work (Options.Budget, see budget.go):
// one that would need more returns a *TooComplexError (errors.Is
// ErrTooComplex) and no report, and a proof whose ctx is done returns the
// context's error. At most two proofs run at once in the
// process; the others wait for ctx.
func Prove(ctx context.Context, current, proposed *policy.Policy, opts Options) (rep *Report, err error) {
	if proposed == nil {
		return nil, fmt.Errorf("prover: no proposed policy")
	}
	if err := acquire(ctx); err != nil {
		return nil, err
	}
	defer release()
	m := newMeter(ctx, opts.Budget)
	defer func() {
		if r := recover(); r != nil {
			a, ok := r.(abort)
			if !ok {
				panic(r)
			}
			rep, err = nil, a.err
		}
	}()
	m.charge("proof", 0)
	if opts.Now.IsZero() {
		opts.Now = time.Now()
	}
	pr := &prover{opts: opts, m: m, cur: refsOf(current), prop: refsOf(proposed), bound: refsOf(opts.Boundary),
		findings: map[string]*Finding{}, current: current, proposed: proposed}
	m.charge("policy scan", len(pr.cur)+len(pr.prop)+len(pr.bound))
	for _, e := range changedEndpoints(pr.cur, pr.prop) {
		pr.proveGroup(e)
	}
	pr.reviewedArguments()
	rep = &Report{}
	for _, f := range pr.findings {
		rep.Findings = append(rep.Findings, *f)
	}
	rep.Findings = append(rep.Findings, ruleFindings(m, pr.cur, pr.prop, current, proposed, opts)...)
	sort.SliceStable(rep.Findings, func(i, j int) bool {
		a, b := rep.Findings[i], rep.Findings[j]
		if a.Kind != b.Kind {
			return a.Kind < b.Kind
		}
		if a.Entry != b.Entry {
			return a.Entry < b.Entry
		}
		if a.Endpoint != b.Endpoint {
			return a.Endpoint < b.Endpoint
		}
		if a.Rule != b.Rule {
			return a.Rule < b.Rule
		}
		return !a.Credentialed && b.Credentialed
	})
	rep.Work = m.used
	return rep, nil
}

// prover is one proof: its options and meter, the endpoints of the
// current, proposed and boundary policies, and the findings so far (by
// kind, place and credentialed mark).
type prover struct {
	opts              Options
	m                 *meter
	cur, prop, bound  []ref
	findings          map[string]*Finding
	curGlobs          map[globUse]bool // currentUses
	current, proposed *policy.Policy
}
