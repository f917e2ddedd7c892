package approval

import (
	"github.com/portcullis-dev/portcullis/prover"
)

// Input is the document the rules see as input. Its JSON form (the field
// tags) is the documented contract of the Rego module. The caller builds
// it from its stored proposal (package lifecycle does).
type Input struct {
	// Kind is what is decided: KindProposal or KindCall, a held call
	// (Call and Decider set; Proposal and Findings empty).
	Kind      string         `json:"kind"`
	Call      CallInput      `json:"call"`
	Decider   DeciderInput   `json:"decider"`
	Proposal  ProposalInput  `json:"proposal"`
	Findings  []FindingInput `json:"findings"`
	Sandbox   SandboxInput   `json:"sandbox"`
	Approvers []string       `json:"approvers"` // distinct approvers so far, oldest first
}

// Kinds of Input.
const (
	KindProposal = "proposal"
	KindCall     = "call"
)

// CallInput is input.call: the held call a person decides.
type CallInput struct {
	ID      uint64 `json:"id"`
	Sandbox string `json:"sandbox"`
	Proxy   string `json:"proxy"`
	Binary  string `json:"binary"`
	// Endpoint is "host:port" and the path.
	Endpoint        string `json:"endpoint"`
	Method          string `json:"method"`
	MCPMethod       string `json:"mcp_method"`
	Tool            string `json:"tool"`
	ArgumentsDigest string `json:"arguments_digest"`
	PolicyVersion   uint32 `json:"policy_version"`
	Entry           string `json:"entry"`
	Rule            string `json:"rule"`
}

// DeciderInput is input.decider: who is deciding (a held call).
type DeciderInput struct {
	Name string `json:"name"`
	Role string `json:"role"`
	// Sandbox is a sandbox token's sandbox ("" for other roles).
	Sandbox string `json:"sandbox"`
}

// ProposalInput is input.proposal.
type ProposalInput struct {
	ID            uint64 `json:"id"`
	Sandbox       string `json:"sandbox"`
	Rationale     string `json:"rationale"`
	Proposer      string `json:"proposer"`
	BaseVersion   uint32 `json:"base_version"`
	ResultingHash string `json:"resulting_hash"`
	// Operations is the proposal file's operations as generic JSON values
	// (maps, slices, strings, float64, bool, nil).
	Operations []any  `json:"operations"`
	DenialID   string `json:"denial_id"`
}

// FindingInput is one of input.findings.
type FindingInput struct {
	Kind string `json:"kind"`
	// Blocking is Blocking(Kind), so that rules need not repeat the list.
	Blocking       bool         `json:"blocking"`
	Credentialed   bool         `json:"credentialed"`
	Entry          string       `json:"entry"`
	Endpoint       string       `json:"endpoint"`
	Rule           string       `json:"rule"`
	Detail         string       `json:"detail"`
	Counterexample RequestInput `json:"counterexample"` // zero for rule-level kinds
}

// RequestInput is a finding's counterexample.
type RequestInput struct {
	Binary     string `json:"binary"`
	Host       string `json:"host"`
	Port       uint32 `json:"port"`
	HTTPMethod string `json:"http_method"`
	Path       string `json:"path"`
	MCPMethod  string `json:"mcp_method"`
	Tool       string `json:"tool"`
}

// SandboxInput is input.sandbox.
type SandboxInput struct {
	Name              string   `json:"name"`
	CurrentVersion    uint32   `json:"current_version"`
	CredentialedHosts []string `json:"credentialed_hosts"` // HOST:PORT
	// Providers are the credential providers attached, sorted; their
	// hosts are credentialed destinations too (findings carry the mark).
	Providers   []string `json:"providers"`
	HasBoundary bool     `json:"has_boundary"`
}

// Blocking reports whether a finding of this kind forbids auto-approval:
// every kind except prover.NewPath, including kinds this version does not
// know.
func Blocking(kind string) bool {
	return kind != prover.NewPath
}

// value is in as the generic JSON value the evaluator takes, built by hand:
// a JSON round trip of the struct would cost more than the evaluation.
func (in Input) value() map[string]any {
	findings := make([]any, len(in.Findings))
	for i, f := range in.Findings {
		c := f.Counterexample
		findings[i] = map[string]any{
			"kind":         f.Kind,
			"blocking":     f.Blocking,
			"credentialed": f.Credentialed,
			"entry":        f.Entry,
			"endpoint":     f.Endpoint,
			"rule":         f.Rule,
			"detail":       f.Detail,
			"counterexample": map[string]any{
				"binary":      c.Binary,
				"host":        c.Host,
				"port":        int64(c.Port),
				"http_method": c.HTTPMethod,
				"path":        c.Path,
				"mcp_method":  c.MCPMethod,
				"tool":        c.Tool,
			},
		}
	}
	ops := in.Proposal.Operations
	if ops == nil {
		ops = []any{}
	}
	c := in.Call
	return map[string]any{
		"kind": in.Kind,
		"call": map[string]any{
			"id": c.ID, "sandbox": c.Sandbox, "proxy": c.Proxy, "binary": c.Binary, "endpoint": c.Endpoint,
			"method": c.Method, "mcp_method": c.MCPMethod, "tool": c.Tool, "arguments_digest": c.ArgumentsDigest,
			"policy_version": int64(c.PolicyVersion), "entry": c.Entry, "rule": c.Rule,
		},
		"decider": map[string]any{"name": in.Decider.Name, "role": in.Decider.Role, "sandbox": in.Decider.Sandbox},
		"proposal": map[string]any{
			"id":             in.Proposal.ID,
			"sandbox":        in.Proposal.Sandbox,
			"rationale":      in.Proposal.Rationale,
			"proposer":       in.Proposal.Proposer,
			"base_version":   int64(in.Proposal.BaseVersion),
			"resulting_hash": in.Proposal.ResultingHash,
			"operations":     ops,
			"denial_id":      in.Proposal.DenialID,
		},
		"findings": findings,
		"sandbox": map[string]any{
			"name":               in.Sandbox.Name,
			"current_version":    int64(in.Sandbox.CurrentVersion),
			"credentialed_hosts": nonNil(in.Sandbox.CredentialedHosts),
			"providers":          nonNil(in.Sandbox.Providers),
			"has_boundary":       in.Sandbox.HasBoundary,
		},
		"approvers": nonNil(in.Approvers),
	}
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
