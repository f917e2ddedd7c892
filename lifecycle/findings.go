package lifecycle

import (
	"encoding/json"

	"github.com/portcullis-dev/portcullis/prover"
	"github.com/portcullis-dev/portcullis/store"
)

// Finding is one prover finding as a proposal keeps it (store.Finding,
// which the OCSF mapping reads without linking this package).
type Finding = store.Finding

// Request is a finding's counterexample.
type Request = store.Request

// storedFindings is how findings are stored: {"findings": […]}, with the
// field names of the API's ProveResponse as protojson writes them, so
// proposals stored by earlier versions read the same.
type storedFindings struct {
	Findings []Finding `json:"findings,omitempty"`
}

// FindingsOf converts a prover report.
func FindingsOf(rep *prover.Report) []Finding {
	out := make([]Finding, 0, len(rep.Findings))
	for _, f := range rep.Findings {
		lf := Finding{Kind: f.Kind, Entry: f.Entry, Endpoint: f.Endpoint, Rule: f.Rule, Detail: f.Detail, Credentialed: f.Credentialed}
		if r := f.Counterexample; r != nil {
			c := &Request{Binary: r.Binary, Host: r.Host, Port: uint32(r.Port), HTTPMethod: r.HTTPMethod, Path: r.Path, Query: r.Query}
			if r.Addr.IsValid() {
				c.Addr = r.Addr.String()
			}
			if m := r.MCP; m != nil {
				c.MCPMethod, c.Tool, c.MCPProtocolVersion = m.Method, m.Name(), m.ProtocolVersion
				if len(m.Arguments) > 0 {
					c.Arguments = string(m.Arguments)
				}
			}
			lf.Counterexample = c
		}
		out = append(out, lf)
	}
	return out
}

func encodeFindings(rep *prover.Report) ([]byte, error) {
	return encodeStored(FindingsOf(rep))
}

func encodeStored(findings []Finding) ([]byte, error) {
	return json.Marshal(storedFindings{Findings: findings})
}

// DecodeFindings reads a proposal's stored findings.
func DecodeFindings(b []byte) ([]Finding, error) {
	if len(b) == 0 {
		return nil, nil
	}
	var sf storedFindings
	if err := json.Unmarshal(b, &sf); err != nil {
		return nil, err
	}
	return sf.Findings, nil
}
