package apitext

import (
	"fmt"
	"io"
	"strings"

	"github.com/portcullis-dev/portcullis/prover"
)

// A prover finding as portcullis prove shows it, offline (the gateway's
// findings are the API's Finding, rendered by Proposal).

// ProvedFinding is a prover.Finding with the field names of the rest of
// the CLI's JSON output.
type ProvedFinding struct {
	Kind           string          `json:"kind"`
	Entry          string          `json:"entry,omitempty"`
	Endpoint       string          `json:"endpoint,omitempty"`
	Rule           string          `json:"rule,omitempty"`
	Detail         string          `json:"detail"`
	Counterexample *Counterexample `json:"counterexample,omitempty"`
}

// Counterexample is a policy.Request with the field names of the rest of
// the JSON output.
type Counterexample struct {
	Binary     string `json:"binary,omitempty"`
	Host       string `json:"host"`
	Addr       string `json:"addr,omitempty"`
	Port       int    `json:"port"`
	HTTPMethod string `json:"http_method,omitempty"`
	Path       string `json:"path,omitempty"`
	MCPMethod  string `json:"mcp_method,omitempty"`
	Tool       string `json:"tool,omitempty"`
	// Arguments are the tools/call arguments (JSON), when they matter.
	Arguments string `json:"arguments,omitempty"`
}

// FindingOf is f as ProvedFinding.
func FindingOf(f prover.Finding) ProvedFinding {
	out := ProvedFinding{Kind: f.Kind, Entry: f.Entry, Endpoint: f.Endpoint, Rule: f.Rule, Detail: f.Detail}
	if r := f.Counterexample; r != nil {
		c := &Counterexample{Binary: r.Binary, Host: r.Host, Port: r.Port, HTTPMethod: r.HTTPMethod, Path: r.Path}
		if r.Addr.IsValid() {
			c.Addr = r.Addr.String()
		}
		if r.MCP != nil {
			c.MCPMethod, c.Tool, c.Arguments = r.MCP.Method, r.MCP.Name(), string(r.MCP.Arguments)
		}
		out.Counterexample = c
	}
	return out
}

// Findings writes one block per finding to w: kind and where, what, and
// the counterexample request; or that there is none.
func Findings(w io.Writer, findings []ProvedFinding) {
	if len(findings) == 0 {
		fmt.Fprintln(w, "no findings: the proposed policy allows nothing the current one denies")
		return
	}
	for _, f := range findings {
		where := strings.TrimSpace(strings.Join([]string{f.Entry, f.Endpoint, f.Rule}, " "))
		fmt.Fprintf(w, "%s  %s\n  %s\n", f.Kind, where, f.Detail)
		if c := f.Counterexample; c != nil {
			req := fmt.Sprintf("%s:%d", c.Host, c.Port)
			if c.HTTPMethod != "" {
				req = c.HTTPMethod + " " + req + c.Path
			}
			if c.MCPMethod != "" {
				req += " " + c.MCPMethod
				if c.Tool != "" {
					req += " " + c.Tool
				}
				if c.Arguments != "" {
					req += " arguments " + OneLine(c.Arguments)
				}
			}
			if c.Binary != "" {
				req += " from " + c.Binary
			}
			fmt.Fprintf(w, "  for example: %s\n", req)
		}
	}
}
