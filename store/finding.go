package store

// Finding is one prover finding as a proposal keeps it (Proposal.Findings
// holds their JSON): what an approver is shown and what the approval rules
// judge. Package lifecycle makes them from prover reports.
type Finding struct {
	Kind         string `json:"kind"`
	Entry        string `json:"entry,omitempty"`
	Endpoint     string `json:"endpoint,omitempty"`
	Rule         string `json:"rule,omitempty"`
	Detail       string `json:"detail,omitempty"`
	Credentialed bool   `json:"credentialed,omitempty"`
	// Counterexample is a request the change newly allows (nil for
	// findings about rules rather than requests).
	Counterexample *Request `json:"counterexample,omitempty"`
}

// Request is a finding's counterexample.
type Request struct {
	Binary             string `json:"binary,omitempty"`
	Host               string `json:"host,omitempty"`
	Port               uint32 `json:"port,omitempty"`
	Addr               string `json:"addr,omitempty"`
	HTTPMethod         string `json:"httpMethod,omitempty"`
	Path               string `json:"path,omitempty"`
	Query              string `json:"query,omitempty"`
	MCPMethod          string `json:"mcpMethod,omitempty"`
	Tool               string `json:"tool,omitempty"` // what the MCP message names: tool, prompt or resource URI
	MCPProtocolVersion string `json:"mcpProtocolVersion,omitempty"`
	Arguments          string `json:"arguments,omitempty"`
}
