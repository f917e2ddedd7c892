package approval

// samples are the proposals Compile evaluates a module against: one of
// each shape the rules must answer well-formed for.
var samples = []struct {
	name string
	in   Input
}{
	{"deny rules only", Input{
		Proposal: ProposalInput{ID: 1, Sandbox: "sample", Rationale: "block a tracker", Proposer: "sample",
			BaseVersion: 3, ResultingHash: "0000", Operations: []any{map[string]any{
				"add_deny_rules": map[string]any{"policy": "web", "host": "api.example.com", "port": float64(443),
					"rules": []any{map[string]any{"deny": map[string]any{"method": "GET", "path": "/track/**"}}}}}}},
		Sandbox: SandboxInput{Name: "sample", CurrentVersion: 3},
	}},
	{"new GET path", proposed(curlFinding("new_path", false, "api.example.com", "rules[1]",
		"GET was allowed on other paths only", "GET", "/v1/orders"))},
	{"new reach", proposed(curlFinding("new_reach", true, "other.example.com", "rules[0]",
		"the binary could not reach this destination before", "POST", "/"))},
	{"credentialed reach", Input{
		Proposal: sampleProposal(),
		Findings: []FindingInput{
			{Kind: "new_credentialed_reach", Blocking: true, Credentialed: true, Entry: "github", Endpoint: "api.github.com:443",
				Rule: "rules[0]", Detail: "the binary could not reach this destination before; on credentialed destination api.github.com:443",
				Counterexample: RequestInput{Binary: "/usr/bin/gh", Host: "api.github.com", Port: 443, HTTPMethod: "GET", Path: "/user"}},
			{Kind: "exceeds_boundary", Blocking: true, Credentialed: true, Entry: "github", Endpoint: "api.github.com:443",
				Rule: "rules[0]", Detail: "the boundary denies it",
				Counterexample: RequestInput{Binary: "/usr/bin/gh", Host: "api.github.com", Port: 443, HTTPMethod: "GET", Path: "/user"}},
			{Kind: "enforcement_weakened", Blocking: true, Entry: "github", Endpoint: "api.github.com:443", Detail: "tls: skip"},
		},
		Sandbox: SandboxInput{Name: "sample", CurrentVersion: 3, CredentialedHosts: []string{"api.github.com:443"}, HasBoundary: true},
	}},
	{"credentialed git reach", Input{
		Proposal: sampleProposal(),
		Findings: []FindingInput{
			{Kind: "l7_bypass_credentialed", Blocking: true, Credentialed: true, Entry: "github", Endpoint: "github.com:443",
				Rule: "endpoint", Detail: "/usr/bin/git bypasses L7 inspection (git smart HTTP through a CONNECT tunnel and git over SSH are not REST) and could not reach credentialed destination github.com:443 before",
				Counterexample: RequestInput{Binary: "/usr/bin/git", Host: "github.com", Port: 443}},
			{Kind: "new_credentialed_reach", Blocking: true, Credentialed: true, Entry: "github", Endpoint: "github.com:443",
				Rule: "endpoint", Detail: "the binary could not reach this destination before; on credentialed destination github.com:443",
				Counterexample: RequestInput{Binary: "/usr/bin/git", Host: "github.com", Port: 443}},
		},
		Sandbox: SandboxInput{Name: "sample", CurrentVersion: 3, CredentialedHosts: []string{"github.com:443"}},
	}},
	{"held call", Input{
		Kind: KindCall,
		Call: CallInput{ID: 7, Sandbox: "sample", Proxy: "proxy-1", Binary: "/usr/bin/agent", Endpoint: "orders.example.com:443/mcp",
			Method: "POST", MCPMethod: "tools/call", Tool: "refund", ArgumentsDigest: "sha256:00", PolicyVersion: 3, Entry: "orders", Rule: "rules[0]"},
		Decider: DeciderInput{Name: "olive", Role: "operator"},
		Sandbox: SandboxInput{Name: "sample", CurrentVersion: 3},
	}},
	{"two approvers", Input{
		Proposal: sampleProposal(),
		Findings: []FindingInput{{Kind: "new_mcp_tool", Blocking: true, Entry: "orders", Endpoint: "orders.example.com:443/mcp",
			Rule: "rules[2]", Detail: "tools/call refund was not allowed",
			Counterexample: RequestInput{Binary: "/usr/bin/agent", Host: "orders.example.com", Port: 443, HTTPMethod: "POST",
				Path: "/mcp", MCPMethod: "tools/call", Tool: "refund"}}},
		Sandbox:   SandboxInput{Name: "sample", CurrentVersion: 3},
		Approvers: []string{"alice", "bob"},
	}},
}

func sampleProposal() ProposalInput {
	return ProposalInput{ID: 2, Sandbox: "sample", Rationale: "the agent needs it", Proposer: "sample",
		BaseVersion: 3, ResultingHash: "0000", DenialID: "dn_sample", Operations: []any{map[string]any{
			"add_allow_rules": map[string]any{"policy": "web", "host": "api.example.com", "port": float64(443),
				"rules": []any{map[string]any{"allow": map[string]any{"method": "GET", "path": "/v1/orders"}}}}}}}
}

// proposed is a sample of sampleProposal with findings, in a sandbox
// without credentials or boundary.
func proposed(findings ...FindingInput) Input {
	return Input{Proposal: sampleProposal(), Findings: findings, Sandbox: SandboxInput{Name: "sample", CurrentVersion: 3}}
}

// curlFinding is a finding on entry web whose counterexample is curl's
// method request for path at host:443.
func curlFinding(kind string, blocking bool, host, rule, detail, method, path string) FindingInput {
	return FindingInput{Kind: kind, Blocking: blocking, Entry: "web", Endpoint: host + ":443", Rule: rule, Detail: detail,
		Counterexample: RequestInput{Binary: "/usr/bin/curl", Host: host, Port: 443, HTTPMethod: method, Path: path}}
}
