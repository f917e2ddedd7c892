package prover

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/portcullis-dev/portcullis/policy"
)

// Rule-level findings: changes no request shows, reported with the changed
// rule as evidence.

// metadataAddrs are the cloud-metadata and credential addresses
// (policy.IsMetadataHost knows them in every spelling; allowed_ips
// prefixes are checked for containing any of them).
var metadataAddrs = []string{
	"169.254.169.254", "169.254.170.2", "169.254.170.23", "fd00:ec2::254", "fd00:ec2::23",
	"100.100.100.200", "168.63.129.16",
}

// ruleFindings looks at the proposed endpoints that changed (refs marked
// by changedEndpoints): the same endpoint in the same entry in the current
// policy changes nothing. Counterexamples are judged as opts says (its
// time, --dev-allow-loopback).
func ruleFindings(m *meter, cur, prop []ref, current, proposed *policy.Policy, opts Options) []Finding {
	var out []Finding
	for _, p := range prop {
		if !p.changed {
			continue
		}
		m.charge(stageRules, 1+8*len(p.ep.AllowedIPs))
		label := policy.EndpointLabel(p.ep)
		// cloud_metadata: a metadata host or address in any spelling.
		if p.ep.Host != "" && policy.IsMetadataHost(p.ep.Host) {
			out = append(out, Finding{Kind: CloudMetadata, Entry: p.key, Endpoint: label, Rule: "host",
				Detail: fmt.Sprintf("host %q is a cloud metadata address", p.ep.Host)})
		}
		for i, s := range p.ep.AllowedIPs {
			prefix, ok := policy.ParseAllowedIP(s)
			if !ok {
				continue
			}
			for _, m := range metadataAddrs {
				a := netip.MustParseAddr(m)
				if prefix.Contains(a) || allowedIPsContains([]string{s}, a) {
					out = append(out, Finding{Kind: CloudMetadata, Entry: p.key, Endpoint: label, Rule: fmt.Sprintf("allowed_ips[%d]", i),
						Detail: fmt.Sprintf("allowed_ips %s contains the metadata address %s", s, m)})
					break
				}
			}
		}
		// enforcement_weakened: audit where the same destination enforced.
		// Audit in an entry where the same destination was enforced (and
		// not also audited).
		if p.ep.Enforcement == policy.EnforcementAudit {
			m.charge(stageRules, len(cur))
			enforced, audited := false, false
			for _, c := range cur {
				if c.key == p.key && labelKey(c.ep) == labelKey(p.ep) {
					enforced = enforced || c.ep.Enforcement != policy.EnforcementAudit
					audited = audited || c.ep.Enforcement == policy.EnforcementAudit
				}
			}
			if enforced && !audited {
				out = append(out, Finding{Kind: EnforcementWeakened, Entry: p.key, Endpoint: label, Rule: "enforcement",
					Detail: fmt.Sprintf("enforcement of %s in network_policies.%s goes from enforce to audit", label, p.key)})
			}
		}
		// arguments_widened: a tools/call allow rule for a tool the current
		// policy allows on this endpoint with an arguments_schema, whose
		// schema is not identical to one of the current ones. Conservative:
		// a changed schema counts as widened even when it only adds
		// constraints (deciding JSON Schema inclusion is not attempted).
		if p.ep.Protocol != policy.ProtocolMCP {
			continue
		}
		if f, ok := oauthOpened(m, cur, p); ok {
			out = append(out, f)
		}
		for i, rl := range p.ep.Rules {
			a := rl.Allow
			if a == nil {
				continue
			}
			if !callsTools(a) {
				continue
			}
			tools := toolSet(a)
			var curSchemas []map[string]any
			named := false
			m.charge(stageRules, len(cur))
			for _, c := range cur {
				if c.ep.Protocol != policy.ProtocolMCP || labelKey(c.ep) != labelKey(p.ep) {
					continue
				}
				for _, cr := range c.ep.Rules {
					if cr.Allow != nil {
						m.charge(stageRules, 1+len(cr.Allow.ToolGlobs())*len(a.ToolGlobs()))
					}
					if cr.Allow == nil || !callsTools(cr.Allow) || !toolsOverlap(cr.Allow, a) {
						continue
					}
					named = true
					curSchemas = append(curSchemas, cr.Allow.ArgumentsSchema)
				}
			}
			if f, ok := rateLimitWidened(m, cur, p, i); ok {
				out = append(out, f)
			}
			if f, ok := definitionChanged(m, cur, p, i); ok {
				out = append(out, f)
			}
			if !named {
				continue
			}
			same := false
			hadSchema := false
			for _, s := range curSchemas {
				hadSchema = hadSchema || s != nil
				if reflect.DeepEqual(normJSON(s), normJSON(a.ArgumentsSchema)) {
					same = true
				}
			}
			if same || !hadSchema {
				continue
			}
			what := "changed"
			if a.ArgumentsSchema == nil {
				what = "removed"
			}
			f := Finding{Kind: ArgumentsWidened, Entry: p.key, Endpoint: label, Rule: fmt.Sprintf("rules[%d]", i),
				Detail: fmt.Sprintf("arguments_schema of tools/call %s %s (any change other than an identical schema is reported)", tools, what)}
			if a.ArgumentsSchema != nil {
				f.Detail = fmt.Sprintf("tools/call %s gains rules[%d] with arguments_schema %s (any schema other than an identical one is reported)", tools, i, schemaBrief(a.ArgumentsSchema))
				if r := argumentsWitness(m, current, proposed, p, a, opts); r != nil {
					f.Counterexample = r
					f.Detail += "; it admits arguments the current policy refuses"
				}
			}
			out = append(out, f)
		}
	}
	return out
}

const stageRules = "rule-level findings"

// rateLimitWidened reports rules[i] of the proposed endpoint p when it may
// let a tool's calls through faster than the current policy does: a
// current tools/call rule on the same destination, naming an overlapping
// tool, has a rate_limit, and rules[i] has none, or one larger than each
// such limit (more requests a minute or a larger burst). When rules[i] is
// itself a current rule, unchanged, only the current limits the proposal
// drops or changes count, so an untouched rule beside an untouched limit
// is not reported. A limit added or lowered never is. Conservative, as
// arguments_widened is: which of two overlapping rules a call meets first
// is not worked out.
func rateLimitWidened(m *meter, cur []ref, p ref, i int) (Finding, bool) {
	a := p.ep.Rules[i].Allow
	kept := func(r *policy.L7Rule) bool { // r is a rule of the proposed endpoint too
		for _, pr := range p.ep.Rules {
			if pr.Allow != nil && l7RuleEqual(pr.Allow, r) {
				return true
			}
		}
		return false
	}
	curRules, unchanged := currentToolRules(m, cur, p, a)
	changed := !unchanged
	var limits []*policy.RateLimit
	for _, c := range curRules {
		m.charge(stageRules, 1+len(p.ep.Rules))
		if c.RateLimit != nil && toolsOverlap(c, a) && (changed || !kept(c)) {
			limits = append(limits, c.RateLimit)
		}
	}
	if len(limits) == 0 {
		return Finding{}, false
	}
	for _, l := range limits {
		if a.RateLimit != nil && a.RateLimit.RequestsPerMinute <= l.RequestsPerMinute && a.RateLimit.Burst <= l.Burst {
			return Finding{}, false
		}
	}
	now := "no rate_limit"
	if a.RateLimit != nil {
		now = fmt.Sprintf("rate_limit %d/min, burst %d", a.RateLimit.RequestsPerMinute, a.RateLimit.Burst)
	}
	was := make([]string, len(limits))
	for k, l := range limits {
		was[k] = fmt.Sprintf("%d/min, burst %d", l.RequestsPerMinute, l.Burst)
	}
	return Finding{Kind: RateLimitWidened, Entry: p.key, Endpoint: policy.EndpointLabel(p.ep), Rule: fmt.Sprintf("rules[%d]", i),
		Detail: fmt.Sprintf("tools/call %s gets %s where the current policy limits it to %s", toolSet(a), now, strings.Join(was, " or "))}, true
}

// definitionChanged reports rules[i] of the proposed endpoint p when it
// lets a tool be called under another definition than the current policy
// pins: a current tools/call rule on the same destination, naming an
// overlapping tool, pins a definition, and rules[i] pins another one or
// none (a re-pin, or a pin dropped). Pinning a tool that was not pinned,
// or an unchanged rule, is not reported.
func definitionChanged(m *meter, cur []ref, p ref, i int) (Finding, bool) {
	a := p.ep.Rules[i].Allow
	curRules, unchanged := currentToolRules(m, cur, p, a)
	if unchanged {
		return Finding{}, false
	}
	var pins []string
	for _, c := range curRules {
		m.charge(stageRules, 1)
		if c.Definition != "" && c.Definition != a.Definition && toolsOverlap(c, a) && !slices.Contains(pins, c.Definition) {
			pins = append(pins, c.Definition)
		}
	}
	if len(pins) == 0 {
		return Finding{}, false
	}
	now := "no pinned definition"
	if a.Definition != "" {
		now = "definition " + a.Definition
	}
	return Finding{Kind: ToolDefinitionChanged, Entry: p.key, Endpoint: policy.EndpointLabel(p.ep), Rule: fmt.Sprintf("rules[%d]", i),
		Detail: fmt.Sprintf("tools/call %s gets %s where the current policy pins %s", toolSet(a), now, strings.Join(pins, " or "))}, true
}

// oauthOpened reports the proposed MCP endpoint p when it declares OAuth
// paths (mcp.oauth) that no current endpoint on its destination declares:
// those requests pass as plain HTTP, uninspected, so the change is
// reported as a whole rather than path by path.
func oauthOpened(m *meter, cur []ref, p ref) (Finding, bool) {
	o := p.ep.MCP
	if o == nil || o.OAuth == nil {
		return Finding{}, false
	}
	had := policy.MCPOAuth{}
	m.charge(stageRules, len(cur))
	for _, c := range cur {
		if c.ep.Protocol == policy.ProtocolMCP && labelKey(c.ep) == labelKey(p.ep) && c.ep.MCP != nil && c.ep.MCP.OAuth != nil {
			had.ResourceMetadata = had.ResourceMetadata || c.ep.MCP.OAuth.ResourceMetadata
			had.AuthorizationServer = had.AuthorizationServer || c.ep.MCP.OAuth.AuthorizationServer
			had.ResourceMetadataPaths = append(had.ResourceMetadataPaths, c.ep.MCP.OAuth.ResourceMetadataPaths...)
			had.IssuerPaths = append(had.IssuerPaths, c.ep.MCP.OAuth.IssuerPaths...)
		}
	}
	var opened []string
	if o.OAuth.ResourceMetadata && !had.ResourceMetadata {
		opened = append(opened, "resource_metadata (GET /.well-known/oauth-protected-resource…)")
	}
	if o.OAuth.AuthorizationServer && !had.AuthorizationServer {
		opened = append(opened, "authorization_server (GET /.well-known/oauth-authorization-server…, /.well-known/openid-configuration…, /authorize; POST /token, /register)")
	}
	for _, path := range o.OAuth.ResourceMetadataPaths {
		if !slices.Contains(had.ResourceMetadataPaths, path) {
			opened = append(opened, "resource_metadata_paths (GET "+path+")")
		}
	}
	for _, path := range o.OAuth.IssuerPaths {
		if !slices.Contains(had.IssuerPaths, path) {
			opened = append(opened, "issuer_paths (under "+path+": GET /.well-known/…, /authorize; POST /token, /register)")
		}
	}
	if len(opened) == 0 {
		return Finding{}, false
	}
	label := policy.EndpointLabel(p.ep)
	return Finding{Kind: MCPOAuthOpened, Entry: p.key, Endpoint: label, Rule: "mcp.oauth",
		Detail: fmt.Sprintf("%s serves, as plain HTTP the proxy does not inspect: %s", label, strings.Join(opened, "; "))}, true
}

// currentToolRules returns the current policy's allow rules that may
// match tools/call on the proposed endpoint p's destination, and whether a
// (a rule of p) is one of them, unchanged.
func currentToolRules(m *meter, cur []ref, p ref, a *policy.L7Rule) (rules []*policy.L7Rule, unchanged bool) {
	m.charge(stageRules, len(cur))
	for _, c := range cur {
		if c.ep.Protocol != policy.ProtocolMCP || labelKey(c.ep) != labelKey(p.ep) {
			continue
		}
		for _, cr := range c.ep.Rules {
			if cr.Allow == nil || !callsTools(cr.Allow) {
				continue
			}
			rules = append(rules, cr.Allow)
			unchanged = unchanged || l7RuleEqual(cr.Allow, a)
		}
	}
	return rules, unchanged
}

// callsTools reports whether an allow rule may match tools/call.
func callsTools(r *policy.L7Rule) bool {
	return r.Method == "" || policy.MatchGlob(r.Method, "tools/call")
}

// toolsOverlap reports, conservatively, whether two rules may name a
// common tool: a rule without a tool matcher names every tool.
func toolsOverlap(a, b *policy.L7Rule) bool {
	ta, tb := a.ToolGlobs(), b.ToolGlobs()
	if len(ta) == 0 || len(tb) == 0 {
		return true
	}
	for _, x := range ta {
		for _, y := range tb {
			if x == y || policy.MatchGlob(x, y) || policy.MatchGlob(y, x) || policy.HasWildcard(x) && policy.HasWildcard(y) {
				return true
			}
		}
	}
	return false
}

// labelKey identifies a destination across spellings: host (normalised),
// sorted ports, path scope.
func labelKey(ep *policy.Endpoint) string {
	ports := slices.Clone(policy.EndpointPorts(ep))
	slices.Sort(ports)
	return fmt.Sprint(policy.NormalizeHost(ep.Host), ports, ep.Path)
}

func toolSet(r *policy.L7Rule) string {
	var ts []string
	for _, m := range []*policy.Matcher{r.Tool, r.Params["name"]} {
		if m != nil {
			ts = append(ts, m.Any...)
		}
	}
	sort.Strings(ts)
	return strings.Join(ts, ",")
}

func normJSON(m map[string]any) any {
	if m == nil {
		return nil
	}
	raw, _ := json.Marshal(m)
	var v any
	_ = json.Unmarshal(raw, &v)
	return v
}

// maxSchemaBrief bounds how much of a schema a finding's detail quotes.
const maxSchemaBrief = 200

// schemaBrief is a schema as compact JSON, cut to maxSchemaBrief bytes.
func schemaBrief(schema map[string]any) string {
	raw, err := json.Marshal(schema)
	if err != nil {
		return "(unprintable)"
	}
	if len(raw) > maxSchemaBrief {
		cut := maxSchemaBrief
		for cut > 0 && !utf8.RuneStart(raw[cut]) {
			cut--
		}
		return string(raw[:cut]) + "…"
	}
	return string(raw)
}

// argumentsWitness is a tools/call of the rule's tool, on the proposed
// endpoint, with arguments its schema accepts (built from the schema: for
// a const schema, exactly those), when the proposed policy allows it and
// the current one denies it; nil when no such request is found (a
// binary, host or path glob gives no exact request to try; the schema
// may be beyond schemaInstance). Both verdicts are policy.Decide's.
func argumentsWitness(m *meter, current, proposed *policy.Policy, p ref, a *policy.L7Rule, opts Options) *policy.Request {
	r := toolCallAt(p, a, opts)
	if r == nil || current == nil || proposed == nil {
		return nil
	}
	m.charge(stageRules, 2*(1+len(current.NetworkPolicies)+len(proposed.NetworkPolicies)))
	if !policy.Decide(proposed, *r).Allow || policy.Decide(current, *r).Allow {
		return nil
	}
	return r
}

// toolCallAt is a tools/call of rule a's one tool on the endpoint p, from
// its entry's binary, with arguments built from a's schema (for a const
// schema, exactly those); nil when the rule names no single exact tool or
// a binary, host or path glob gives no exact request to try.
func toolCallAt(p ref, a *policy.L7Rule, opts Options) *policy.Request {
	tools := a.ToolGlobs()
	ports := policy.EndpointPorts(p.ep)
	if len(tools) != 1 || policy.HasWildcard(tools[0]) || len(ports) == 0 || strings.Contains(p.ep.Host, "*") {
		return nil
	}
	binary := ""
	if len(p.entry.Binaries) > 0 {
		binary = p.entry.Binaries[0].Path
		if policy.HasWildcard(binary) {
			return nil
		}
	}
	path := "/"
	if p.ep.Path != "" {
		if strings.ContainsAny(p.ep.Path, "*?[\\") {
			return nil
		}
		path = p.ep.Path
	}
	r := policy.Request{Binary: binary, Host: p.ep.Host, Port: ports[0], HTTPMethod: "POST", Path: path, Time: opts.Now, DevAllowLoopback: opts.DevAllowLoopback,
		MCP: &policy.MCPMessage{Method: "tools/call", Tool: tools[0], Arguments: marshalArgs(schemaInstance(normJSON(a.ArgumentsSchema), 0))}}
	return &r
}
