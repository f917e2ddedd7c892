package match

import (
	"fmt"
	"net/netip"
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
//   - arguments_schema is compiled once, as the validator compiles it,
//     and arguments that a simple schema plainly admits skip the library
//     (fastschema.go; every refusal is still the library's);
//   - reasons are formatted only for the decision returned.
//
// Each step (here and in the other files of the package) names the
// policy/decide.go function it mirrors. The
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

	// literals are the views of the policy's IP-literal hosts in their
	// standard spelling (what the proxy passes for such a host), with
	// the address checks on them answered (see hostView).
	literals map[string]*hostView

	namesBinaries bool // some entry lists binaries

	limits map[limitRef]*Limit // rate_limit rules by place (ratelimit.go)
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
	maxResponse int
	mcp         *policy.MCPOptions // for OAuthPath; nil when none
}

// rule is one compiled allow or deny rule.
type rule struct {
	src      *policy.L7Rule
	nilAllow bool          // a rules[] entry without allow: allows nothing
	label    string        // "rules[3]" or "deny_rules[3]"
	allowed  string        // "allowed by rules[3] of NAME", the reason of an allow
	review   time.Duration // > 0: an allow by this rule needs review (policy.L7Rule.Reviewed)

	method    string // as written; "" or "*" when any
	anyMethod bool
	path      *glob // nil when absent (any path)
	query     map[string][]queryGlob
	hasQuery  bool
	methodG   *glob // MCP: method glob; nil when absent
	tool      []string
	toolG     []glob
	hasTool   bool
	prompt    []glob // MCP: prompt globs; nil when absent
	resource  []glob // MCP: resource globs (compilePathGlob, for the folded deny reading); nil when absent
	schema    *jsonschema.Schema
	schemaErr error
	fast      *fastSchema // nil: every call goes to schema
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
			m.compileLimits(&e)
			m.eps = append(m.eps, e)
		}
	}
	m.precomputeLiterals()
	return m, nil
}

// precomputeLiterals fills m.literals. A view is a function of the host
// string alone (and of m, complete here), so the one computed now is the
// one view would compute for each request; the address checks depend
// only on the address, and loopback's on the request's
// DevAllowLoopback, kept for both values.
func (m *Matcher) precomputeLiterals() {
	for ip := range m.ips {
		s := ip.String()
		v := m.view(s)
		if !v.isLiteral {
			continue // cannot happen: s is an address
		}
		v.checked = true
		for i, dev := range []bool{false, true} {
			_, denied := policy.AlwaysDenied(v.literal, dev)
			v.literalSafe[i] = !denied
		}
		v.literalPrivate = policy.IsPrivate(v.literal)
		if m.literals == nil {
			m.literals = map[string]*hostView{}
		}
		m.literals[s] = &v
	}
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
		maxResponse: policy.DefaultMaxResponseBytes,
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
		e.maxResponse = ep.MCP.ResponseLimit()
		e.mcp = ep.MCP
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
	if wait, ok := r.Reviewed(); ok && allow {
		c.review = wait
		c.allowed += " once a person approves the call (review)"
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
	if r.Prompt != nil {
		c.prompt = make([]glob, 0, len(r.Prompt.Any))
		for _, g := range r.Prompt.Any {
			c.prompt = append(c.prompt, compileGlob(g))
		}
	}
	if r.Resource != nil {
		c.resource = make([]glob, 0, len(r.Resource.Any))
		for _, g := range r.Resource.Any {
			c.resource = append(c.resource, compilePathGlob(g))
		}
	}
	if allow && r.ArgumentsSchema != nil {
		c.schema, c.schemaErr = policy.CompileArgumentsSchema(r.ArgumentsSchema)
		if c.schemaErr == nil {
			c.fast = compileFastSchema(r.ArgumentsSchema)
		}
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
	var first, audited, held outcome // held: the first allow that needs review
	seen, refused := false, true
	for _, n := range eps {
		e := &m.eps[n]
		if !e.scopeMatches(r, &paths) || !e.binaryMatches(r.Binary, r.Ancestors) {
			continue
		}
		o := e.judge(r, &h, &paths, now)
		switch {
		case o.allow && o.review == 0:
			// 4. Combination (combine): a kept audit denial wins over any
			// allowing or auditing candidate; else the first candidate
			// that allows without review decides.
			if soft.e != nil {
				return soft.decision("audit: ")
			}
			return o.decision(r, &paths, "")
		case o.allow:
			// A reviewed allow decides only if no later candidate allows
			// without review.
			if held.e == nil {
				held = o
			}
		case !o.hard && e.audit && audited.e == nil:
			audited = o
		}
		if !seen {
			first, seen = o, true
		}
		refused = refused && o.versionRefused
	}
	if soft.e != nil && (held.e != nil || audited.e != nil) {
		d := soft.decision("audit: ")
		d.Review = held.review // audit never lifts a review
		return d
	}
	if held.e != nil {
		return held.decision(r, &paths, "")
	}
	if audited.e != nil {
		d := audited.decision(r, &paths, "audit: ")
		d.Allow, d.Audit = true, true
		return d
	}
	if seen {
		d := first.decision(r, &paths, "")
		d.VersionRefused, d.DefinitionRefused = refused, first.definitionRefused
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

	// checked is set on the views of m.literals, which also hold what
	// the address checks say of literal: literalSafe[dev] is
	// !policy.AlwaysDenied(literal, dev) (dev 1: DevAllowLoopback), and
	// literalPrivate is policy.IsPrivate(literal).
	checked        bool
	literalSafe    [2]bool
	literalPrivate bool
}

func (m *Matcher) view(host string) hostView {
	if v := m.literals[host]; v != nil {
		// An IP literal of the policy, spelled as the proxy spells it:
		// computed at Compile by the code below (precomputeLiterals).
		return *v
	}
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
	if h.isLiteral && !(h.checked && h.literalSafe[b2i(r.DevAllowLoopback)]) {
		if why, denied := policy.AlwaysDenied(h.literal, r.DevAllowLoopback); denied {
			return deny(fmt.Sprintf("host %q is always denied: %s", r.Host, why))
		}
	}
	if r.Addr.IsValid() {
		// An address equal to the literal just checked passes as it did
		// (the proxy dials the literal a host names).
		if !(h.isLiteral && r.Addr == h.literal) {
			if why, denied := policy.AlwaysDenied(r.Addr, r.DevAllowLoopback); denied {
				return deny(fmt.Sprintf("%s resolves to an always-denied destination: %s", r.Host, why))
			}
		}
		if h.isLiteral && h.literal != r.Addr.Unmap().WithZone("") {
			return deny(fmt.Sprintf("host %q is the IP address %s but the proxy would dial %s", r.Host, h.literal, r.Addr))
		}
	}
	return policy.Decision{}, false
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// ---------------------------------------------------------------------------
// 4. Default deny.

// defaultDenyReason is policy's: only endpoints whose host and port match
// can match the destination, so eps suffices.
func (m *Matcher) defaultDenyReason(eps []int32, r *policy.Request, paths *canonicalPaths) string {
	var entries []string
	for _, n := range eps {
		e := &m.eps[n]
		name := "network_policies." + e.key
		if e.scopeMatches(r, paths) && !slices.Contains(entries, name) {
			entries = append(entries, name)
		}
	}
	return policy.DefaultDenyReason(r, entries)
}
