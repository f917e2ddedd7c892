package policy

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"net/netip"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// This file is the reference evaluator: the definition of what a policy
// allows. It is written to be read, not to be fast. Each semantic rule
// lives in one function whose comment states it; Decide only composes them.
//
// The order of evaluation:
//
//  1. Hard denials, whatever the policy says and even in audit mode:
//     malformed requests, always-denied addresses and ports
//     (destinationDenied).
//  2. Deny rules win everywhere: every deny rule of every endpoint whose
//     destination (host, port, path scope) matches is checked, in every
//     entry and for every binary (denyPhase). A deny rule that cannot be
//     checked (no L7 view of the request, a protocol not inspected yet, an
//     invalid tool name) denies hard.
//  3. Allow: the candidates are the endpoints of the entries whose binaries
//     match and whose destination matches; each is judged by its address
//     rules and then its protocol (judgeCandidate).
//  4. Default deny. `enforcement: audit` on the deciding endpoint turns a
//     rule denial into Allow with Audit set (combine).

// Request is one request as the proxy sees it. Decide judges complete
// requests: for L7 endpoints the HTTP fields must be set.
type Request struct {
	Binary string     // absolute path of the calling executable; "" when it cannot be determined
	Host   string     // destination as requested (DNS name or IP literal)
	Addr   netip.Addr // the resolved IP the proxy will dial; zero when unknown (then only an IP-literal Host is checked)
	Port   int
	// Ancestors are the executables of the caller's parent, grandparent and
	// so on, parent first (OpenShell's exec.ancestors). A rule's binary
	// matches when it matches Binary or any ancestor: a git rule lets the
	// python3 that git runs through. Ignored when Binary is "": an unknown
	// caller matches no rule that names binaries.
	Ancestors []string
	// L7 — set when the proxy sees the HTTP request (REST, MCP)
	HTTPMethod string
	Path       string      // as received (Decide canonicalizes with the endpoint's allow_encoded_slash)
	Query      string      // raw query string
	MCP        *MCPMessage // the JSON-RPC message, for protocol mcp POSTs (nil for GET/DELETE)

	Time             time.Time // for expires_at; zero means time.Now()
	DevAllowLoopback bool
}

// MCPMessage is one client→server JSON-RPC message on an MCP endpoint.
type MCPMessage struct {
	Method          string          // JSON-RPC method ("" for a client→server response)
	Tool            string          // params.name for tools/call
	Prompt          string          // params.name for prompts/get
	Resource        string          // params.uri for resources/read, resources/subscribe, resources/unsubscribe
	Arguments       json.RawMessage // params.arguments
	ProtocolVersion string          // the version the proxy established ("" if none given)
	Response        bool            // a client→server JSON-RPC response (answer to elicitation/sampling): passes once the endpoint matches
	// AnyArguments judges a tools/call as if its arguments satisfied every
	// arguments_schema: would the tool be allowed for some arguments? (The
	// proxy lists the tools the agent may call.)
	AnyArguments bool
	// ToolDefinition is the fingerprint of the tool's definition as the
	// proxy verified it ("" when none is verified): a rule that pins a
	// definition allows the call only when it is that one.
	ToolDefinition string
	// AnyDefinition judges a tools/call as if the tool's definition were
	// the one every rule pins (the prover's probes, which judge pins
	// apart).
	AnyDefinition bool
	// ArgumentsRead says Arguments came from a strict JSON reader (the
	// proxy's MCP parser), so MalformedMCP need not check them again.
	ArgumentsRead bool
}

// Decision is the verdict on one request.
type Decision struct {
	Allow    bool
	Audit    bool   // denied by rules but let through because the matching endpoint has enforcement: audit
	Entry    string // network_policies key that allowed or whose rule denied ("" if none)
	Endpoint int    // index in that entry's endpoints, -1 if none
	Rule     string // e.g. "rules[2]", "deny_rules[0]", "access: read-only", "allow_all_known_mcp_methods"
	// Reason is human-readable. A denial names the method, path or tool and
	// the rule; an allow names only the rule (the request is in the
	// decision record), so the proxy's matcher can answer allows without
	// building a string.
	Reason         string
	VersionRefused bool // denied only because the MCP protocol version is not listed (not offered to the advisor)
	// DefinitionRefused: denied naming a rule that pins the tool's
	// definition, which differs from the verified one or was not verified
	// (tool_definition_changed).
	DefinitionRefused bool
}

// Decide returns the decision of policy p on request r. A nil policy denies
// everything.
func Decide(p *Policy, r Request) Decision {
	if r.Time.IsZero() {
		r.Time = time.Now()
	}
	if d, denied := destinationDenied(r); denied {
		return d
	}
	eps := endpointsOf(p)
	denials := denyPhase(eps, r)
	var outs []outcome
	for _, ep := range eps {
		if destinationMatches(ep, r) && binaryMatches(ep.entry, r) {
			outs = append(outs, judgeCandidate(ep, r))
		}
	}
	return combine(denials, outs, eps, r)
}

// ---------------------------------------------------------------------------
// 1. Hard denials.

// destinationDenied applies the rules no policy can override: the request
// must name a destination and a valid port; loopback (unless the proxy runs
// with --dev-allow-loopback), link-local, unspecified, multicast, broadcast
// and cloud-metadata addresses are denied — checked on the resolved Addr,
// on an IP-literal Host, and on metadata and localhost names; control-plane
// ports are denied. An IP-literal Host must equal the address dialled.
func destinationDenied(r Request) (Decision, bool) {
	deny := func(reason string) (Decision, bool) {
		return Decision{Endpoint: -1, Reason: reason}, true
	}
	if strings.TrimSpace(r.Host) == "" && !r.Addr.IsValid() {
		return deny("request names no destination")
	}
	if r.Port < 1 || r.Port > 65535 {
		return deny(fmt.Sprintf("port %d is not a valid port", r.Port))
	}
	if DeniedPort(r.Port) {
		return deny(fmt.Sprintf("port %d is a cluster control-plane port and always denied", r.Port))
	}
	if IsMetadataHost(r.Host) {
		return deny(fmt.Sprintf("host %q is a cloud metadata service and always denied", r.Host))
	}
	if IsLoopbackName(r.Host) && !r.DevAllowLoopback {
		return deny(fmt.Sprintf("host %q is loopback and always denied", r.Host))
	}
	literal, isLiteral := ParseHostIP(r.Host)
	if isLiteral {
		if why, denied := AlwaysDenied(literal, r.DevAllowLoopback); denied {
			return deny(fmt.Sprintf("host %q is always denied: %s", r.Host, why))
		}
	}
	if r.Addr.IsValid() {
		if why, denied := AlwaysDenied(r.Addr, r.DevAllowLoopback); denied {
			return deny(fmt.Sprintf("%s resolves to an always-denied destination: %s", r.Host, why))
		}
		if isLiteral && literal != r.Addr.Unmap().WithZone("") {
			return deny(fmt.Sprintf("host %q is the IP address %s but the proxy would dial %s", r.Host, literal, r.Addr))
		}
	}
	return Decision{}, false
}

// ---------------------------------------------------------------------------
// Endpoints and destinations.

// endpointRef is one endpoint with the entry it belongs to.
type endpointRef struct {
	key   string // network_policies key
	entry *NetworkPolicy
	index int
	ep    *Endpoint
}

// EachEndpoint calls f for every endpoint of p (nil for none) with the
// key of its entry and its index there, skipping nil entries and
// endpoints, in no particular order: callers that show an order sort what
// they keep. Decide and the prover both walk a policy with it, so they
// cannot disagree on which endpoints it has.
func EachEndpoint(p *Policy, f func(key string, entry *NetworkPolicy, index int, ep *Endpoint)) {
	if p == nil {
		return
	}
	for k, entry := range p.NetworkPolicies {
		if entry == nil {
			continue
		}
		for i, ep := range entry.Endpoints {
			if ep != nil {
				f(k, entry, i, ep)
			}
		}
	}
}

// endpointsOf lists every endpoint of p, entries in key order and
// endpoints in document order, so decisions are deterministic.
func endpointsOf(p *Policy) []endpointRef {
	var out []endpointRef
	EachEndpoint(p, func(key string, entry *NetworkPolicy, i int, ep *Endpoint) {
		out = append(out, endpointRef{key: key, entry: entry, index: i, ep: ep})
	})
	slices.SortFunc(out, func(a, b endpointRef) int {
		return cmp.Or(strings.Compare(a.key, b.key), cmp.Compare(a.index, b.index))
	})
	return out
}

// name describes an endpoint in reasons: "network_policies.orders
// (orders.example.com:443/mcp)".
func (e endpointRef) name() string {
	return fmt.Sprintf("network_policies.%s (%s)", e.key, EndpointLabel(e.ep))
}

// EndpointLabel is host:ports plus the path scope; "*" for a hostless
// endpoint.
func EndpointLabel(ep *Endpoint) string {
	host := ep.Host
	if host == "" {
		host = "*"
	}
	ports := make([]string, 0, len(EndpointPorts(ep)))
	for _, p := range EndpointPorts(ep) {
		ports = append(ports, strconv.Itoa(p))
	}
	return host + ":" + strings.Join(ports, ",") + ep.Path
}

// EndpointPorts returns the ports an endpoint covers: `ports` when given,
// else `port` (OpenShell: ports wins).
func EndpointPorts(ep *Endpoint) []int {
	if len(ep.Ports) > 0 {
		return ep.Ports
	}
	if ep.Port != 0 {
		return []int{ep.Port}
	}
	return nil
}

// destinationAddr is the address the destination checks see: the resolved
// Addr, else an IP-literal Host; ok is false when neither is known.
func destinationAddr(r Request) (netip.Addr, bool) {
	if r.Addr.IsValid() {
		return r.Addr.Unmap().WithZone(""), true
	}
	return ParseHostIP(r.Host)
}

// destinationMatches reports whether r is addressed to ep: its host
// (MatchHost; a hostless endpoint matches any host whose address its
// allowed_ips cover), one of its ports, and its path scope. A path scope
// is matched on the canonical path; a request without a path (no L7 view)
// does not match a path-scoped endpoint here — the deny phase treats that
// case as unknown and fails closed.
func destinationMatches(e endpointRef, r Request) bool {
	if !hostMatches(e.ep, r) || !slices.Contains(EndpointPorts(e.ep), r.Port) {
		return false
	}
	if e.ep.Path == "" {
		return true
	}
	if r.HTTPMethod == "" {
		return false
	}
	path, err := CanonicalPath(r.Path, e.ep.AllowEncodedSlash)
	if err != nil {
		return false
	}
	if e.ep.Protocol == ProtocolMCP && r.MCP == nil {
		if _, ok := e.ep.MCP.OAuthPath(strings.ToUpper(r.HTTPMethod), path); ok {
			return true // the endpoint's OAuth paths lie beside its MCP path
		}
	}
	return MatchGlob(e.ep.Path, path)
}

func hostMatches(ep *Endpoint, r Request) bool {
	if ep.Host == "" {
		addr, ok := destinationAddr(r)
		return ok && len(ep.AllowedIPs) > 0 && addrInAllowedIPs(ep.AllowedIPs, addr)
	}
	return MatchHost(ep.Host, r.Host)
}

// addrInAllowedIPs reports whether an allowed_ips list (CIDRs or single
// addresses; invalid entries cover nothing) contains addr or the IPv4
// address a NAT64 or IPv4-compatible addr reaches (EmbeddedIPv4: the
// translations only — 6to4, Teredo and SIIT forms are judged as their IPv4
// address when denying, never when allowing).
func addrInAllowedIPs(list []string, addr netip.Addr) bool {
	for _, s := range list {
		prefix, ok := ParseAllowedIP(s)
		if !ok {
			continue
		}
		if prefix.Contains(addr) {
			return true
		}
		if v4, ok := EmbeddedIPv4(addr); ok && prefix.Contains(v4) {
			return true
		}
	}
	return false
}

// binaryMatches reports whether the caller may use entry: an empty
// binaries list means any binary (even an unknown one); otherwise the
// binary must be known, a clean absolute path, and it or one of its
// ancestors must match one of the path globs (OpenShell's binary_allowed:
// the same exact-or-glob match for the executable and each ancestor). A
// path with dot segments or doubled slashes is taken as unknown:
// `/opt/tools/../../tmp/x` must not pass as a match of `/opt/tools/**`.
func binaryMatches(entry *NetworkPolicy, r Request) bool {
	if len(entry.Binaries) == 0 {
		return true
	}
	if !cleanAbsolute(r.Binary) {
		return false
	}
	for _, b := range entry.Binaries {
		if MatchGlob(b.Path, r.Binary) {
			return true
		}
		for _, a := range r.Ancestors {
			if cleanAbsolute(a) && MatchGlob(b.Path, a) {
				return true
			}
		}
	}
	return false
}

func cleanAbsolute(p string) bool {
	return strings.HasPrefix(p, "/") && path.Clean(p) == p
}

// ---------------------------------------------------------------------------
// 2. Deny rules win everywhere.

// denial is a deny rule that matched (or could not be checked).
type denial struct {
	ep     endpointRef
	rule   string
	reason string
	hard   bool // cannot be audited away
}

// denyPhase checks the deny rules of every endpoint whose destination
// (host, port, path scope) matches r, whatever its entry and binaries.
// When an endpoint has deny rules and r's path scope, protocol or message
// cannot be judged against them, that is a hard denial: a deny rule must
// never be skipped for lack of information.
//
// An endpoint whose protocol is not inspected yet denies everything sent
// to its destination, like a deny rule that matches every request: were it
// merely a candidate that allows nothing, a REST `/**` endpoint on the
// same host:port would let through what a `/graphql` endpoint guards.
func denyPhase(eps []endpointRef, r Request) []denial {
	var out []denial
	for _, e := range eps {
		if len(e.ep.DenyRules) == 0 && Inspected(e.ep.Protocol) ||
			!hostMatches(e.ep, r) || !slices.Contains(EndpointPorts(e.ep), r.Port) {
			continue
		}
		if !Inspected(e.ep.Protocol) && e.ep.Path == "" {
			out = append(out, uninspectedDenial(e))
			continue
		}
		if r.HTTPMethod == "" {
			// Without the path, the path scope cannot be checked either.
			d := denial{ep: e, rule: "deny_rules", hard: true,
				reason: fmt.Sprintf("%s has deny rules, which cannot be checked without L7 inspection of the request", e.name())}
			if !Inspected(e.ep.Protocol) {
				d = uninspectedDenial(e)
			}
			out = append(out, d)
			continue
		}
		path, err := CanonicalPath(r.Path, e.ep.AllowEncodedSlash)
		if err != nil {
			out = append(out, denial{ep: e, rule: "deny_rules", hard: true,
				reason: fmt.Sprintf("malformed request path for %s: %v", e.name(), err)})
			continue
		}
		if e.ep.Path != "" && !MatchDenyPath(e.ep.Path, path) {
			continue
		}
		out = append(out, endpointDenials(e, r, path)...)
	}
	return out
}

// endpointDenials checks one endpoint's deny rules against r.
func endpointDenials(e endpointRef, r Request, path string) []denial {
	switch e.ep.Protocol {
	case ProtocolREST:
		for i, rule := range e.ep.DenyRules {
			if rule != nil && restRuleMatches(rule, r, path, false) {
				return []denial{{ep: e, rule: fmt.Sprintf("deny_rules[%d]", i),
					reason: fmt.Sprintf("%s %s is denied by deny_rules[%d] of %s", strings.ToUpper(r.HTTPMethod), path, i, e.name())}}
			}
		}
		return nil
	case ProtocolMCP:
		return mcpDenials(e, r)
	default:
		return []denial{uninspectedDenial(e)}
	}
}

// Inspected reports whether Decide (and so the proxy) judges requests of
// this protocol: plain L4, REST and MCP. The others deny everything until
// the proxy supports them — a divergence from OpenShell, toward safety.
func Inspected(protocol string) bool {
	switch protocol {
	case ProtocolL4, ProtocolREST, ProtocolMCP:
		return true
	}
	return false
}

// uninspectedDenial is the hard denial of a request to an endpoint whose
// protocol is not inspected yet (or an L4 endpoint carrying deny rules,
// which no request can be checked against).
func uninspectedDenial(e endpointRef) denial {
	return denial{ep: e, rule: "protocol", hard: true,
		reason: fmt.Sprintf("protocol %s is not inspected yet, so %s denies every request", e.ep.Protocol, e.name())}
}

// mcpDenials checks an MCP endpoint's deny rules. They judge JSON-RPC
// messages: GET and DELETE without a message, and client→server responses,
// carry none. Any other request without a parsed message, or a tools/call
// whose name breaks the endpoint's strict names, cannot be checked.
func mcpDenials(e endpointRef, r Request) []denial {
	method := strings.ToUpper(r.HTTPMethod)
	if r.MCP == nil && (method == "GET" || method == "DELETE") {
		return nil
	}
	if r.MCP != nil && r.MCP.Response {
		return nil
	}
	if r.MCP == nil {
		return []denial{{ep: e, rule: "deny_rules", hard: true,
			reason: fmt.Sprintf("%s %s carries no MCP message, so the deny rules of %s cannot be checked", method, r.Path, e.name())}}
	}
	if why, bad := MalformedMCP(r.MCP, strictNames(e.ep)); bad {
		return []denial{{ep: e, rule: "deny_rules", hard: true, reason: why + " (" + e.name() + ")"}}
	}
	for i, rule := range e.ep.DenyRules {
		if rule != nil && mcpRuleMatches(e.ep, rule, r.MCP, true) {
			return []denial{{ep: e, rule: fmt.Sprintf("deny_rules[%d]", i),
				reason: fmt.Sprintf("%s is denied by deny_rules[%d] of %s", describeMCP(r.MCP), i, e.name())}}
		}
	}
	return nil
}

// ---------------------------------------------------------------------------
// 3. Candidates: an entry whose binary and destination match.

// outcome is one candidate endpoint's verdict.
type outcome struct {
	ep             endpointRef
	allow          bool
	rule           string
	reason         string
	hard           bool // a denial audit mode cannot lift
	versionRefused bool // denied only because the MCP version is not listed
	// definitionRefused: the rule named is one whose pinned definition the
	// tool's does not match.
	definitionRefused bool
}

// judgeCandidate judges r on one endpoint it is addressed to: first the
// address rules (addressAllowed), then the endpoint's protocol.
func judgeCandidate(e endpointRef, r Request) outcome {
	if why, ok := addressAllowed(e.ep, r); !ok {
		return outcome{ep: e, hard: true, reason: why}
	}
	switch e.ep.Protocol {
	case ProtocolL4:
		return outcome{ep: e, allow: true, rule: "endpoint",
			reason: fmt.Sprintf("allowed by %s (no L7 inspection)", e.name())}
	case ProtocolREST:
		return judgeREST(e, r)
	case ProtocolMCP:
		return judgeMCP(e, r)
	default:
		// Divergence from OpenShell, toward safety: protocols the proxy
		// does not inspect yet deny everything, even in audit mode.
		return outcome{ep: e, hard: true,
			reason: fmt.Sprintf("protocol %s is not inspected yet, so %s denies every request", e.ep.Protocol, e.name())}
	}
}

// addressAllowed applies allowed_ips. When the endpoint lists allowed_ips,
// the destination address must be inside them. Otherwise a private,
// shared or special-purpose address (IsPrivate) is refused — even for an
// exact hostname (a divergence from OpenShell, which trusts exact names).
// When no address is known (a DNS name not yet resolved), there is nothing
// to check here; the proxy checks the address it dials.
func addressAllowed(ep *Endpoint, r Request) (string, bool) {
	addr, ok := destinationAddr(r)
	if !ok {
		return "", true
	}
	if len(ep.AllowedIPs) > 0 {
		if addrInAllowedIPs(ep.AllowedIPs, addr) {
			return "", true
		}
		return fmt.Sprintf("%s (%s) is outside the allowed_ips of %s", r.Host, addr, EndpointLabel(ep)), false
	}
	if IsPrivate(addr) {
		return fmt.Sprintf("%s resolves to the private address %s, which needs allowed_ips on %s", r.Host, addr, EndpointLabel(ep)), false
	}
	return "", true
}

// requireL7 is the outcome of an L7 endpoint given a request without L7
// information: it does not allow, and audit cannot change that.
func requireL7(e endpointRef) outcome {
	return outcome{ep: e, hard: true,
		reason: fmt.Sprintf("%s inspects %s requests, and this request was not inspected", e.name(), e.ep.Protocol)}
}

// ---- REST

// AccessMethods returns the HTTP methods an access preset allows
// (OpenShell): read-only is GET, HEAD, OPTIONS; read-write adds POST, PUT,
// PATCH. full (every method) and unknown presets return nil.
func AccessMethods(preset string) []string { return accessMethods[preset] }

var accessMethods = map[string][]string{
	AccessReadOnly:  {"GET", "HEAD", "OPTIONS"},
	AccessReadWrite: {"GET", "HEAD", "OPTIONS", "POST", "PUT", "PATCH"},
}

// judgeREST allows a request that the endpoint's access preset or one of
// its unexpired allow rules matches.
func judgeREST(e endpointRef, r Request) outcome {
	if r.HTTPMethod == "" {
		return requireL7(e)
	}
	path, err := CanonicalPath(r.Path, e.ep.AllowEncodedSlash)
	if err != nil {
		return outcome{ep: e, hard: true, reason: fmt.Sprintf("malformed request path: %v", err)}
	}
	method := strings.ToUpper(r.HTTPMethod)
	what := fmt.Sprintf("%s %s", method, path)
	switch e.ep.Access {
	case AccessFull:
		return outcome{ep: e, allow: true, rule: "access: full", reason: fmt.Sprintf("allowed by access: full on %s", e.name())}
	case AccessReadOnly, AccessReadWrite:
		if slices.Contains(accessMethods[e.ep.Access], method) {
			return outcome{ep: e, allow: true, rule: "access: " + e.ep.Access,
				reason: fmt.Sprintf("allowed by access: %s on %s", e.ep.Access, e.name())}
		}
	}
	for i, rule := range e.ep.Rules {
		if rule.Allow == nil || expired(rule.Allow, r.Time) {
			continue
		}
		if restRuleMatches(rule.Allow, r, path, true) {
			return outcome{ep: e, allow: true, rule: fmt.Sprintf("rules[%d]", i),
				reason: fmt.Sprintf("allowed by rules[%d] of %s", i, e.name())}
		}
	}
	return outcome{ep: e, reason: fmt.Sprintf("%s is not allowed by %s: no rule matches", what, e.name())}
}

// restRuleMatches reports whether a REST rule matches: method (`*` or
// absent = any method; compared case-insensitively), path glob (absent =
// any path) on the canonical path — MatchGlob for an allow rule,
// MatchDenyPath for a deny rule — and every query matcher.
func restRuleMatches(rule *L7Rule, r Request, path string, allow bool) bool {
	if !methodMatches(rule.Method, r.HTTPMethod) {
		return false
	}
	if rule.Path != "" && (allow && !MatchGlob(rule.Path, path) || !allow && !MatchDenyPath(rule.Path, path)) {
		return false
	}
	return queryMatches(rule.Query, r.Query, allow)
}

// methodMatches compares a REST rule's method (`*` or absent = any) with
// the request's, case-insensitively. A rule on GET also matches HEAD, in
// allow and deny rules alike, as OpenShell's rule does (RFC 9110 §9.3.2:
// HEAD is GET without the body): servers answer HEAD with the GET handler,
// so what GET must not reach HEAD must not either, and what GET may read
// HEAD reveals no more of.
func methodMatches(ruleMethod, method string) bool {
	switch {
	case ruleMethod == "" || ruleMethod == "*" || strings.EqualFold(ruleMethod, method):
		return true
	case strings.EqualFold(ruleMethod, "GET") && strings.EqualFold(method, "HEAD"):
		return true
	}
	return false
}

// pathGlobMatches reads allow globs narrowly (MatchGlob) and deny globs
// widely (MatchDenyGlob): each reading is the safe one for its side. Used
// for MCP method names; paths use MatchDenyPath.
func pathGlobMatches(pattern, path string, allow bool) bool {
	if allow {
		return MatchGlob(pattern, path)
	}
	return MatchDenyGlob(pattern, path)
}

// queryMatches applies a rule's query matchers to the decoded query
// parameters. Every named parameter must be present. In an allow rule every
// value of the parameter must match one of the globs; in a deny rule one
// matching value is enough — each the narrower reading for its side. A
// query that does not decode matches no allow rule and every deny rule
// that has query matchers. In query values `*` (and `**`) also matches
// `/`. A matcher is a glob string, {glob: g} or {any: [globs]}.
func queryMatches(matchers map[string]*Matcher, raw string, allow bool) bool {
	if len(matchers) == 0 {
		return true
	}
	values, err := url.ParseQuery(raw)
	if err != nil {
		return !allow
	}
	for name, m := range matchers {
		vs := values[name]
		if len(vs) == 0 {
			return false
		}
		matched := 0
		for _, v := range vs {
			if m != nil && m.matchesValue(v, allow) {
				matched++
			}
		}
		if allow && matched != len(vs) || !allow && matched == 0 {
			return false
		}
	}
	return true
}

// matchesValue matches a query value against the matcher's globs, with `*`
// free to cross `/` (query values are not paths) and `{a,b}` read as
// alternatives, as OpenShell reads them. A glob that does not parse
// (ValidQueryGlob) fails closed: it matches no value in an allow
// rule and every value in a deny rule.
func (m *Matcher) matchesValue(v string, allow bool) bool {
	for _, g := range m.Any {
		match, ok := matchQueryGlob(g, v)
		if !ok && !allow || match {
			return true
		}
	}
	return false
}

// expired reports whether an allow rule's grant has ended: expires_at at
// or before now.
func expired(rule *L7Rule, now time.Time) bool {
	return rule.ExpiresAt != nil && !now.Before(*rule.ExpiresAt)
}

// ---- MCP

// IsKnownMCPMethod reports whether method is in the profile of
// allow_all_known_mcp_methods: the client→server requests and notifications
// of MCP 2025-11-25. Extension methods are not in it and need their own
// rules.
func IsKnownMCPMethod(method string) bool { return knownMCPMethods[method] }

// KnownMCPMethods lists the methods IsKnownMCPMethod accepts, sorted.
func KnownMCPMethods() []string { return sortedKeys(knownMCPMethods) }

var knownMCPMethods = setOf(
	"initialize", "ping",
	"tools/list", "tools/call",
	"resources/list", "resources/templates/list", "resources/read", "resources/subscribe", "resources/unsubscribe",
	"prompts/list", "prompts/get",
	"completion/complete", "logging/setLevel",
	"tasks/get", "tasks/result", "tasks/list", "tasks/cancel",
	"notifications/initialized", "notifications/cancelled", "notifications/progress",
	"notifications/roots/list_changed", "notifications/tasks/status",
)

func setOf(items ...string) map[string]bool {
	m := make(map[string]bool, len(items))
	for _, it := range items {
		m[it] = true
	}
	return m
}

// ValidToolName reports whether name matches the MCP-recommended tool-name
// pattern ^[A-Za-z0-9_.-]{1,128}$, which strict_tool_names enforces.
func ValidToolName(name string) bool {
	if len(name) < 1 || len(name) > 128 {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
			return false
		}
	}
	return true
}

func strictNames(ep *Endpoint) bool {
	return ep.MCP == nil || ep.MCP.StrictToolNames == nil || *ep.MCP.StrictToolNames
}

func allowAllKnown(ep *Endpoint) bool {
	return ep.MCP != nil && ep.MCP.AllowAllKnownMCPMethods
}

// versionListed reports whether the MCP protocol version is accepted:
// listed in mcp.versions (default [2025-11-25]). A message that names no
// version is taken to speak the default version 2025-11-25, so it passes
// only when that version is listed.
func versionListed(ep *Endpoint, version string) bool {
	if version == "" {
		version = DefaultMCPVersion
	}
	versions := []string{DefaultMCPVersion}
	if ep.MCP != nil && len(ep.MCP.Versions) > 0 {
		versions = ep.MCP.Versions
	}
	return slices.Contains(versions, version)
}

// judgeMCP judges a request on an MCP (Streamable HTTP) endpoint:
//   - GET (the SSE receive stream) and DELETE (session end) without a
//     message are allowed once the endpoint matches; other HTTP methods
//     are denied; a POST must carry a parsed message;
//   - a client→server JSON-RPC response passes;
//   - a malformed message is denied hard (MalformedMCP);
//   - otherwise the message must match an unexpired allow rule (or the
//     allow-all profile when the endpoint has no rules), and its protocol
//     version must be listed. An unlisted version denies hard; when the
//     rules would have allowed the message it is marked versionRefused.
func judgeMCP(e endpointRef, r Request) outcome {
	method := strings.ToUpper(r.HTTPMethod)
	if r.MCP == nil && method != "" {
		path, err := CanonicalPath(r.Path, e.ep.AllowEncodedSlash)
		if rule, ok := e.ep.MCP.OAuthPath(method, path); ok && err == nil {
			return outcome{ep: e, allow: true, rule: rule,
				reason: fmt.Sprintf("an OAuth path %s declares on %s", rule, e.name())}
		}
	}
	switch {
	case method == "":
		return requireL7(e)
	case (method == "GET" || method == "DELETE") && r.MCP == nil:
		return outcome{ep: e, allow: true, rule: "endpoint",
			reason: fmt.Sprintf("MCP %s is allowed once the endpoint matches (%s)", method, e.name())}
	case method != "POST":
		return outcome{ep: e, reason: fmt.Sprintf("HTTP %s is not allowed on MCP endpoint %s", method, e.name())}
	case r.MCP == nil:
		return outcome{ep: e, hard: true, reason: fmt.Sprintf("POST to MCP endpoint %s carries no MCP message", e.name())}
	case r.MCP.Response:
		return outcome{ep: e, allow: true, rule: "endpoint",
			reason: fmt.Sprintf("client JSON-RPC response passes on %s", e.name())}
	}
	if why, bad := MalformedMCP(r.MCP, strictNames(e.ep)); bad {
		return outcome{ep: e, hard: true, reason: why}
	}
	o := judgeMCPRules(e, r)
	if !versionListed(e.ep, r.MCP.ProtocolVersion) {
		o.reason = fmt.Sprintf("MCP protocol version %q is not listed in mcp.versions of %s", r.MCP.ProtocolVersion, e.name())
		o.versionRefused, o.allow, o.hard, o.rule = o.allow, false, true, "mcp.versions"
	}
	return o
}

// judgeMCPRules finds the allow rule (or profile) that allows the message.
func judgeMCPRules(e endpointRef, r Request) outcome {
	what := describeMCP(r.MCP)
	if len(e.ep.Rules) == 0 && allowAllKnown(e.ep) {
		if IsKnownMCPMethod(r.MCP.Method) {
			return outcome{ep: e, allow: true, rule: "allow_all_known_mcp_methods",
				reason: fmt.Sprintf("allowed by allow_all_known_mcp_methods on %s", e.name())}
		}
		return outcome{ep: e, reason: fmt.Sprintf("%s is not a known MCP method, so allow_all_known_mcp_methods on %s does not allow it", what, e.name())}
	}
	// A call a rule names but whose tool definition differs from its pin,
	// or whose arguments its schema refuses, is denied naming the first
	// such rule (the rule matched; the definition or arguments did not).
	var failure, failed string
	pinned := false
	for i, rule := range e.ep.Rules {
		if rule.Allow == nil || expired(rule.Allow, r.Time) || !mcpRuleMatches(e.ep, rule.Allow, r.MCP, false) {
			continue
		}
		if why := DefinitionMismatch(rule.Allow, r.MCP); why != "" {
			if failed == "" {
				failed, pinned = fmt.Sprintf("rules[%d]", i), true
				failure = fmt.Sprintf("; rules[%d] names it but %s", i, why)
			}
			continue
		}
		if err := argumentsValid(rule.Allow, r.MCP); err != nil {
			if failed == "" {
				failed = fmt.Sprintf("rules[%d]", i)
				failure = fmt.Sprintf("; rules[%d] names it but its arguments_schema refuses the arguments: %v", i, err)
			}
			continue
		}
		return outcome{ep: e, allow: true, rule: fmt.Sprintf("rules[%d]", i),
			reason: fmt.Sprintf("allowed by rules[%d] of %s", i, e.name())}
	}
	return outcome{ep: e, rule: failed, definitionRefused: pinned,
		reason: fmt.Sprintf("%s is not allowed by %s: no rule matches%s", what, e.name(), failure)}
}

// DefinitionMismatch says why rule's pinned definition refuses the tool of
// m ("" when it does not): the tool's verified definition differs, or none
// was verified. The words end with the reason's code,
// tool_definition_changed.
func DefinitionMismatch(rule *L7Rule, m *MCPMessage) string {
	switch {
	case rule.Definition == "" || m.AnyDefinition || m.ToolDefinition == rule.Definition:
		return ""
	case m.ToolDefinition == "":
		return "it pins the tool's definition to " + rule.Definition + " and the proxy could not verify the tool's definition (" + ToolDefinitionChanged + ")"
	}
	return "it pins the tool's definition to " + rule.Definition + " and the server now lists " + m.ToolDefinition + " (" + ToolDefinitionChanged + ")"
}

// ToolDefinitionChanged is the reason code of a call a pinned definition
// refused.
const ToolDefinitionChanged = "tool_definition_changed"

// mcpRuleMatches reports whether an MCP rule matches the message:
//   - method: a glob on the JSON-RPC method, read narrowly in allow rules
//     and widely in deny rules (as path globs are); when absent, an allow rule
//     uses the endpoint's profile (every known method with
//     allow_all_known_mcp_methods, else nothing) and a deny rule matches
//     every method;
//   - tool (or params.name): only tools/call matches, and its name must
//     match one of the globs — as globs only with strict names, else
//     compared exactly;
//   - prompt: only prompts/get matches, and its params.name must match one
//     of the globs, read narrowly in allow rules and widely in deny rules
//     (as method globs are; strict_tool_names does not apply to prompts);
//   - resource: only resources/read, resources/subscribe and
//     resources/unsubscribe match, and params.uri must match one of the
//     globs — MatchResource in allow rules, MatchDenyResource in deny rules.
//
// A rule with several matchers needs them all (the validator allows one).
func mcpRuleMatches(ep *Endpoint, rule *L7Rule, m *MCPMessage, deny bool) bool {
	switch {
	case rule.Method != "":
		if !pathGlobMatches(rule.Method, m.Method, !deny) {
			return false
		}
	case !deny:
		if !allowAllKnown(ep) || !IsKnownMCPMethod(m.Method) {
			return false
		}
	}
	if tool := ruleTool(rule); tool != nil && !toolMatches(ep, tool, m) {
		return false
	}
	if rule.Prompt != nil && !promptMatches(rule.Prompt, m, deny) {
		return false
	}
	if rule.Resource != nil && !resourceMatches(rule.Resource, m, deny) {
		return false
	}
	return true
}

func toolMatches(ep *Endpoint, tool *Matcher, m *MCPMessage) bool {
	if m.Method != "tools/call" {
		return false
	}
	for _, g := range tool.Any {
		if strictNames(ep) && MatchGlob(g, m.Tool) || !strictNames(ep) && g == m.Tool {
			return true
		}
	}
	return false
}

func promptMatches(prompt *Matcher, m *MCPMessage, deny bool) bool {
	if m.Method != "prompts/get" {
		return false
	}
	for _, g := range prompt.Any {
		if pathGlobMatches(g, m.Prompt, !deny) {
			return true
		}
	}
	return false
}

func resourceMatches(resource *Matcher, m *MCPMessage, deny bool) bool {
	if !IsResourceMethod(m.Method) {
		return false
	}
	for _, g := range resource.Any {
		if !deny && MatchResource(g, m.Resource) || deny && MatchDenyResource(g, m.Resource) {
			return true
		}
	}
	return false
}

// argumentsValid checks params.arguments against an allow rule's
// arguments_schema (JSON Schema, draft 2020-12 unless the schema says
// otherwise; no external references are loaded) with ValidateArguments:
// bounded numbers, format asserted, and the float64 reading checked too.
// Absent arguments are checked as {}. A schema that does not compile
// refuses everything.
func argumentsValid(rule *L7Rule, m *MCPMessage) error {
	if rule.ArgumentsSchema == nil || m.AnyArguments {
		return nil
	}
	schema, err := CompileArgumentsSchema(rule.ArgumentsSchema)
	if err != nil {
		return fmt.Errorf("arguments_schema does not compile: %w", err)
	}
	args := m.Arguments
	if len(bytes.TrimSpace(args)) == 0 {
		args = json.RawMessage("{}")
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(args))
	if err != nil {
		return fmt.Errorf("arguments are not JSON: %w", err)
	}
	return ValidateArguments(schema, inst)
}

// describeMCP names a message in reasons: "tools/call lookup_order".
func describeMCP(m *MCPMessage) string { return DescribeMCP(m) }

// ---------------------------------------------------------------------------
// 4. Combination, audit mode and default deny.

func isAudit(ep *Endpoint) bool { return ep.Enforcement == EnforcementAudit }

// combine turns deny-rule matches and candidate outcomes into the decision:
//   - a hard denial from the deny phase, or a deny rule on an enforcing
//     endpoint, denies;
//   - deny rules that matched only on audit endpoints let the request
//     through with Audit set — when some candidate would allow it (or
//     would audit it through); audit never grants what no entry grants;
//   - otherwise the first allowing candidate allows;
//   - otherwise a rule denial (not hard) on an audit candidate is let
//     through with Audit set;
//   - otherwise deny, with the first candidate's reason (VersionRefused
//     only when every candidate refused only the version), or the default
//     deny when no entry grants this binary this destination.
func combine(denials []denial, outs []outcome, eps []endpointRef, r Request) Decision {
	for _, d := range denials {
		if d.hard || !isAudit(d.ep.ep) {
			return Decision{Entry: d.ep.key, Endpoint: d.ep.index, Rule: d.rule, Reason: d.reason}
		}
	}
	var allowed, audited *outcome
	for i := range outs {
		o := &outs[i]
		if o.allow && allowed == nil {
			allowed = o
		}
		if !o.allow && !o.hard && isAudit(o.ep.ep) && audited == nil {
			audited = o
		}
	}
	if len(denials) > 0 && (allowed != nil || audited != nil) {
		d := denials[0]
		return Decision{Allow: true, Audit: true, Entry: d.ep.key, Endpoint: d.ep.index, Rule: d.rule,
			Reason: "audit: " + d.reason}
	}
	if allowed != nil {
		return Decision{Allow: true, Entry: allowed.ep.key, Endpoint: allowed.ep.index, Rule: allowed.rule, Reason: allowed.reason}
	}
	if audited != nil {
		return Decision{Allow: true, Audit: true, Entry: audited.ep.key, Endpoint: audited.ep.index, Rule: audited.rule,
			Reason: "audit: " + audited.reason}
	}
	if len(outs) > 0 {
		o := outs[0]
		refused := true
		for _, x := range outs {
			refused = refused && x.versionRefused
		}
		return Decision{Entry: o.ep.key, Endpoint: o.ep.index, Rule: o.rule, Reason: o.reason, VersionRefused: refused, DefinitionRefused: o.definitionRefused}
	}
	return Decision{Endpoint: -1, Reason: defaultDenyReason(eps, r)}
}

// defaultDenyReason explains a default deny: no endpoint matches the
// destination, or the ones that do belong to entries that do not list the
// binary.
func defaultDenyReason(eps []endpointRef, r Request) string {
	var entries []string
	for _, e := range eps {
		name := "network_policies." + e.key
		if destinationMatches(e, r) && !slices.Contains(entries, name) {
			entries = append(entries, name)
		}
	}
	return DefaultDenyReason(&r, entries)
}
