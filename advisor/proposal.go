package advisor

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"unicode"

	"github.com/portcullis-dev/portcullis/policy"
)

// Limits on a proposal. They bound the work an untrusted sandbox can cause.
const (
	MaxProposalBytes     = 256 << 10
	MaxRationaleBytes    = 4000
	MaxIdempotencyKeyLen = 128
	MaxOperations        = 32
	MaxRulesPerOperation = 64
	MaxEndpointsPerEntry = 16
	MaxNameLen           = 63
)

// Proposal is a sandbox's request for a policy change: a rationale and
// operations on its current (or named) policy version. See DESIGN.md,
// "Proposal files".
type Proposal struct {
	Rationale string `json:"rationale" yaml:"rationale"`
	// BaseVersion is the version the operations apply to; nil means the
	// current version.
	BaseVersion    *uint64     `json:"base_version,omitempty" yaml:"base_version,omitempty"`
	IdempotencyKey string      `json:"idempotency_key,omitempty" yaml:"idempotency_key,omitempty"`
	Operations     []Operation `json:"operations" yaml:"operations"`
}

// Operation is exactly one of its fields.
type Operation struct {
	AddRule       *AddRule       `json:"add_rule,omitempty" yaml:"add_rule,omitempty"`
	AddAllowRules *AddAllowRules `json:"add_allow_rules,omitempty" yaml:"add_allow_rules,omitempty"`
	AddBinary     *AddBinary     `json:"add_binary,omitempty" yaml:"add_binary,omitempty"`
	AddDenyRules  *AddDenyRules  `json:"add_deny_rules,omitempty" yaml:"add_deny_rules,omitempty"`
	Repin         *Repin         `json:"repin,omitempty" yaml:"repin,omitempty"`
}

// Kind names the operation's one field ("add_rule", …), "" if none.
func (o Operation) Kind() string {
	switch {
	case o.AddRule != nil:
		return "add_rule"
	case o.AddAllowRules != nil:
		return "add_allow_rules"
	case o.AddBinary != nil:
		return "add_binary"
	case o.AddDenyRules != nil:
		return "add_deny_rules"
	case o.Repin != nil:
		return "repin"
	}
	return ""
}

// AddRule adds a new entry of network_policies.
type AddRule struct {
	Name string                `json:"name" yaml:"name"`
	Rule *policy.NetworkPolicy `json:"rule" yaml:"rule"`
}

// EndpointRef names an existing endpoint that an operation changes
// (AddAllowRules, AddDenyRules, Repin): its network_policies key, host and
// port, and its path scope when the host:port is split by path.
type EndpointRef struct {
	Policy string `json:"policy" yaml:"policy"`
	Host   string `json:"host" yaml:"host"`
	Port   int    `json:"port" yaml:"port"`
	Path   string `json:"path,omitempty" yaml:"path,omitempty"`
}

// AddAllowRules adds allow rules to an existing endpoint.
type AddAllowRules struct {
	EndpointRef `yaml:",inline"`
	Rules       []policy.Rule `json:"rules" yaml:"rules"`
}

// AddBinary adds one binary to an existing entry. Endpoints must list
// every endpoint the entry grants, as policy.EndpointLabel writes them
// ("orders.example.com:443/mcp"), so the proposer states what it gains.
type AddBinary struct {
	Policy    string   `json:"policy" yaml:"policy"`
	Path      string   `json:"path" yaml:"path"`
	Endpoints []string `json:"endpoints" yaml:"endpoints"`
}

// AddDenyRules adds deny rules to an existing endpoint. Narrowing is
// always welcome.
type AddDenyRules struct {
	EndpointRef `yaml:",inline"`
	Rules       []*policy.L7Rule `json:"rules" yaml:"rules"`
}

// ParseError is the error of ParseProposal: every problem found, each
// with its field path (operations[1].add_allow_rules.rules[0].allow.tool).
type ParseError struct {
	Problems []policy.Problem
}

// Error lists every problem as "path: message", joined by "; ".
func (e *ParseError) Error() string {
	if e == nil || len(e.Problems) == 0 {
		return "invalid proposal"
	}
	// A policy's problems are listed the same way: one join for both.
	return "invalid proposal: " + (&policy.ValidationError{Problems: e.Problems}).Error()
}

// ParseProposal decodes a proposal, YAML or JSON, strictly: unknown
// fields, duplicate keys, values of the wrong type and missing or
// out-of-bounds fields are all reported in a *ParseError, each with its
// path. It checks the proposal's shape only; whether it is narrow enough
// is Apply's business.
func ParseProposal(data []byte) (p *Proposal, err error) {
	p = new(Proposal)
	readable, problems := policy.DecodeStrict(data, p, "proposal", MaxProposalBytes)
	if !readable {
		return nil, &ParseError{Problems: problems}
	}
	problems = checkShape(problems, p)
	if len(problems) > 0 {
		return nil, &ParseError{Problems: problems}
	}
	return p, nil
}

// Field paths, as the policy package writes them.
var (
	keyPath   = policy.KeyPath
	indexPath = policy.IndexPath
)

// checkShape adds to problems (the decoder's) the required and bounded
// fields that are missing or too long, and returns them.
func checkShape(problems []policy.Problem, p *Proposal) []policy.Problem {
	reported := map[string]bool{}
	for _, pr := range problems {
		reported[pr.Path] = true
	}
	add := func(path, format string, args ...any) {
		if !reported[path] {
			problems = append(problems, policy.Problem{Path: path, Message: fmt.Sprintf(format, args...)})
		}
	}
	switch {
	case strings.TrimSpace(p.Rationale) == "":
		add("rationale", "is required: say why the sandbox needs this")
	case len(p.Rationale) > MaxRationaleBytes:
		add("rationale", "is longer than %d bytes", MaxRationaleBytes)
	}
	if p.BaseVersion != nil && *p.BaseVersion == 0 {
		add("base_version", "must be >= 1 (omit it for the current version)")
	}
	if len(p.IdempotencyKey) > MaxIdempotencyKeyLen {
		add("idempotency_key", "is longer than %d characters", MaxIdempotencyKeyLen)
	} else if !printable(p.IdempotencyKey) {
		add("idempotency_key", "must be printable characters without spaces")
	}
	switch {
	case len(p.Operations) == 0:
		add("operations", "needs at least one operation")
	case len(p.Operations) > MaxOperations:
		add("operations", "has %d operations; the limit is %d", len(p.Operations), MaxOperations)
	}
	for i, op := range p.Operations {
		path := indexPath("operations", i)
		n := 0
		for _, set := range []bool{op.AddRule != nil, op.AddAllowRules != nil, op.AddBinary != nil, op.AddDenyRules != nil, op.Repin != nil} {
			if set {
				n++
			}
		}
		if n != 1 {
			add(path, "must hold exactly one of add_rule, add_allow_rules, add_binary, add_deny_rules, repin")
			continue
		}
		required := func(field string, missing bool) {
			if missing {
				add(keyPath(keyPath(path, op.Kind()), field), "is required")
			}
		}
		rules := func(field string, n int) {
			fp := keyPath(keyPath(path, op.Kind()), field)
			if n == 0 {
				add(fp, "needs at least one rule")
			} else if n > MaxRulesPerOperation {
				add(fp, "has %d rules; the limit is %d", n, MaxRulesPerOperation)
			}
		}
		// The operations on an existing endpoint (adding allow or deny
		// rules, re-pinning) name it the same way.
		endpoint := func(e EndpointRef) {
			required("policy", e.Policy == "")
			required("host", e.Host == "")
			required("port", e.Port == 0)
		}
		switch {
		case op.AddRule != nil:
			required("name", op.AddRule.Name == "")
			required("rule", op.AddRule.Rule == nil)
		case op.AddAllowRules != nil:
			endpoint(op.AddAllowRules.EndpointRef)
			rules("rules", len(op.AddAllowRules.Rules))
		case op.AddBinary != nil:
			o := op.AddBinary
			required("policy", o.Policy == "")
			required("path", o.Path == "")
			if len(o.Endpoints) == 0 {
				add(keyPath(keyPath(path, "add_binary"), "endpoints"), "must list every endpoint the entry grants")
			}
		case op.AddDenyRules != nil:
			endpoint(op.AddDenyRules.EndpointRef)
			rules("rules", len(op.AddDenyRules.Rules))
		case op.Repin != nil:
			o := op.Repin
			endpoint(o.EndpointRef)
			required("tool", o.Tool == "")
			required("from", o.From == "")
			required("to", o.To == "")
		}
	}
	return problems
}

func printable(s string) bool {
	for _, r := range s {
		if !unicode.IsPrint(r) || unicode.IsSpace(r) {
			return false
		}
	}
	return true
}

// Encode returns the proposal as JSON, the wire form of POST /v1/proposals.
func (p *Proposal) Encode() ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(p); err != nil {
		return nil, fmt.Errorf("encode proposal: %w", err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
