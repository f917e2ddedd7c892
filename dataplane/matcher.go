package dataplane

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"path"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/portcullis-dev/portcullis/policy"
)

// This file is the fast path: a policy version compiled once into an
// immutable Matcher whose Decide gives exactly policy.Decide's decision,
// reason text included. policy.Decide stays the definition; this is the
// same algorithm with its lookups precomputed:
//
//   - endpoints are numbered in policy.Decide's order (entry keys sorted,
//     endpoints in document order), and every step keeps that order, since
//     the first denial, the first allowing and the first auditing endpoint
//     decide;
//   - hosts sit in maps (exact names, IP literals) beside a short list of
//     wildcard patterns and hostless (allowed_ips) endpoints;
//   - globs (paths, binaries, methods, tools) are compiled to tokens once,
//     and match as policy.MatchGlob, policy.MatchDenyGlob and (paths of
//     deny rules and scopes, with a case-folded copy) policy.MatchDenyPath do;
//   - REST allow rules are indexed by the literal leading segments of
//     their path, tools/call rules by literal tool name; an index only
//     narrows the rules tried, in rule order, so the first match is the
//     reference's first match;
//   - arguments_schema is compiled once, as the validator compiles it;
//   - reasons are formatted only for the decision returned.
//
// Each step below names the policy/decide.go function it mirrors. The
// property test in matcher_test.go checks the two agree on random policies
// and requests.

// Matcher is a compiled policy version. It is immutable and safe for
// concurrent use. A nil *Matcher denies everything, as policy.Decide does
// for a nil policy.
type Matcher struct {
	policy *policy.Policy
	eps    []endpoint // in policy.Decide's order

	names    map[string]*nameHost   // exact host names → endpoints, in order
	ips      map[netip.Addr][]int32 // IP-literal hosts → endpoints, in order
	wild     []int32                // wildcard hosts, in order
	hostless []int32                // no host (allowed_ips only), in order

	namesBinaries bool // some entry lists binaries
}

// nameHost is an exact host name of the policy with what the hard denials
// need to know about it, precomputed (see hostView).
type nameHost struct {
	eps          []int32
	metadata     bool // policy.IsMetadataHost
	loopbackName bool // localhost or *.localhost
}

// endpoint is one endpoint of the policy, compiled.
type endpoint struct {
	key   string // network_policies key
	index int    // in the entry's endpoints
	ep    *policy.Endpoint
	name  string // "network_policies.KEY (host:ports/path)", as in reasons
	label string // "host:ports/path"

	binaries    []glob // the entry's binaries; none = any binary
	anyBinary   bool
	host        hostPattern
	ports       []int
	scope       *glob // path scope; nil when none
	allowedIPs  []netip.Prefix
	protocol    string
	inspected   bool
	audit       bool
	encodedOK   bool // allow_encoded_slash
	hasDeny     bool // len(deny_rules) > 0, nil entries counted as policy.Decide counts them
	denyRules   []rule
	allowRules  []rule // index i is rules[i]; a nil Allow leaves rule.nilAllow set
	restIndex   *pathIndex
	access      string
	accessAllow map[string]bool // methods the access preset allows
	accessRule  string          // "access: PRESET"

	allowedL4, allowedAccess string // the reasons of those allows

	// MCP options.
	strictNames bool
	allowAll    bool
	versions    []string
	toolIndex   map[string][]int32 // literal tool name → allow rules naming it, in order
	toolOther   []int32            // allow rules not in toolIndex, in order
	maxBody     int
}

// rule is one compiled allow or deny rule.
type rule struct {
	src      *policy.L7Rule
	nilAllow bool   // a rules[] entry without allow: allows nothing
	label    string // "rules[3]" or "deny_rules[3]"
	allowed  string // "allowed by rules[3] of NAME", the reason of an allow

	method    string // as written; "" or "*" when any
	anyMethod bool
	path      *glob // nil when absent (any path)
	query     map[string][]queryGlob
	hasQuery  bool
	methodG   *glob // MCP: method glob; nil when absent
	tool      []string
	toolG     []glob
	hasTool   bool
	schema    *jsonschema.Schema
	schemaErr error
	expiresAt *time.Time
}

// Compile validates p and compiles a copy of it into a Matcher. An invalid
// policy is refused with policy.Validate's error.
// NamesBinaries reports whether any entry of the policy lists binaries:
// only then does a decision depend on the calling binary, which is costly
// to find (a scan of /proc per connection).
func (m *Matcher) NamesBinaries() bool { return m != nil && m.namesBinaries }

func Compile(p *policy.Policy) (*Matcher, error) {
	if _, err := policy.Validate(p); err != nil {
		return nil, fmt.Errorf("compile policy: %w", err)
	}
	p = p.Clone()
	m := &Matcher{policy: p, names: map[string]*nameHost{}, ips: map[netip.Addr][]int32{}}
	keys := make([]string, 0, len(p.NetworkPolicies))
	for k := range p.NetworkPolicies {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		entry := p.NetworkPolicies[k]
		if entry == nil {
			continue
		}
		var bins []glob
		m.namesBinaries = m.namesBinaries || len(entry.Binaries) > 0
		for _, b := range entry.Binaries {
			bins = append(bins, compileGlob(b.Path))
		}
		for i, ep := range entry.Endpoints {
			if ep == nil {
				continue
			}
			e := compileEndpoint(k, i, ep)
			e.binaries, e.anyBinary = bins, len(entry.Binaries) == 0
			m.index(int32(len(m.eps)), &e)
			m.eps = append(m.eps, e)
		}
	}
	return m, nil
}

// index files endpoint n under its host.
func (m *Matcher) index(n int32, e *endpoint) {
	switch e.host.kind {
	case hostNone:
		m.hostless = append(m.hostless, n)
	case hostName:
		h := m.names[e.host.name]
		if h == nil {
			h = &nameHost{metadata: policy.IsMetadataHost(e.host.name), loopbackName: policy.IsLoopbackName(e.host.name)}
			m.names[e.host.name] = h
		}
		h.eps = append(h.eps, n)
	case hostIP:
		m.ips[e.host.ip] = append(m.ips[e.host.ip], n)
	case hostWild:
		m.wild = append(m.wild, n)
	}
}

func compileEndpoint(key string, index int, ep *policy.Endpoint) endpoint {
	e := endpoint{
		key: key, index: index, ep: ep,
		label:       policy.EndpointLabel(ep),
		host:        compileHost(ep.Host),
		ports:       policy.EndpointPorts(ep),
		protocol:    ep.Protocol,
		inspected:   policy.Inspected(ep.Protocol),
		audit:       ep.Enforcement == policy.EnforcementAudit,
		encodedOK:   ep.AllowEncodedSlash,
		hasDeny:     len(ep.DenyRules) > 0,
		access:      ep.Access,
		accessRule:  "access: " + ep.Access,
		strictNames: ep.MCP == nil || ep.MCP.StrictToolNames == nil || *ep.MCP.StrictToolNames,
		allowAll:    ep.MCP != nil && ep.MCP.AllowAllKnownMCPMethods,
		versions:    []string{policy.DefaultMCPVersion},
		maxBody:     policy.DefaultMaxBodyBytes,
	}
	e.name = fmt.Sprintf("network_policies.%s (%s)", key, e.label)
	// Allow reasons name only the rule, so they are built once here.
	e.allowedL4 = "allowed by " + e.name + " (no L7 inspection)"
	e.allowedAccess = "allowed by access: " + ep.Access + " on " + e.name
	if ep.Path != "" {
		g := compilePathGlob(ep.Path)
		e.scope = &g
	}
	e.allowedIPs = allowedPrefixes(ep.AllowedIPs)
	if methods := policy.AccessMethods(ep.Access); methods != nil {
		e.accessAllow = map[string]bool{}
		for _, m := range methods {
			e.accessAllow[m] = true
		}
	}
	if ep.MCP != nil {
		if len(ep.MCP.Versions) > 0 {
			e.versions = ep.MCP.Versions
		}
		if ep.MCP.MaxBodyBytes > 0 {
			e.maxBody = ep.MCP.MaxBodyBytes
		}
	}
	for i, r := range ep.DenyRules {
		if r == nil {
			e.denyRules = append(e.denyRules, rule{nilAllow: true})
			continue
		}
		e.denyRules = append(e.denyRules, compileRule(r, fmt.Sprintf("deny_rules[%d]", i), e.name, false))
	}
	for i, r := range ep.Rules {
		label := fmt.Sprintf("rules[%d]", i)
		if r.Allow == nil {
			e.allowRules = append(e.allowRules, rule{nilAllow: true, label: label})
			continue
		}
		e.allowRules = append(e.allowRules, compileRule(r.Allow, label, e.name, true))
	}
	switch e.protocol {
	case policy.ProtocolREST:
		e.restIndex = buildPathIndex(e.allowRules)
	case policy.ProtocolMCP:
		e.toolIndex, e.toolOther = buildToolIndex(e.allowRules, e.strictNames)
	}
	return e
}

func compileRule(r *policy.L7Rule, label, epName string, allow bool) rule {
	c := rule{
		src:       r,
		label:     label,
		allowed:   "allowed by " + label + " of " + epName,
		method:    r.Method,
		anyMethod: r.Method == "" || r.Method == "*",
		expiresAt: r.ExpiresAt,
	}
	if r.Path != "" {
		g := compilePathGlob(r.Path)
		c.path = &g
	}
	if r.Method != "" {
		g := compileGlob(r.Method)
		c.methodG = &g
	}
	if len(r.Query) > 0 {
		c.hasQuery = true
		c.query = map[string][]queryGlob{}
		for name, m := range r.Query {
			var gs []queryGlob
			if m != nil {
				for _, g := range m.Any {
					gs = append(gs, compileQueryGlob(g))
				}
			}
			c.query[name] = gs
		}
	}
	if tool := ruleTool(r); tool != nil {
		c.hasTool = true
		c.tool = tool.Any
		for _, g := range tool.Any {
			c.toolG = append(c.toolG, compileGlob(g))
		}
	}
	if allow && r.ArgumentsSchema != nil {
		c.schema, c.schemaErr = policy.CompileArgumentsSchema(r.ArgumentsSchema)
	}
	return c
}

// Policy returns the policy the matcher was compiled from (a copy of the
// one given to Compile; do not modify it).
func (m *Matcher) Policy() *policy.Policy {
	if m == nil {
		return nil
	}
	return m.policy
}

// emptyMatcher is what a nil *Matcher decides with: no endpoints.
var emptyMatcher = &Matcher{}

// ---------------------------------------------------------------------------
// Decide.

// Decide returns exactly policy.Decide(m.Policy(), *r). It does not modify
// r. An allowed REST request to an exact host name costs one allocation
// (the reason string); denials allocate their reasons.
func (m *Matcher) Decide(r *policy.Request) policy.Decision {
	if m == nil {
		m = emptyMatcher
	}
	now := r.Time
	if now.IsZero() {
		now = time.Now()
	}
	h := m.view(r.Host)
	// 1. Hard denials (destinationDenied).
	if d, denied := destinationDenied(r, &h); denied {
		return d
	}
	var buf [16]int32
	eps := m.destinations(r, &h, buf[:0])
	var paths canonicalPaths

	// 2. Deny rules win everywhere (denyPhase). The first denial that is
	// hard or on an enforcing endpoint decides (combine); a denial on an
	// audit endpoint is kept and lets the request through with Audit set
	// only when some candidate would allow or audit it.
	var soft denial // the first denial on an audit endpoint; soft.e == nil when none
	for _, n := range eps {
		e := &m.eps[n]
		d, ok := e.deny(r, &paths)
		if !ok {
			continue
		}
		if d.hard || !e.audit {
			return d.decision("")
		}
		if soft.e == nil {
			soft = d
		}
	}

	// 3. Candidates: endpoints whose destination (with path scope) and
	// binaries match, each judged alone (judgeCandidate).
	var first, audited outcome
	seen, refused := false, true
	for _, n := range eps {
		e := &m.eps[n]
		if !e.scopeMatches(r, &paths) || !e.binaryMatches(r.Binary, r.Ancestors) {
			continue
		}
		o := e.judge(r, &h, &paths, now)
		if o.allow || !o.hard && e.audit {
			// 4. Combination (combine): a kept audit denial wins over any
			// allowing or auditing candidate; else the first allowing
			// candidate decides.
			if soft.e != nil {
				return soft.decision("audit: ")
			}
			if o.allow {
				return o.decision(r, &paths, "")
			}
			if audited.e == nil {
				audited = o
			}
		}
		if !seen {
			first, seen = o, true
		}
		refused = refused && o.versionRefused
	}
	if audited.e != nil {
		d := audited.decision(r, &paths, "audit: ")
		d.Allow, d.Audit = true, true
		return d
	}
	if seen {
		d := first.decision(r, &paths, "")
		d.VersionRefused = refused
		return d
	}
	return policy.Decision{Endpoint: -1, Reason: m.defaultDenyReason(eps, r, &paths)}
}

// ---------------------------------------------------------------------------
// 1. Hard denials.

// hostView is what the decision needs to know about the request's Host,
// computed once: the folded name and IP readings policy.MatchHost and
// destinationDenied use, and the endpoints filed under an exact host. For
// an ASCII host whose folded name is one of the policy's exact host names
// (the common case), everything comes precomputed and nothing allocates.
type hostView struct {
	norm      string     // policy.NormalizeHost(Host): lower case, one trailing dot dropped
	normIP    netip.Addr // policy.ParseHostIP(norm), for host patterns
	normIsIP  bool
	literal   netip.Addr // policy.ParseHostIP(Host), for the address checks
	isLiteral bool
	metadata  bool // policy.IsMetadataHost(Host)
	loopback  bool // policy.IsLoopbackName(Host)
	exact     []int32
}

func (m *Matcher) view(host string) hostView {
	norm := policy.NormalizeHost(host)
	if nh := m.names[norm]; nh != nil && isASCII(host) {
		// norm is a valid DNS name of the policy (never an IP literal), and
		// host spells it with case, surrounding space or one trailing dot:
		// every reading of host is a reading of norm.
		return hostView{norm: norm, metadata: nh.metadata, loopback: nh.loopbackName, exact: nh.eps}
	}
	v := hostView{norm: norm, metadata: policy.IsMetadataHost(host), loopback: policy.IsLoopbackName(host)}
	v.literal, v.isLiteral = policy.ParseHostIP(host)
	v.normIP, v.normIsIP = policy.ParseHostIP(norm)
	switch {
	case v.normIsIP:
		v.exact = m.ips[v.normIP]
	case m.names[norm] != nil:
		v.exact = m.names[norm].eps
	}
	return v
}

// destinationDenied mirrors policy's destinationDenied: the rules no
// policy can override.
func destinationDenied(r *policy.Request, h *hostView) (policy.Decision, bool) {
	deny := func(reason string) (policy.Decision, bool) {
		return policy.Decision{Endpoint: -1, Reason: reason}, true
	}
	if strings.TrimSpace(r.Host) == "" && !r.Addr.IsValid() {
		return deny("request names no destination")
	}
	if r.Port < 1 || r.Port > 65535 {
		return deny(fmt.Sprintf("port %d is not a valid port", r.Port))
	}
	if policy.DeniedPort(r.Port) {
		return deny(fmt.Sprintf("port %d is a cluster control-plane port and always denied", r.Port))
	}
	if h.metadata {
		return deny(fmt.Sprintf("host %q is a cloud metadata service and always denied", r.Host))
	}
	if h.loopback && !r.DevAllowLoopback {
		return deny(fmt.Sprintf("host %q is loopback and always denied", r.Host))
	}
	if h.isLiteral {
		if why, denied := policy.AlwaysDenied(h.literal, r.DevAllowLoopback); denied {
			return deny(fmt.Sprintf("host %q is always denied: %s", r.Host, why))
		}
	}
	if r.Addr.IsValid() {
		if why, denied := policy.AlwaysDenied(r.Addr, r.DevAllowLoopback); denied {
			return deny(fmt.Sprintf("%s resolves to an always-denied destination: %s", r.Host, why))
		}
		if h.isLiteral && h.literal != r.Addr.Unmap().WithZone("") {
			return deny(fmt.Sprintf("host %q is the IP address %s but the proxy would dial %s", r.Host, h.literal, r.Addr))
		}
	}
	return policy.Decision{}, false
}

// ---------------------------------------------------------------------------
// Destinations.

// destinations appends to buf the endpoints whose host and port match r
// (policy's hostMatches and port check, before the path scope), in policy
// order: the endpoints the deny phase looks at, and the superset of the
// candidates.
func (m *Matcher) destinations(r *policy.Request, h *hostView, buf []int32) []int32 {
	out := buf
	for _, n := range h.exact {
		if slices.Contains(m.eps[n].ports, r.Port) {
			out = append(out, n)
		}
	}
	merged := false
	if !h.normIsIP {
		for _, n := range m.wild {
			e := &m.eps[n]
			if slices.Contains(e.ports, r.Port) && e.host.matchWild(h.norm) {
				out, merged = append(out, n), true
			}
		}
	}
	if len(m.hostless) > 0 {
		if addr, ok := destinationAddr(r, h); ok {
			for _, n := range m.hostless {
				e := &m.eps[n]
				if slices.Contains(e.ports, r.Port) && len(e.allowedIPs) > 0 && inPrefixes(e.allowedIPs, addr) {
					out, merged = append(out, n), true
				}
			}
		}
	}
	if merged {
		slices.Sort(out)
	}
	return out
}

// destinationAddr mirrors policy's destinationAddr: the resolved Addr, else
// an IP-literal Host.
func destinationAddr(r *policy.Request, h *hostView) (netip.Addr, bool) {
	if r.Addr.IsValid() {
		return r.Addr.Unmap().WithZone(""), true
	}
	return h.literal, h.isLiteral
}

// scopeMatches is the path-scope part of policy's destinationMatches: a
// request without a path (no L7 view) does not match a scoped endpoint.
func (e *endpoint) scopeMatches(r *policy.Request, paths *canonicalPaths) bool {
	if e.scope == nil {
		return true
	}
	if r.HTTPMethod == "" {
		return false
	}
	p, err := paths.get(r.Path, e.encodedOK)
	return err == nil && e.scope.match(p)
}

// binaryMatches mirrors policy's binaryMatches: the binary, or one of its
// ancestors, matches one of the entry's binaries.
func (e *endpoint) binaryMatches(binary string, ancestors []string) bool {
	if e.anyBinary {
		return true
	}
	if !cleanAbsolute(binary) {
		return false
	}
	for i := range e.binaries {
		if e.binaries[i].match(binary) {
			return true
		}
		for _, a := range ancestors {
			if cleanAbsolute(a) && e.binaries[i].match(a) {
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
// 2. Deny rules.

// denial mirrors policy's denial.
type denial struct {
	e      *endpoint
	rule   string
	reason string
	hard   bool
}

func (d *denial) decision(prefix string) policy.Decision {
	dec := policy.Decision{Entry: d.e.key, Endpoint: d.e.index, Rule: d.rule, Reason: prefix + d.reason}
	if prefix != "" {
		dec.Allow, dec.Audit = true, true
	}
	return dec
}

// deny is policy's denyPhase for one endpoint whose host and port match:
// whether one of its deny rules (or its uninspected protocol) denies r.
func (e *endpoint) deny(r *policy.Request, paths *canonicalPaths) (denial, bool) {
	if !e.hasDeny && e.inspected {
		return denial{}, false
	}
	if !e.inspected && e.scope == nil {
		return e.uninspectedDenial(), true
	}
	if r.HTTPMethod == "" {
		if !e.inspected {
			return e.uninspectedDenial(), true
		}
		return denial{e: e, rule: "deny_rules", hard: true,
			reason: fmt.Sprintf("%s has deny rules, which cannot be checked without L7 inspection of the request", e.name)}, true
	}
	p, err := paths.get(r.Path, e.encodedOK)
	if err != nil {
		return denial{e: e, rule: "deny_rules", hard: true,
			reason: fmt.Sprintf("malformed request path for %s: %v", e.name, err)}, true
	}
	if e.scope != nil && !e.scope.matchDenyPath(p) {
		return denial{}, false
	}
	switch e.protocol {
	case policy.ProtocolREST:
		for i := range e.denyRules {
			dr := &e.denyRules[i]
			if !dr.nilAllow && dr.matchesREST(r, p, false) {
				return denial{e: e, rule: dr.label,
					reason: fmt.Sprintf("%s %s is denied by %s of %s", strings.ToUpper(r.HTTPMethod), p, dr.label, e.name)}, true
			}
		}
		return denial{}, false
	case policy.ProtocolMCP:
		return e.mcpDenial(r)
	default:
		return e.uninspectedDenial(), true
	}
}

func (e *endpoint) uninspectedDenial() denial {
	return denial{e: e, rule: "protocol", hard: true,
		reason: fmt.Sprintf("protocol %s is not inspected yet, so %s denies every request", e.protocol, e.name)}
}

// mcpDenial mirrors policy's mcpDenials.
func (e *endpoint) mcpDenial(r *policy.Request) (denial, bool) {
	method := strings.ToUpper(r.HTTPMethod)
	if r.MCP == nil && (method == "GET" || method == "DELETE") {
		return denial{}, false
	}
	if r.MCP != nil && r.MCP.Response {
		return denial{}, false
	}
	if r.MCP == nil {
		return denial{e: e, rule: "deny_rules", hard: true,
			reason: fmt.Sprintf("%s %s carries no MCP message, so the deny rules of %s cannot be checked", method, r.Path, e.name)}, true
	}
	if why, bad := e.malformedMCP(r.MCP); bad {
		return denial{e: e, rule: "deny_rules", hard: true, reason: why + " (" + e.name + ")"}, true
	}
	for i := range e.denyRules {
		dr := &e.denyRules[i]
		if !dr.nilAllow && e.mcpRuleMatches(dr, r.MCP, true) {
			return denial{e: e, rule: dr.label,
				reason: fmt.Sprintf("%s is denied by %s of %s", describeMCP(r.MCP), dr.label, e.name)}, true
		}
	}
	return denial{}, false
}

// ---------------------------------------------------------------------------
// 3. Candidates.

// outcome mirrors policy's outcome, with the reason left to format until
// the outcome decides (explain).
type outcome struct {
	e              *endpoint
	allow          bool
	rule           string
	hard           bool
	versionRefused bool

	why    whyKind
	reason string // the reason, for the kinds that carry it ready-made
	r      *rule  // the allowing rule, for whyRule
	extra  string // whyRESTNone: nothing; whyMCPNone: the schema failure note
}

type whyKind uint8

const (
	whyText     whyKind = iota // reason holds the text
	whyL4                      // allowed without L7 inspection
	whyAccess                  // allowed by the REST access preset
	whyRule                    // allowed by a REST rule
	whyRESTNone                // no REST rule matches
	whyMCPRule                 // allowed by an MCP rule
	whyMCPNone                 // no MCP rule matches
)

func (o *outcome) decision(r *policy.Request, paths *canonicalPaths, prefix string) policy.Decision {
	return policy.Decision{Allow: o.allow, Entry: o.e.key, Endpoint: o.e.index, Rule: o.rule, Reason: prefix + o.explain(r, paths)}
}

// explain formats the outcome's reason as policy.Decide words it.
func (o *outcome) explain(r *policy.Request, paths *canonicalPaths) string {
	e := o.e
	switch o.why {
	case whyL4:
		return e.allowedL4
	case whyAccess:
		return e.allowedAccess
	case whyRule:
		return o.r.allowed
	case whyRESTNone:
		p, _ := paths.get(r.Path, e.encodedOK)
		return fmt.Sprintf("%s %s is not allowed by %s: no rule matches", strings.ToUpper(r.HTTPMethod), p, e.name)
	case whyMCPRule:
		return o.r.allowed
	case whyMCPNone:
		return fmt.Sprintf("%s is not allowed by %s: no rule matches%s", describeMCP(r.MCP), e.name, o.extra)
	}
	return o.reason
}

// judge mirrors policy's judgeCandidate: address rules, then the protocol.
func (e *endpoint) judge(r *policy.Request, h *hostView, paths *canonicalPaths, now time.Time) outcome {
	if why, ok := e.addressAllowed(r, h); !ok {
		return outcome{e: e, hard: true, reason: why}
	}
	switch e.protocol {
	case policy.ProtocolL4:
		return outcome{e: e, allow: true, rule: "endpoint", why: whyL4}
	case policy.ProtocolREST:
		return e.judgeREST(r, paths, now)
	case policy.ProtocolMCP:
		return e.judgeMCP(r, now)
	default:
		return outcome{e: e, hard: true,
			reason: fmt.Sprintf("protocol %s is not inspected yet, so %s denies every request", e.protocol, e.name)}
	}
}

// addressAllowed mirrors policy's addressAllowed (allowed_ips, private
// addresses).
func (e *endpoint) addressAllowed(r *policy.Request, h *hostView) (string, bool) {
	addr, ok := destinationAddr(r, h)
	if !ok {
		return "", true
	}
	if len(e.ep.AllowedIPs) > 0 {
		if inPrefixes(e.allowedIPs, addr) {
			return "", true
		}
		return fmt.Sprintf("%s (%s) is outside the allowed_ips of %s", r.Host, addr, e.label), false
	}
	if policy.IsPrivate(addr) {
		return fmt.Sprintf("%s resolves to the private address %s, which needs allowed_ips on %s", r.Host, addr, e.label), false
	}
	return "", true
}

func (e *endpoint) requireL7() outcome {
	return outcome{e: e, hard: true,
		reason: fmt.Sprintf("%s inspects %s requests, and this request was not inspected", e.name, e.protocol)}
}

// ---- REST

// judgeREST mirrors policy's judgeREST: the access preset, then the first
// unexpired allow rule that matches.
func (e *endpoint) judgeREST(r *policy.Request, paths *canonicalPaths, now time.Time) outcome {
	if r.HTTPMethod == "" {
		return e.requireL7()
	}
	p, err := paths.get(r.Path, e.encodedOK)
	if err != nil {
		return outcome{e: e, hard: true, reason: fmt.Sprintf("malformed request path: %v", err)}
	}
	method := strings.ToUpper(r.HTTPMethod)
	switch {
	case e.access == policy.AccessFull:
		return outcome{e: e, allow: true, rule: "access: full", why: whyAccess}
	case e.accessAllow[method]:
		return outcome{e: e, allow: true, rule: e.accessRule, why: whyAccess}
	}
	if i := e.restIndex.first(e.allowRules, r, p, now); i >= 0 {
		ar := &e.allowRules[i]
		return outcome{e: e, allow: true, rule: ar.label, why: whyRule, r: ar}
	}
	return outcome{e: e, why: whyRESTNone}
}

// matchesREST mirrors policy's restRuleMatches: method, path glob (narrow
// for allow rules, policy.MatchDenyPath for deny rules) and query matchers.
func (c *rule) matchesREST(r *policy.Request, p string, allow bool) bool {
	if !c.methodMatches(r.HTTPMethod) {
		return false
	}
	if c.path != nil {
		if allow && !c.path.match(p) || !allow && !c.path.matchDenyPath(p) {
			return false
		}
	}
	return !c.hasQuery || c.queryMatches(r.Query, allow)
}

// methodMatches mirrors policy's methodMatches: a rule on GET also
// matches HEAD.
func (c *rule) methodMatches(method string) bool {
	switch {
	case c.anyMethod || strings.EqualFold(c.method, method):
		return true
	case strings.EqualFold(c.method, "GET") && strings.EqualFold(method, "HEAD"):
		return true
	}
	return false
}

// queryGlob is a compiled query-value glob (policy's matchesValue): each
// `{a,b}` alternative as characters, `*` crossing `/`; ok is false when it
// does not parse.
type queryGlob struct {
	alts [][]token
	ok   bool
}

func compileQueryGlob(pattern string) queryGlob {
	alts, ok := policy.ExpandQueryGlob(pattern)
	if !ok {
		return queryGlob{}
	}
	q := queryGlob{ok: true}
	for _, a := range alts {
		toks, ok := compileChars(a)
		if !ok {
			return queryGlob{}
		}
		q.alts = append(q.alts, toks)
	}
	return q
}

// matches reports whether v matches; a glob that does not parse fails
// closed: no value in an allow rule, every value in a deny rule.
func (q *queryGlob) matches(v string, allow bool) bool {
	if !q.ok {
		return !allow
	}
	for _, toks := range q.alts {
		if matchTokens(toks, v) {
			return true
		}
	}
	return false
}

// queryMatches mirrors policy's queryMatches.
func (c *rule) queryMatches(raw string, allow bool) bool {
	values, err := url.ParseQuery(raw)
	if err != nil {
		return !allow
	}
	for name, globs := range c.query {
		vs := values[name]
		if len(vs) == 0 {
			return false
		}
		matched := 0
		for _, v := range vs {
			for i := range globs {
				if globs[i].matches(v, allow) {
					matched++
					break
				}
			}
		}
		if allow && matched != len(vs) || !allow && matched == 0 {
			return false
		}
	}
	return true
}

func (c *rule) expired(now time.Time) bool {
	return c.expiresAt != nil && !now.Before(*c.expiresAt)
}

// pathIndex narrows the allow rules of a REST endpoint by the literal
// leading segments of their path globs: a rule whose glob starts with the
// literal segments "", "v1", "items" can only match a path whose first
// segments are those, since policy.MatchGlob aligns the segments before a
// `**` one to one. Walking a request path visits every node whose rules
// may match; each node's rules are in rule order.
type pathIndex struct {
	rules []int32
	next  map[string]*pathIndex
}

func buildPathIndex(rules []rule) *pathIndex {
	root := &pathIndex{}
	for i := range rules {
		c := &rules[i]
		if c.nilAllow {
			continue
		}
		node := root
		if c.path != nil && c.path.valid {
			for _, s := range c.path.segs {
				if !s.literal {
					break
				}
				if node.next == nil {
					node.next = map[string]*pathIndex{}
				}
				child := node.next[s.lit]
				if child == nil {
					child = &pathIndex{}
					node.next[s.lit] = child
				}
				node = child
			}
		}
		node.rules = append(node.rules, int32(i))
	}
	return root
}

// first returns the index of the first unexpired allow rule matching r on
// canonical path p (policy's judgeREST loop), or -1.
func (x *pathIndex) first(rules []rule, r *policy.Request, p string, now time.Time) int {
	best := -1
	node, rest := x, p
	for node != nil {
		for _, n := range node.rules {
			if best >= 0 && int(n) >= best {
				break
			}
			c := &rules[n]
			if !c.expired(now) && c.matchesREST(r, p, true) {
				best = int(n)
				break
			}
		}
		if node.next == nil || rest == "\x00" {
			break
		}
		seg := rest
		if i := strings.IndexByte(rest, '/'); i >= 0 {
			seg, rest = rest[:i], rest[i+1:]
		} else {
			rest = "\x00" // no segment left (a path never holds NUL)
		}
		node = node.next[seg]
	}
	return best
}

// ---- MCP

// malformedMCP mirrors policy's malformedMCP.
func (e *endpoint) malformedMCP(m *policy.MCPMessage) (string, bool) {
	switch {
	case m.Response:
		return "", false
	case m.Method == "":
		return "MCP message has no method", true
	case m.Method != "tools/call":
		return "", false
	case m.Tool == "":
		return "tools/call names no tool", true
	case e.strictNames && !policy.ValidToolName(m.Tool):
		return fmt.Sprintf("tool name %q breaks strict_tool_names (^[A-Za-z0-9_.-]{1,128}$)", m.Tool), true
	case len(bytes.TrimSpace(m.Arguments)) > 0 && !json.Valid(m.Arguments):
		return fmt.Sprintf("tools/call %s has arguments that are not valid JSON", m.Tool), true
	}
	return "", false
}

// judgeMCP mirrors policy's judgeMCP.
func (e *endpoint) judgeMCP(r *policy.Request, now time.Time) outcome {
	method := strings.ToUpper(r.HTTPMethod)
	switch {
	case method == "":
		return e.requireL7()
	case (method == "GET" || method == "DELETE") && r.MCP == nil:
		return outcome{e: e, allow: true, rule: "endpoint",
			reason: fmt.Sprintf("MCP %s is allowed once the endpoint matches (%s)", method, e.name)}
	case method != "POST":
		return outcome{e: e, reason: fmt.Sprintf("HTTP %s is not allowed on MCP endpoint %s", method, e.name)}
	case r.MCP == nil:
		return outcome{e: e, hard: true, reason: fmt.Sprintf("POST to MCP endpoint %s carries no MCP message", e.name)}
	case r.MCP.Response:
		return outcome{e: e, allow: true, rule: "endpoint",
			reason: fmt.Sprintf("client JSON-RPC response passes on %s", e.name)}
	}
	if why, bad := e.malformedMCP(r.MCP); bad {
		return outcome{e: e, hard: true, reason: why}
	}
	o := e.judgeMCPRules(r.MCP, now)
	if !e.versionListed(r.MCP.ProtocolVersion) {
		o.why, o.reason = whyText, fmt.Sprintf("MCP protocol version %q is not listed in mcp.versions of %s", r.MCP.ProtocolVersion, e.name)
		o.versionRefused, o.allow, o.hard, o.rule = o.allow, false, true, "mcp.versions"
	}
	return o
}

func (e *endpoint) versionListed(version string) bool {
	if version == "" {
		version = policy.DefaultMCPVersion
	}
	return slices.Contains(e.versions, version)
}

// judgeMCPRules mirrors policy's judgeMCPRules. tools/call messages try
// only the rules naming their tool literally and the rules toolIndex could
// not file (globs, no tool), in rule order.
func (e *endpoint) judgeMCPRules(m *policy.MCPMessage, now time.Time) outcome {
	if len(e.allowRules) == 0 && e.allowAll {
		if policy.IsKnownMCPMethod(m.Method) {
			return outcome{e: e, allow: true, rule: "allow_all_known_mcp_methods",
				reason: "allowed by allow_all_known_mcp_methods on " + e.name}
		}
		return outcome{e: e, reason: fmt.Sprintf("%s is not a known MCP method, so allow_all_known_mcp_methods on %s does not allow it", describeMCP(m), e.name)}
	}
	var named []int32
	if m.Method == "tools/call" {
		named = e.toolIndex[m.Tool]
	}
	var schemaFailure, schemaRule string // as in policy: the refusing rule is named
	for a, b := 0, 0; a < len(named) || b < len(e.toolOther); {
		// Merge the two ascending lists.
		var n int32
		if b >= len(e.toolOther) || a < len(named) && named[a] < e.toolOther[b] {
			n, a = named[a], a+1
		} else {
			n, b = e.toolOther[b], b+1
		}
		c := &e.allowRules[n]
		if c.expired(now) || !e.mcpRuleMatches(c, m, false) {
			continue
		}
		if err := c.argumentsValid(m); err != nil {
			if schemaFailure == "" {
				schemaRule = c.label
				schemaFailure = fmt.Sprintf("; %s names it but its arguments_schema refuses the arguments: %v", c.label, err)
			}
			continue
		}
		return outcome{e: e, allow: true, rule: c.label, why: whyMCPRule, r: c}
	}
	return outcome{e: e, why: whyMCPNone, extra: schemaFailure, rule: schemaRule}
}

// buildToolIndex files each allow rule whose tool matcher lists only
// literal names (compared exactly, so a glob without metacharacters under
// strict names, or any name otherwise) under those names. A rule with a
// tool matcher matches only tools/call; the others stay in the other list.
func buildToolIndex(rules []rule, strict bool) (map[string][]int32, []int32) {
	index := map[string][]int32{}
	var other []int32
	for i := range rules {
		c := &rules[i]
		if c.nilAllow {
			continue
		}
		literal := c.hasTool && len(c.tool) > 0
		for j := range c.toolG {
			if strict && !c.toolG[j].isLiteral() {
				literal = false
			}
		}
		if !literal {
			other = append(other, int32(i))
			continue
		}
		for _, name := range c.tool {
			if l := index[name]; len(l) == 0 || l[len(l)-1] != int32(i) {
				index[name] = append(l, int32(i))
			}
		}
	}
	return index, other
}

// mcpRuleMatches mirrors policy's mcpRuleMatches.
func (e *endpoint) mcpRuleMatches(c *rule, m *policy.MCPMessage, deny bool) bool {
	switch {
	case c.methodG != nil:
		if !deny && !c.methodG.match(m.Method) || deny && !c.methodG.matchDeny(m.Method) {
			return false
		}
	case !deny:
		if !e.allowAll || !policy.IsKnownMCPMethod(m.Method) {
			return false
		}
	}
	if !c.hasTool {
		return true
	}
	if m.Method != "tools/call" {
		return false
	}
	for i, g := range c.tool {
		if e.strictNames && c.toolG[i].match(m.Tool) || !e.strictNames && g == m.Tool {
			return true
		}
	}
	return false
}

// argumentsValid mirrors policy's argumentsValid, with the schema compiled
// once.
func (c *rule) argumentsValid(m *policy.MCPMessage) error {
	if c.src.ArgumentsSchema == nil {
		return nil
	}
	if c.schemaErr != nil {
		return fmt.Errorf("arguments_schema does not compile: %w", c.schemaErr)
	}
	args := m.Arguments
	if len(bytes.TrimSpace(args)) == 0 {
		args = json.RawMessage("{}")
	}
	inst, err := decodeArguments(args)
	if err != nil {
		return fmt.Errorf("arguments are not JSON: %w", err)
	}
	return policy.ValidateArguments(c.schema, inst)
}

func describeMCP(m *policy.MCPMessage) string {
	if m.Method == "tools/call" {
		return "tools/call " + m.Tool
	}
	return m.Method
}

// ruleTool mirrors policy's ruleTool: tool, or its params.name spelling.
func ruleTool(r *policy.L7Rule) *policy.Matcher {
	if r.Tool != nil {
		return r.Tool
	}
	if r.Params != nil {
		return r.Params["name"]
	}
	return nil
}

// ---------------------------------------------------------------------------
// 4. Default deny.

// defaultDenyReason mirrors policy's defaultDenyReason. Only endpoints
// whose host and port match can match the destination, so eps suffices.
func (m *Matcher) defaultDenyReason(eps []int32, r *policy.Request, paths *canonicalPaths) string {
	who := r.Binary
	if who == "" {
		who = "an unidentified binary"
	}
	dest := fmt.Sprintf("%s:%d", r.Host, r.Port)
	if r.HTTPMethod != "" {
		dest += " (" + strings.ToUpper(r.HTTPMethod) + " " + r.Path + ")"
	}
	var entries []string
	for _, n := range eps {
		e := &m.eps[n]
		name := "network_policies." + e.key
		if e.scopeMatches(r, paths) && !slices.Contains(entries, name) {
			entries = append(entries, name)
		}
	}
	if len(entries) > 0 {
		return fmt.Sprintf("%s may not reach %s: %s do not list that binary", who, dest, strings.Join(entries, ", "))
	}
	return fmt.Sprintf("no network policy allows %s to reach %s (default deny)", who, dest)
}

// ---------------------------------------------------------------------------
// What the proxy asks before it reads a request.

// Inspect reports whether requests to host:port need the proxy to see them
// at L7 (terminate TLS, read the HTTP request): true when an endpoint whose
// host and port match, whatever its binaries, has a protocol other than L4
// or has deny rules. A hostless (allowed_ips) endpoint on the port counts
// when host is a name, since its address is not known here. When false,
// Decide on a request without HTTPMethod is the whole answer.
func (m *Matcher) Inspect(host string, port int) bool {
	if m == nil {
		return false
	}
	r := policy.Request{Host: host, Port: port}
	h := m.view(host)
	var buf [16]int32
	for _, n := range m.destinations(&r, &h, buf[:0]) {
		if m.eps[n].needsL7() {
			return true
		}
	}
	if !h.isLiteral {
		for _, n := range m.hostless {
			if e := &m.eps[n]; slices.Contains(e.ports, port) && e.needsL7() {
				return true
			}
		}
	}
	return false
}

// WantsAddress reports whether the decision on r could depend on where its
// host resolves: some endpoint whose host pattern and port match r's name
// and port, and whose binaries match r.Binary, or a hostless (allowed_ips
// only) endpoint on r.Port whose binaries match, since such an endpoint
// matches by address. When false, Decide without an address is already the
// answer (a denial), and the proxy asks no DNS server about the name: a
// denied name leaks nothing through DNS.
func (m *Matcher) WantsAddress(r *policy.Request) bool {
	if m == nil {
		return false
	}
	name := *r
	name.Addr = netip.Addr{}
	h := m.view(name.Host)
	var buf [16]int32
	for _, n := range m.destinations(&name, &h, buf[:0]) {
		if m.eps[n].binaryMatches(r.Binary, r.Ancestors) {
			return true
		}
	}
	for _, n := range m.hostless {
		if e := &m.eps[n]; slices.Contains(e.ports, r.Port) && e.binaryMatches(r.Binary, r.Ancestors) {
			return true
		}
	}
	return false
}

// InspectedOn lists where the endpoints inspected at L7 on port live: the
// IP literals and the exact host names of those endpoints (wildcard and
// hostless ones cannot be listed). The proxy refuses an L4 tunnel to any of
// these addresses, which would reach the inspected server uninspected.
func (m *Matcher) InspectedOn(port int) (addrs []netip.Addr, names []string) {
	if m == nil {
		return nil, nil
	}
	for i := range m.eps {
		e := &m.eps[i]
		if !e.needsL7() || !slices.Contains(e.ports, port) {
			continue
		}
		switch e.host.kind {
		case hostIP:
			if !slices.Contains(addrs, e.host.ip) {
				addrs = append(addrs, e.host.ip)
			}
		case hostName:
			if !slices.Contains(names, e.host.name) {
				names = append(names, e.host.name)
			}
		}
	}
	return addrs, names
}

func (e *endpoint) needsL7() bool {
	return e.protocol != policy.ProtocolL4 || e.hasDeny
}

// MCPLimits reports whether an mcp endpoint matches host:port and path —
// its path scope read widely, as its deny rules read it, so the proxy
// parses every message a deny rule may judge — and its mcp.max_body_bytes.
// Validation guarantees mcp endpoints sharing a host:port agree on it.
func (m *Matcher) MCPLimits(host string, port int, reqPath string) (maxBodyBytes int, ok bool) {
	if m == nil {
		return 0, false
	}
	r := policy.Request{Host: host, Port: port, HTTPMethod: "POST", Path: reqPath}
	h := m.view(host)
	var buf [16]int32
	var paths canonicalPaths
	for _, n := range m.destinations(&r, &h, buf[:0]) {
		e := &m.eps[n]
		if e.protocol != policy.ProtocolMCP {
			continue
		}
		if e.scope != nil {
			p, err := paths.get(reqPath, e.encodedOK)
			if err != nil || !e.scope.matchDenyPath(p) {
				continue
			}
		}
		return e.maxBody, true
	}
	return 0, false
}

// ---------------------------------------------------------------------------
// Hosts.

type hostKind uint8

const (
	hostNone    hostKind = iota // no host: allowed_ips decide
	hostName                    // an exact DNS name
	hostIP                      // an IP literal
	hostWild                    // a name with wildcard labels
	hostInvalid                 // matches nothing
)

// hostPattern is a compiled endpoint host (policy.MatchHost).
type hostPattern struct {
	kind   hostKind
	name   string      // hostName: the folded name
	ip     netip.Addr  // hostIP
	multi  bool        // hostWild: first label `**` (one or more labels)
	labels []hostLabel // hostWild: the labels, the first omitted when multi
}

// hostLabel is one label of a wildcard host pattern: a literal, a whole
// `*` (any one label), or a first label holding `*` (a character pattern).
type hostLabel struct {
	literal string
	any     bool
	toks    []token
}

func compileHost(pattern string) hostPattern {
	if pattern == "" {
		return hostPattern{kind: hostNone}
	}
	if policy.ValidHostPattern(pattern) != nil {
		return hostPattern{kind: hostInvalid}
	}
	p := policy.NormalizeHost(pattern)
	if a, ok := policy.ParseHostIP(p); ok {
		return hostPattern{kind: hostIP, ip: a}
	}
	if !strings.Contains(p, "*") {
		return hostPattern{kind: hostName, name: p}
	}
	hp := hostPattern{kind: hostWild}
	labels := strings.Split(p, ".")
	if labels[0] == "**" {
		hp.multi, labels = true, labels[1:]
	}
	for _, l := range labels {
		switch {
		case l == "*":
			hp.labels = append(hp.labels, hostLabel{any: true})
		case strings.Contains(l, "*"):
			toks, ok := compileChars(l)
			if !ok {
				return hostPattern{kind: hostInvalid}
			}
			hp.labels = append(hp.labels, hostLabel{toks: toks})
		default:
			hp.labels = append(hp.labels, hostLabel{literal: l})
		}
	}
	return hp
}

// matchWild mirrors policy.MatchHost for a wildcard pattern and a folded
// host that is not an IP literal: the host must be a valid host name
// (policy.ValidHostName), and its labels match the pattern's from the
// right, a `**` first label taking the one or more labels left over.
func (hp *hostPattern) matchWild(h string) bool {
	if !policy.ValidHostName(h) {
		return false
	}
	rest := h
	for i := len(hp.labels) - 1; i >= 0; i-- {
		var label string
		if j := strings.LastIndexByte(rest, '.'); j >= 0 {
			label, rest = rest[j+1:], rest[:j]
		} else if rest != "" {
			label, rest = rest, ""
		} else {
			return false
		}
		if i == 0 && !hp.multi && rest != "" {
			return false
		}
		l := &hp.labels[i]
		switch {
		case l.any:
		case l.toks != nil:
			if !matchTokens(l.toks, label) {
				return false
			}
		case l.literal != label:
			return false
		}
	}
	// A `**` takes the one or more (non-empty, by ValidHostName) labels left.
	return hp.multi == (rest != "")
}

// allowedPrefixes parses allowed_ips as policy's addrInAllowedIPs does:
// CIDRs (masked) or single addresses; invalid entries cover nothing.
func allowedPrefixes(list []string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range list {
		prefix, err := netip.ParsePrefix(s)
		if err != nil {
			a, aerr := netip.ParseAddr(s)
			if aerr != nil {
				continue
			}
			prefix = netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen())
		}
		out = append(out, prefix.Masked())
	}
	return out
}

// inPrefixes mirrors policy's addrInAllowedIPs: addr, or the IPv4 address
// a NAT64 or IPv4-compatible addr reaches, in one of the prefixes.
func inPrefixes(prefixes []netip.Prefix, addr netip.Addr) bool {
	a := addr.Unmap().WithZone("")
	v4, embedded := policy.EmbeddedIPv4(a)
	for _, p := range prefixes {
		if p.Contains(a) || embedded && p.Contains(v4) {
			return true
		}
	}
	return false
}

// ---------------------------------------------------------------------------
// Paths.

// canonicalPaths holds a request's canonical path under each
// allow_encoded_slash setting, computed at most once each.
type canonicalPaths struct {
	done [2]bool
	path [2]string
	err  [2]error
}

func (c *canonicalPaths) get(raw string, allowEncodedSlash bool) (string, error) {
	i := 0
	if allowEncodedSlash {
		i = 1
	}
	if !c.done[i] {
		c.path[i], c.err[i] = canonicalPath(raw, allowEncodedSlash)
		c.done[i] = true
	}
	return c.path[i], c.err[i]
}

// canonicalPath is policy.CanonicalPath without allocating when raw is
// already canonical — the usual case: it starts with `/` and holds only
// bytes the canonical form writes literally, no empty segment but a
// trailing one, and no dot segment.
func canonicalPath(raw string, allowEncodedSlash bool) (string, error) {
	if isCanonicalPath(raw) {
		return raw, nil
	}
	return policy.CanonicalPath(raw, allowEncodedSlash)
}

func isCanonicalPath(raw string) bool {
	if raw == "" || raw[0] != '/' {
		return false
	}
	start := 1
	for i := 1; i <= len(raw); i++ {
		if i < len(raw) && raw[i] != '/' {
			if !pathLiteral[raw[i]] {
				return false
			}
			continue
		}
		seg := raw[start:i]
		switch {
		case seg == "" && i < len(raw), seg == ".", seg == "..":
			return false
		}
		start = i + 1
	}
	return true
}

// pathLiteral marks the bytes a canonical path segment writes literally
// (policy's isPathLiteral): RFC 3986 unreserved, sub-delims but ';', ':'
// and '@'. A raw ';' starts parameters, which CanonicalPath strips.
var pathLiteral = func() (t [256]bool) {
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
	}
	for c := 'A'; c <= 'Z'; c++ {
		t[c] = true
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for _, c := range []byte("-._~!$&'()*+,=:@") {
		t[c] = true
	}
	return t
}()

// ---------------------------------------------------------------------------
// Globs.

// glob is a compiled policy glob. match is policy.MatchGlob (segments;
// `**` alone crosses `/`), matchDeny is policy.MatchDenyGlob (also
// OpenShell's character reading, and an optional trailing slash),
// matchChars is the character reading alone (query values). An invalid
// glob matches nothing.
type glob struct {
	fold    []glob // path globs: each `{a,b}` alternative (policy.ExpandDenyPathGlob) ignoring ASCII case, for deny matching
	folded  bool   // literals compare ignoring ASCII case
	valid   bool
	literal bool // every segment literal: matches lit alone
	lit     string
	segs    []globSeg
	chars   []token // the whole pattern as characters; nil when it does not compile so
	charsOK bool
}

type globSeg struct {
	folded  bool // lit compares ignoring ASCII case
	any     bool // `**`
	literal bool // no metacharacters: matches lit exactly
	lit     string
	toks    []token
}

func compileGlob(pattern string) glob {
	g := glob{valid: policy.ValidGlob(pattern) == nil}
	if !g.valid {
		return g
	}
	for _, s := range strings.Split(pattern, "/") {
		if s == "**" {
			g.segs = append(g.segs, globSeg{any: true})
			continue
		}
		toks, ok := compileChars(s)
		if !ok {
			return glob{} // ValidGlob accepted what compileChars refuses: match nothing
		}
		g.segs = append(g.segs, globSeg{literal: !strings.ContainsAny(s, `*?[\`), lit: s, toks: toks})
	}
	g.chars, g.charsOK = compileChars(pattern)
	g.lit, g.literal = pattern, g.isLiteral()
	return g
}

// isLiteral reports whether the glob matches exactly one string, itself.
func (g *glob) isLiteral() bool {
	if !g.valid {
		return false
	}
	for _, s := range g.segs {
		if !s.literal {
			return false
		}
	}
	return true
}

// match is policy.MatchGlob: the greedy wildcard algorithm over segments,
// `**` standing for any run of whole segments. Segments of s are walked by
// byte offset; len(s)+1 marks "no segment left".
func (g *glob) match(s string) bool {
	switch {
	case !g.valid:
		return false
	case g.literal:
		return s == g.lit || g.folded && asciiEqualFold(s, g.lit)
	}
	n := len(g.segs)
	p, i := 0, 0
	star, mark := -1, 0
	for i <= len(s) {
		if p < n && g.segs[p].any {
			star, mark = p, i
			p++
			continue
		}
		end := segmentEnd(s, i)
		switch {
		case p < n && g.segs[p].matchSeg(s[i:end]):
			p++
			i = end + 1
		case star >= 0:
			mark = segmentEnd(s, mark) + 1
			p, i = star+1, mark
		default:
			return false
		}
	}
	for p < n && g.segs[p].any {
		p++
	}
	return p == n
}

func (s *globSeg) matchSeg(seg string) bool {
	if s.literal {
		return seg == s.lit || s.folded && asciiEqualFold(seg, s.lit)
	}
	return matchTokens(s.toks, seg)
}

// segmentEnd returns the end of the segment of s starting at i: the next
// `/`, or len(s).
func segmentEnd(s string, i int) int {
	if j := strings.IndexByte(s[i:], '/'); j >= 0 {
		return i + j
	}
	return len(s)
}

// matchDeny is policy.MatchDenyGlob.
func (g *glob) matchDeny(s string) bool {
	if !g.valid {
		return false
	}
	if g.match(s) || g.matchChars(s) {
		return true
	}
	if trimmed := strings.TrimSuffix(s, "/"); trimmed != s && trimmed != "" {
		return g.match(trimmed) || g.matchChars(trimmed)
	}
	return false
}

// compilePathGlob compiles a path glob (a rule's path or an endpoint's
// path scope) with the case-folded copies of its brace alternatives for
// matchDenyPath.
func compilePathGlob(pattern string) glob {
	g := compileGlob(pattern)
	alts, ok := policy.ExpandDenyPathGlob(pattern)
	if !ok {
		return g // matchDenyPath matches nothing, as policy.MatchDenyPath
	}
	for _, a := range alts {
		f := compileGlob(a)
		f.folded = true
		for i := range f.segs {
			f.segs[i].folded = true
			f.segs[i].toks = foldTokens(f.segs[i].toks)
		}
		f.chars = foldTokens(f.chars)
		g.fold = append(g.fold, f)
	}
	return g
}

// matchDenyPath is policy.MatchDenyPath: matchDeny ignoring ASCII case,
// with any brace alternative, on every reading of p
// (policy.DenyReadings). The readings other than p itself are computed
// only when p has what they change: a `%` or a segment ending in a dot.
func (g *glob) matchDenyPath(p string) bool {
	if len(g.fold) == 0 {
		return false
	}
	if g.matchDenyAlts(p) {
		return true
	}
	if !strings.Contains(p, "%") && !segmentEndsInDot(p) {
		return false
	}
	for _, r := range policy.DenyReadings(p)[1:] {
		if g.matchDenyAlts(r) {
			return true
		}
	}
	return false
}

func (g *glob) matchDenyAlts(p string) bool {
	for i := range g.fold {
		if g.fold[i].matchDeny(p) {
			return true
		}
	}
	return false
}

func segmentEndsInDot(p string) bool {
	for i := 0; i < len(p); i++ {
		if p[i] == '.' && (i+1 == len(p) || p[i+1] == '/') {
			return true
		}
	}
	return false
}

// asciiEqualFold is strings.EqualFold for ASCII letters only (policy's
// folded tokens know no Unicode folding).
func asciiEqualFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		if a[i] != b[i] && a[i] != policy.SwapCase(b[i]) {
			return false
		}
	}
	return true
}

// foldTokens makes every one-byte token accept both cases of an ASCII
// letter (policy's foldTokens).
func foldTokens(toks []token) []token {
	out := make([]token, len(toks))
	for i, t := range toks {
		switch {
		case t.star:
			out[i] = t
		case t.set == nil && policy.SwapCase(t.lit) == t.lit:
			out[i] = t
		default:
			var set [256]bool
			for c := range set {
				set[c] = t.matches(byte(c)) || t.matches(policy.SwapCase(byte(c)))
			}
			out[i] = token{set: &set}
		}
	}
	return out
}

// matchChars is policy's matchChars on the whole pattern: `*` crosses `/`.
func (g *glob) matchChars(s string) bool {
	return g.valid && g.charsOK && matchTokens(g.chars, s)
}

// token is one element of a character pattern (policy's globToken): a star,
// or a set of bytes matching exactly one byte.
type token struct {
	star bool
	set  *[256]bool
	lit  byte
	one  bool // set == nil and !star: matches lit only
}

func (t *token) matches(c byte) bool {
	if t.set != nil {
		return t.set[c]
	}
	return c == t.lit
}

var anyByte = func() *[256]bool {
	var t [256]bool
	for i := range t {
		t[i] = true
	}
	return &t
}()

// compileChars mirrors policy's compileChars; ok is false for an unclosed
// class or a trailing backslash.
func compileChars(pat string) (toks []token, ok bool) {
	for i := 0; i < len(pat); {
		switch c := pat[i]; c {
		case '*':
			if len(toks) == 0 || !toks[len(toks)-1].star {
				toks = append(toks, token{star: true})
			}
			i++
		case '?':
			toks = append(toks, token{set: anyByte})
			i++
		case '[':
			set, n, err := parseClass(pat[i:])
			if err != nil {
				return nil, false
			}
			toks = append(toks, token{set: set})
			i += n
		case '\\':
			if i+1 >= len(pat) {
				return nil, false
			}
			toks = append(toks, token{lit: pat[i+1], one: true})
			i += 2
		default:
			toks = append(toks, token{lit: c, one: true})
			i++
		}
	}
	return toks, true
}

// matchTokens mirrors policy's matchTokens (the greedy star algorithm).
func matchTokens(toks []token, s string) bool {
	n := len(toks)
	p, i := 0, 0
	star, mark := -1, 0
	for i < len(s) {
		switch {
		case p < n && toks[p].star:
			star, mark = p, i
			p++
		case p < n && toks[p].matches(s[i]):
			p++
			i++
		case star >= 0:
			mark++
			p, i = star+1, mark
		default:
			return false
		}
	}
	for p < n && toks[p].star {
		p++
	}
	return p == n
}

// parseClass mirrors policy's parseClass: the bracket class at the start of
// pat as a byte set, and its length. `]` first is literal, `\` escapes, `/`
// is never in the set.
func parseClass(pat string) (*[256]bool, int, error) {
	i := 1
	negate := false
	if i < len(pat) && (pat[i] == '!' || pat[i] == '^') {
		negate = true
		i++
	}
	var in [256]bool
	first := true
	for {
		if i >= len(pat) {
			return nil, 0, errors.New("unclosed bracket class")
		}
		if pat[i] == ']' && !first {
			i++
			break
		}
		first = false
		lo, n, err := classChar(pat[i:])
		if err != nil {
			return nil, 0, err
		}
		i += n
		hi := lo
		if i+1 < len(pat) && pat[i] == '-' && pat[i+1] != ']' {
			hi, n, err = classChar(pat[i+1:])
			if err != nil {
				return nil, 0, err
			}
			i += 1 + n
			if hi < lo {
				return nil, 0, errors.New("bad range in bracket class")
			}
		}
		for c := int(lo); c <= int(hi); c++ {
			in[c] = true
		}
	}
	var set [256]bool
	for c := range set {
		set[c] = in[c] != negate && c != '/'
	}
	return &set, i, nil
}

func classChar(s string) (byte, int, error) {
	if s[0] == '\\' {
		if len(s) < 2 {
			return 0, 0, errors.New("trailing backslash in bracket class")
		}
		return s[1], 2, nil
	}
	if s[0] == '/' {
		return 0, 0, errors.New("/ in bracket class")
	}
	return s[0], 1, nil
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}
