package advisor

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/portcullis-dev/portcullis/decision"
	"github.com/portcullis-dev/portcullis/policy"
)

// DenialRecord is the part of a stored decision record the advisor needs
// to propose the narrowest rule that would have allowed that request.
type DenialRecord struct {
	Binary     string // absolute path of the calling binary
	Host       string
	Port       int
	HTTPMethod string // "" for an L4 (CONNECT without inspection) request
	Path       string // canonical path
	MCPMethod  string // JSON-RPC method, for MCP requests
	// Tool is what the MCP message names (the decision record's tool):
	// params.name of tools/call or prompts/get, params.uri of
	// resources/read, resources/subscribe and resources/unsubscribe.
	Tool  string
	Entry string // network_policies key of the deciding entry, if known
	// VersionProbe marks a request refused only because its MCP protocol
	// version is not listed: clients probe versions, so it is not offered.
	VersionProbe bool
	// RateLimited marks a tools/call the policy allowed but its rule's
	// rate_limit refused: no rule is missing, so it is not offered.
	RateLimited bool
	// Arguments are the denied tools/call's params.arguments (JSON), when
	// known: decision records carry only their digest, so the proxy that
	// kept them or the proposer supplies them, and the caller checks them
	// against the digest. A denial by an arguments_schema needs them.
	Arguments json.RawMessage
	// ReasonCode is the record's reason code; for
	// policy.ToolDefinitionChanged (a pinned tool whose definition
	// changed), ToolDefinition is the fingerprint of the definition the
	// proxy saw, which the proposal pins (repin.go).
	ReasonCode     string
	ToolDefinition string
	// DevAllowLoopback judges the request as a proxy run with
	// --dev-allow-loopback does, so a denial of a loopback upstream is an
	// ordinary denial with a proposal. It is set by whoever runs the
	// advisor (the gateway's and the proxy's dev switch), never read from
	// a record.
	DevAllowLoopback bool
}

// DenialOf returns what the advisor reads of a decision record: the
// request and the denial's cause, as recorded (Arguments and
// DevAllowLoopback are the caller's to add).
func DenialOf(r *decision.Record) DenialRecord {
	return DenialRecord{
		Binary: r.Binary, Host: r.Host, Port: r.Port, HTTPMethod: r.HTTPMethod, Path: r.Path,
		MCPMethod: r.MCPMethod, Tool: r.Tool, Entry: r.Entry, VersionProbe: r.VersionProbe,
		RateLimited: r.Decision == decision.RateLimited,
		ReasonCode:  r.ReasonCode, ToolDefinition: r.ToolDefinition,
	}
}

// FromDenial builds the proposal that would have allowed exactly the
// denied request: on an existing endpoint that matches it (and its binary)
// an add_allow_rules with that method and exact path, or MCP method and
// tool; otherwise an add_rule with one endpoint (exact host and port;
// protocol rest for HTTP, mcp scoped to the exact path for MCP, L4 when
// there is no HTTP view) and exactly that binary. The proposal is checked
// with Apply against base; a refusal is returned as a *RefusalError
// (RuleNotOffered for version probes and rate-limited calls).
//
// A tools/call whose tool the endpoint guards with an arguments_schema
// was denied by that schema: the proposal adds a rule for the tool whose
// arguments_schema is {"const": <the denied arguments>}, so the tool then
// admits what its schema admits or exactly those arguments, nothing else.
// The rule keeps the guard rules' rate_limit, definition pin and
// expires_at (guardTerms), so it widens the arguments only. Without
// rec.Arguments, or with a number a float64 does not hold exactly, such a
// denial is refused (RuleArguments).
//
// A tools/call denied with reason code tool_definition_changed becomes a
// repin of the endpoint's pins of the tool to rec.ToolDefinition, the
// definition the proxy saw (repin.go).
func FromDenial(base *policy.Policy, rec DenialRecord) (*Proposal, error) {
	if rec.VersionProbe {
		return refuse("", RuleNotOffered, "the request was refused only for its MCP protocol version (a version probe); it is not offered")
	}
	if rec.RateLimited {
		return refuse("", RuleNotOffered, "the call was allowed by policy but over its rule's rate_limit (HTTP 429), not denied: "+
			"no proposal is made from it; retry after the time the error gave, or ask an operator to change the rate_limit")
	}
	if rec.Port < 1 || rec.Port > 65535 {
		return refuse("port", RulePort, "%d is not a valid port", rec.Port)
	}
	if strings.TrimSpace(rec.Host) == "" {
		return refuse("host", RuleInvalidHost, "the denial names no host")
	}
	if _, ip := policy.ParseHostIP(rec.Host); !ip && !policy.ValidHostName(rec.Host) {
		// Paths are escaped into exact globs; a host cannot be: a denied
		// CONNECT to the literal host *.corp.example.com would otherwise
		// become a wildcard grant.
		return refuse("host", RuleInvalidHost, "the denied host %q is not a host name (letters, digits, '-', '_' and dots) or an IP address; only an exact host can be proposed", rec.Host)
	}
	if rec.MCPMethod != "" && rec.HTTPMethod == "" {
		rec.HTTPMethod = "POST"
	}
	if rec.HTTPMethod != "" && !strings.HasPrefix(rec.Path, "/") {
		return refuse("path", RulePath, "the denial carries no canonical path")
	}
	if rec.MCPMethod == "tools/call" && rec.Tool == "" {
		return refuse("tool", RuleTool, "the denied tools/call names no tool")
	}
	if rec.MCPMethod == "prompts/get" && rec.Tool == "" {
		return refuse("prompt", RulePrompt, "the denied prompts/get names no prompt")
	}
	if policy.IsResourceMethod(rec.MCPMethod) {
		if err := policy.PlainResourceURI(rec.Tool); err != nil {
			return refuse("resource", RuleResource, "the denied %s URI %q is not plain, so no resource rule can allow it: %v", rec.MCPMethod, rec.Tool, err)
		}
	}
	if rec.ReasonCode == policy.ToolDefinitionChanged && rec.MCPMethod == "tools/call" {
		return repinFromDenial(base, rec)
	}

	var rule *policy.L7Rule
	switch {
	case rec.MCPMethod != "":
		rule = &policy.L7Rule{Method: rec.MCPMethod}
		switch {
		case rec.MCPMethod == "tools/call":
			rule.Tool = &policy.Matcher{Any: []string{rec.Tool}}
		case rec.MCPMethod == "prompts/get":
			rule.Prompt = &policy.Matcher{Any: []string{policy.EscapeGlob(rec.Tool)}}
		case policy.IsResourceMethod(rec.MCPMethod):
			rule.Resource = &policy.Matcher{Any: []string{policy.EscapeGlob(rec.Tool)}}
		}
	case rec.HTTPMethod != "":
		rule = &policy.L7Rule{Method: strings.ToUpper(rec.HTTPMethod), Path: policy.EscapeGlob(rec.Path)}
	}

	req := policy.Request{Binary: rec.Binary, Host: rec.Host, Port: rec.Port, HTTPMethod: rec.HTTPMethod, Path: rec.Path, DevAllowLoopback: rec.DevAllowLoopback}
	if rec.MCPMethod != "" {
		req.MCP = policy.NamedMCPMessage(rec.MCPMethod, rec.Tool)
	}
	var guarded *AddAllowRules // the endpoint whose schema refused the arguments
	if rec.MCPMethod == "tools/call" {
		if key, ep := existingEndpoint(base, rec); ep != nil {
			if i := schemaGuard(ep, rec.Tool); i >= 0 {
				if len(rec.Arguments) == 0 {
					return refuse("arguments", RuleArguments, "tools/call %s is guarded by the arguments_schema of network_policies.%s %s rules[%d]: the narrowest proposal admits exactly the denied arguments, so it needs them "+
						"(the proxy keeps them for its recent denials: propose through policy.local, or give them with --arguments)", rec.Tool, key, policy.EndpointLabel(ep), i)
				}
				c, schema, err := exactArguments(rec)
				if err != nil {
					return nil, err
				}
				rule.ArgumentsSchema = schema
				rl, def, expires, err := guardTerms(ep, rec.Tool, time.Now())
				if err != nil {
					return refuse("arguments", RuleArguments, "tools/call %s on network_policies.%s %s: %v", rec.Tool, key, policy.EndpointLabel(ep), err)
				}
				rule.RateLimit, rule.Definition, rule.ExpiresAt = rl, def, expires
				req.MCP.Arguments = c
				// The call was denied by the schema, not the pin: judge it
				// as made under the pinned definition.
				req.MCP.AnyDefinition = def != ""
				guarded = &AddAllowRules{
					EndpointRef: EndpointRef{Policy: key, Host: ep.Host, Port: rec.Port, Path: ep.Path},
					Rules:       []policy.Rule{{Allow: rule}},
				}
			}
		}
	}
	if base != nil {
		if d := policy.Decide(base, req); d.Allow {
			// Denied for something no rule decides (the name did not
			// resolve, a malformed request, an older version): a rule
			// would add nothing.
			return refuse("", RuleNotOffered, "the current policy already allows this request (%s); it was denied for another reason", d.Reason)
		}
	}
	p := &Proposal{Rationale: rationale(rec, guarded != nil)}
	if guarded != nil {
		p.Operations = []Operation{{AddAllowRules: guarded}}
	} else if key, ep := existingEndpoint(base, rec); ep != nil && rule != nil {
		p.Operations = []Operation{{AddAllowRules: &AddAllowRules{
			EndpointRef: EndpointRef{Policy: key, Host: ep.Host, Port: rec.Port, Path: ep.Path},
			Rules:       []policy.Rule{{Allow: rule}},
		}}}
	} else {
		ep := &policy.Endpoint{Host: canonicalHost(rec.Host), Port: rec.Port}
		switch {
		case rec.MCPMethod != "":
			ep.Protocol, ep.Path = policy.ProtocolMCP, policy.EscapeGlob(rec.Path)
		case rec.HTTPMethod != "":
			ep.Protocol = policy.ProtocolREST
		}
		if rule != nil {
			ep.Rules = []policy.Rule{{Allow: rule}}
		}
		p.Operations = []Operation{{AddRule: &AddRule{
			Name: entryName(base, ep.Host, rec.Port),
			Rule: &policy.NetworkPolicy{Endpoints: []*policy.Endpoint{ep}, Binaries: []policy.Binary{{Path: rec.Binary}}},
		}}}
	}
	return offer(base, p, req, "no narrow rule can allow this request")
}

// exactArguments are rec's tools/call arguments in their canonical form
// and the arguments_schema admitting exactly them; a refusal
// (RuleArguments) for arguments that are not a JSON object or hold a
// number a float64 cannot hold exactly.
func exactArguments(rec DenialRecord) ([]byte, map[string]any, error) {
	c, err := policy.CanonicalArguments(rec.Arguments)
	if err != nil {
		_, err = refuse("arguments", RuleArguments, "%v", err)
		return nil, nil, err
	}
	if err := exactNumbers(rec.Arguments); err != nil {
		_, err = refuse("arguments", RuleArguments, "tools/call %s: %v", rec.Tool, err)
		return nil, nil, err
	}
	schema, err := constSchema(c)
	if err != nil {
		_, err = refuse("arguments", RuleArguments, "%v", err)
		return nil, nil, err
	}
	return c, schema, nil
}

// refuse is a refusal of the denial as a whole (no operation).
func refuse(field, rule, format string, args ...any) (*Proposal, error) {
	return nil, &RefusalError{Op: -1, Field: field, Rule: rule, Reason: fmt.Sprintf(format, args...)}
}

// offer returns p once Apply accepts it onto base and its result allows
// req; else the refusal, changes_nothing with failure and the decision's
// reason when req stays denied.
func offer(base *policy.Policy, p *Proposal, req policy.Request, failure string) (*Proposal, error) {
	result, err := Apply(base, p)
	if err != nil {
		return nil, err
	}
	if d := policy.Decide(result, req); !d.Allow {
		return refuse("", RuleChangesNothing, "%s: %s", failure, d.Reason)
	}
	return p, nil
}

// exactNumbers refuses denied arguments with a number whose float64
// reading differs from the number as written (12345678901234567890,
// 1000.00000000000000001). Their RFC 8785 form, which the const would
// hold and the proxy keeps, reads every number as a float64, so the const
// would admit a call that was never made (12345678901234567000) and not
// the denied one, which stays denied after approval.
func exactNumbers(args []byte) error {
	ptr, num, inexact, err := policy.InexactArgumentNumber(args)
	if err != nil {
		return err
	}
	if !inexact {
		return nil
	}
	if ptr == "" {
		ptr = "/"
	}
	return fmt.Errorf("the denied arguments hold the number %s (at %s), which a float64 cannot hold exactly: "+
		"a proposal admitting exactly them would admit another number (their RFC 8785 form) and not the call that was denied, so none is offered; "+
		"send the number as a string, or one a float64 holds exactly", num, ptr)
}

// guardTerms are the terms the guard rules of tool on ep set besides
// their arguments_schema, which the rule admitting exactly the denied
// arguments keeps: the strictest rate_limit (the least requests_per_minute
// and the least burst of any guard rule's), their definition pin, and the
// earliest expires_at of the guard rules still in force at now.
//
// Why a new rule that keeps them, and not the guard rule widened to
// anyOf [its schema, {const}]: a proposal only adds rules (no operation
// rewrites one), and a rule that keeps the guard's terms adds only the
// denied arguments, so the prover's findings are exactly
// arguments_widened. A rule with the const alone would drop the rate
// limit, the pin and the expiry for those arguments (rate_limit_widened,
// tool_definition_changed, a grant that outlives the guard's). Guard
// rules pinning different definitions have no narrowest pin: refused.
func guardTerms(ep *policy.Endpoint, tool string, now time.Time) (*policy.RateLimit, string, *time.Time, error) {
	var (
		rl      *policy.RateLimit
		def     string
		expires *time.Time
	)
	for _, r := range ep.Rules {
		a := r.Allow
		if a == nil || a.ArgumentsSchema == nil || !namesTool(a, tool) {
			continue
		}
		if a.ExpiresAt != nil && !now.Before(*a.ExpiresAt) {
			continue // expired: it admits nothing, so it sets no terms
		}
		if l := a.RateLimit; l != nil {
			burst := l.Burst
			if burst == 0 {
				burst = l.RequestsPerMinute // omitted: requests_per_minute
			}
			if rl == nil {
				rl = &policy.RateLimit{RequestsPerMinute: l.RequestsPerMinute, Burst: burst}
			} else {
				rl.RequestsPerMinute = min(rl.RequestsPerMinute, l.RequestsPerMinute)
				rl.Burst = min(rl.Burst, burst)
			}
		}
		if a.Definition != "" {
			if def != "" && def != a.Definition {
				return nil, "", nil, fmt.Errorf("its guard rules pin different definitions (%s and %s), so no rule admitting the denied arguments keeps the pin; an operator must decide", def, a.Definition)
			}
			def = a.Definition
		}
		if a.ExpiresAt != nil && (expires == nil || a.ExpiresAt.Before(*expires)) {
			t := *a.ExpiresAt
			expires = &t
		}
	}
	return rl, def, expires, nil
}

func rationale(rec DenialRecord, exactArguments bool) string {
	what := "a connection"
	switch {
	case rec.MCPMethod == "tools/call" && exactArguments:
		what = "tools/call " + rec.Tool + " with exactly the denied arguments"
	case rec.MCPMethod != "" && rec.Tool != "":
		what = rec.MCPMethod + " " + rec.Tool
	case rec.MCPMethod != "":
		what = rec.MCPMethod
	case rec.HTTPMethod != "":
		what = strings.ToUpper(rec.HTTPMethod) + " " + rec.Path
	}
	from := rec.Binary
	if from == "" {
		from = "an unidentified binary"
	}
	s := fmt.Sprintf("allow exactly the denied request: %s from %s to %s:%d", what, from, rec.Host, rec.Port)
	if len(s) > MaxRationaleBytes {
		s = s[:MaxRationaleBytes]
	}
	return s
}

// existingEndpoint finds an endpoint of base that the request is
// addressed to (host, port, path scope), of the protocol that judges it,
// in an entry whose binaries include the request's binary; the record's
// entry is preferred.
func existingEndpoint(base *policy.Policy, rec DenialRecord) (string, *policy.Endpoint) {
	if base == nil {
		return "", nil
	}
	keys := make([]string, 0, len(base.NetworkPolicies))
	for k := range base.NetworkPolicies {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if i := slices.Index(keys, rec.Entry); i > 0 {
		keys = append([]string{rec.Entry}, slices.Delete(keys, i, i+1)...)
	}
	want := policy.ProtocolREST
	if rec.MCPMethod != "" {
		want = policy.ProtocolMCP
	}
	for _, k := range keys {
		entry := base.NetworkPolicies[k]
		if entry == nil || !binaryIn(entry, rec.Binary) {
			continue
		}
		for _, ep := range entry.Endpoints {
			if ep == nil || ep.Protocol != want || ep.Access != "" {
				continue
			}
			if !policy.MatchHost(ep.Host, rec.Host) || !slices.Contains(policy.EndpointPorts(ep), rec.Port) {
				continue
			}
			if ep.Path != "" && !policy.MatchGlob(ep.Path, rec.Path) {
				continue
			}
			return k, ep
		}
	}
	return "", nil
}

func binaryIn(entry *policy.NetworkPolicy, binary string) bool {
	if len(entry.Binaries) == 0 {
		return true
	}
	for _, b := range entry.Binaries {
		if policy.MatchGlob(b.Path, binary) {
			return true
		}
	}
	return false
}

// entryName derives a network_policies key from the destination, unique
// in base.
func entryName(base *policy.Policy, host string, port int) string {
	var b strings.Builder
	for i := 0; i < len(host); i++ {
		c := host[i]
		if c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' {
			b.WriteByte(c)
		} else {
			b.WriteByte('-')
		}
	}
	stem := b.String()
	if len(stem) > MaxNameLen-16 {
		stem = stem[:MaxNameLen-16]
	}
	stem += "-" + strconv.Itoa(port)
	name := stem
	for i := 2; base != nil && base.NetworkPolicies[name] != nil; i++ {
		name = stem + "-" + strconv.Itoa(i)
	}
	return name
}
