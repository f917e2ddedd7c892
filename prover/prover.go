package prover

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/portcullis-dev/portcullis/policy"
)

// Finding kinds.
const (
	NewReach              = "new_reach"
	NewPath               = "new_path"
	NewHTTPMethod         = "new_http_method"
	NewMCPMethod          = "new_mcp_method"
	NewMCPTool            = "new_mcp_tool"
	NewMCPPrompt          = "new_mcp_prompt"
	NewMCPResource        = "new_mcp_resource"
	NewCredentialedReach  = "new_credentialed_reach"
	PrivateNetwork        = "private_network"
	WildcardWidening      = "wildcard_widening"
	ExceedsBoundary       = "exceeds_boundary"
	ArgumentsWidened      = "arguments_widened"
	EnforcementWeakened   = "enforcement_weakened"
	CloudMetadata         = "cloud_metadata"
	L7BypassCredentialed  = "l7_bypass_credentialed"
	RateLimitWidened      = "rate_limit_widened"
	ToolDefinitionChanged = policy.ToolDefinitionChanged
	MCPOAuthOpened        = "mcp_oauth_opened"
)

// L7Bypass is OpenShell's binary registry (crates/openshell-prover/registry/
// binaries) cut to the entries with a protocol marked bypasses_l7: binaries
// whose wire protocol the L7 proxy cannot inspect, by exact path, with why.
// A request from one of them that reaches a credentialed destination the
// binary could not reach before is l7_bypass_credentialed. The registry's
// other entries (claude, curl, gh, node, python3.13, wget) speak HTTP the
// proxy inspects.
var L7Bypass = map[string]string{
	"/usr/bin/git": "git smart HTTP through a CONNECT tunnel and git over SSH are not REST",
	"/usr/bin/ssh": "SSH is an encrypted tunnel (port forwarding, scp)",
	"/usr/bin/nc":  "netcat sends arbitrary data over raw TCP",
}

// l7Bypass lists the keys of L7Bypass in order.
var l7Bypass = func() []string {
	out := make([]string, 0, len(L7Bypass))
	for b := range L7Bypass {
		out = append(out, b)
	}
	sort.Strings(out)
	return out
}()

// HostPort is a destination.
type HostPort struct {
	Host string `json:"host"`
	Port int    `json:"port"`
}

// Options are the context of a proof.
type Options struct {
	// Boundary, when set, is the most the sandbox may ever get: what the
	// change adds beyond it is exceeds_boundary.
	Boundary *policy.Policy
	// Credentialed destinations carry credentials injected for the sandbox.
	Credentialed []HostPort
	// Now is the time expires_at is judged at (zero: time.Now()).
	Now time.Time
	// DevAllowLoopback proves as a proxy run with --dev-allow-loopback.
	DevAllowLoopback bool
	// Budget is the most work the proof may do, in work units (zero:
	// DefaultBudget); beyond it Prove returns a *TooComplexError.
	Budget int64
}

// Report is the outcome of a proof: no findings means the proposed policy
// allows nothing the current one denies (within the scope in doc.go).
type Report struct {
	Findings []Finding `json:"findings"`
	// Work is the work units the proof used (of Options.Budget).
	Work int64 `json:"-"`
}

// Finding is one kind of added access, where it comes from, and for
// request-level kinds a concrete request proving it.
type Finding struct {
	Kind string `json:"kind"`
	// Counterexample is allowed by the proposed policy and denied by the
	// current one (exceeds_boundary: denied by the boundary). Nil for
	// rule-level kinds.
	Counterexample *policy.Request `json:"counterexample,omitempty"`
	Entry          string          `json:"entry,omitempty"`    // network_policies key in the proposed policy
	Endpoint       string          `json:"endpoint,omitempty"` // policy.EndpointLabel
	Rule           string          `json:"rule,omitempty"`
	Detail         string          `json:"detail"`
	// Credentialed: the counterexample goes to a destination that carries
	// credentials injected for the sandbox (always, for
	// l7_bypass_credentialed).
	Credentialed bool `json:"credentialed,omitempty"`

	atoms []atom
}

// atom is one class of requests (all Decide cannot tell apart) in one
// destination group.
type atom struct {
	g   *group
	sig string
}

// Covers reports whether r belongs to one of the request classes the
// finding stands for. Every request of such a class gets the same
// decisions as the counterexample.
func (f *Finding) Covers(r policy.Request) bool {
	for _, a := range f.atoms {
		if sig, ok := a.g.signature(r); ok && sig == a.sig {
			return true
		}
	}
	return false
}

// Prove returns what proposed allows that current denies, plus the
// rule-level findings. It never samples: see doc.go for why it is exact.
//
// Every proof runs within a budget of work (Options.Budget, see budget.go):
// one that would need more returns a *TooComplexError (errors.Is
// ErrTooComplex) and no report, and a proof whose ctx is done returns the
// context's error. At most two proofs run at once in the
// process; the others wait for ctx.
func Prove(ctx context.Context, current, proposed *policy.Policy, opts Options) (rep *Report, err error) {
	if proposed == nil {
		return nil, fmt.Errorf("prover: no proposed policy")
	}
	if err := acquire(ctx); err != nil {
		return nil, err
	}
	defer release()
	m := newMeter(ctx, opts.Budget)
	defer func() {
		if r := recover(); r != nil {
			a, ok := r.(abort)
			if !ok {
				panic(r)
			}
			rep, err = nil, a.err
		}
	}()
	m.charge("proof", 0)
	if opts.Now.IsZero() {
		opts.Now = time.Now()
	}
	pr := &prover{opts: opts, m: m, cur: refsOf(current), prop: refsOf(proposed), bound: refsOf(opts.Boundary),
		findings: map[string]*Finding{}, proposed: proposed}
	m.charge("policy scan", len(pr.cur)+len(pr.prop)+len(pr.bound))
	for _, e := range changedEndpoints(pr.cur, pr.prop) {
		pr.proveGroup(e)
	}
	rep = &Report{}
	for _, f := range pr.findings {
		rep.Findings = append(rep.Findings, *f)
	}
	rep.Findings = append(rep.Findings, ruleFindings(m, pr.cur, pr.prop, current, proposed, opts.Now)...)
	sort.SliceStable(rep.Findings, func(i, j int) bool {
		a, b := rep.Findings[i], rep.Findings[j]
		if a.Kind != b.Kind {
			return a.Kind < b.Kind
		}
		if a.Entry != b.Entry {
			return a.Entry < b.Entry
		}
		if a.Endpoint != b.Endpoint {
			return a.Endpoint < b.Endpoint
		}
		if a.Rule != b.Rule {
			return a.Rule < b.Rule
		}
		return !a.Credentialed && b.Credentialed
	})
	rep.Work = m.used
	return rep, nil
}

// ref is one endpoint of a policy with its entry.
type ref struct {
	key   string
	entry *policy.NetworkPolicy
	index int
	ep    *policy.Endpoint
	// changed: no equal (entry binaries, endpoint) pair in the other policy.
	changed bool
}

// refsOf lists the endpoints of p in no particular order (sorting every
// key of a large policy was a good part of a proof): where the order shows
// (groups, sub-policies) the few refs concerned are put in document order
// by sortRefs.
func refsOf(p *policy.Policy) []ref {
	if p == nil {
		return nil
	}
	n := 0
	for _, e := range p.NetworkPolicies {
		if e != nil {
			n += len(e.Endpoints)
		}
	}
	out := make([]ref, 0, n)
	policy.EachEndpoint(p, func(key string, entry *policy.NetworkPolicy, i int, ep *policy.Endpoint) {
		out = append(out, ref{key: key, entry: entry, index: i, ep: ep})
	})
	return out
}

// sortRefs puts refs in document order: by entry key, then endpoint index.
func sortRefs(rs []*ref) {
	slices.SortFunc(rs, func(a, b *ref) int {
		if c := strings.Compare(a.key, b.key); c != 0 {
			return c
		}
		return a.index - b.index
	})
}

// changedEndpoints is the multiset difference, both ways, of (entry
// binaries, endpoint) pairs, marking the changed refs. Decide's verdict on
// a request depends only on the multiset of such pairs whose host and port
// match it (the deny phase and the candidates both filter on host and port
// first, and combine does not depend on order), so a request whose
// matching pairs are the same in both policies gets the same verdict from
// both: every added request matches the host and port of some changed
// endpoint. Pairs at the same place in both documents are compared first
// (the common case of a small change), the rest by fingerprint.
func changedEndpoints(cur, prop []ref) []*policy.Endpoint {
	type place struct {
		key   string
		index int
	}
	at := make(map[place]int, len(cur))
	for i, r := range cur {
		at[place{r.key, r.index}] = i
	}
	curDone := make([]bool, len(cur))
	for i := range prop {
		p := &prop[i]
		j, ok := at[place{p.key, p.index}]
		if ok && slices.Equal(cur[j].entry.Binaries, p.entry.Binaries) && endpointEqual(cur[j].ep, p.ep) {
			curDone[j] = true
			continue
		}
		p.changed = true
	}
	count := map[string]int{}
	for j := range cur {
		if !curDone[j] {
			cur[j].changed = true
			count[fingerprint(cur[j])]++
		}
	}
	for i := range prop {
		if prop[i].changed {
			count[fingerprint(prop[i])]--
		}
	}
	var out []*policy.Endpoint
	seen := map[string]bool{}
	for _, rs := range [][]ref{prop, cur} {
		var changed []*ref
		for i := range rs {
			r := &rs[i]
			if !r.changed {
				continue
			}
			if count[fingerprint(*r)] == 0 {
				r.changed = false
				continue
			}
			changed = append(changed, r)
		}
		sortRefs(changed)
		for _, r := range changed {
			// One group per destination (host, allowed_ips, ports).
			key := policy.NormalizeHost(r.ep.Host) + "|" + strings.Join(r.ep.AllowedIPs, ",") + "|" + fmt.Sprint(policy.EndpointPorts(r.ep))
			if !seen[key] {
				seen[key] = true
				out = append(out, r.ep)
			}
		}
	}
	return out
}

// fingerprint identifies an (entry binaries, endpoint) pair by content.
func fingerprint(r ref) string {
	bins := make([]string, 0, len(r.entry.Binaries))
	for _, b := range r.entry.Binaries {
		bins = append(bins, b.Path)
	}
	sort.Strings(bins)
	raw, _ := json.Marshal(r.ep)
	return strings.Join(bins, "\x00") + "\x01" + string(raw)
}

type prover struct {
	opts             Options
	m                *meter
	cur, prop, bound []ref
	findings         map[string]*Finding
	curGlobs         map[globUse]bool // currentUses
	proposed         *policy.Policy
}

// ---------------------------------------------------------------------------
// Destination groups.

// group is the part of the request space addressed to one changed
// endpoint's destination, with every endpoint (of the current, proposed
// and boundary policies) that may share a request with it, and the
// patterns those endpoints use.
type group struct {
	m                *meter
	dest             *policy.Endpoint
	dev              bool
	cur, prop, bound *policy.Policy
	curIdx, propIdx  map[string][]int // sub-policy endpoint index → original

	binPats, hostPats, pathPats, mcpMethodPats, toolPats []string
	promptPats, resourcePats                             []string
	ipLists                                              [][]string
	queryRules                                           []map[string]*policy.Matcher
	ports                                                []int
	methods                                              []string
	versions                                             []string
	hasMCP, hasQuery, aes, hasPreset                     bool
	// decideCost is what one policy.Decide on the group's sub-policies
	// is charged: their endpoints and rules.
	decideCost int
}

func hostsMayOverlap(a, b string) bool {
	a, b = policy.NormalizeHost(a), policy.NormalizeHost(b)
	if a == "" || b == "" || a == b {
		return true
	}
	if plainName(a) && plainName(b) {
		// Two exact DNS names (neither can be an IP spelling: a plain
		// name has a letter, a dash or an underscore in its last label)
		// match a common host only when equal.
		return false
	}
	ia, aIP := hostIP(a)
	ib, bIP := hostIP(b)
	if aIP || bIP {
		return aIP && bIP && ia == ib
	}
	// Wildcards (first-label, `**` and whole middle labels): exact.
	return policy.HostPatternsOverlap(a, b)
}

// plainName reports whether h is a wildcard-free DNS name that no IP
// spelling can be: ASCII letters, digits, '-', '_' and '.', with a
// non-hex-digit in its last label.
func plainName(h string) bool {
	last := h[strings.LastIndexByte(h, '.')+1:]
	nonHex := false
	for i := 0; i < len(h); i++ {
		c := h[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	for i := 0; i < len(last); i++ {
		if c := last[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c == 'x') {
			nonHex = true
		}
	}
	return nonHex
}

func portsOverlap(a, b *policy.Endpoint) bool {
	for _, p := range policy.EndpointPorts(a) {
		if hasPort(b, p) {
			return true
		}
	}
	return false
}

// hasPort is slices.Contains(policy.EndpointPorts(ep), port) without
// building a one-port slice.
func hasPort(ep *policy.Endpoint, port int) bool {
	if len(ep.Ports) > 0 {
		return slices.Contains(ep.Ports, port)
	}
	return ep.Port != 0 && ep.Port == port
}

// subPolicy keeps, entry by entry, the endpoints of refs relevant to dest;
// arguments_schema is dropped (arguments are judged by arguments_widened,
// see doc.go). It returns the sub-policy endpoint → original index map.
func (g *group) subPolicy(refs []ref, collect bool) (*policy.Policy, map[string][]int) {
	g.m.charge("sub-policies", len(refs))
	p := &policy.Policy{Version: 1, NetworkPolicies: map[string]*policy.NetworkPolicy{}}
	idx := map[string][]int{}
	var rel []*ref
	// The common case of hostsMayOverlap, two different plain names, is
	// decided here without normalising the destination again.
	na := policy.NormalizeHost(g.dest.Host)
	plainA := na != "" && plainName(na)
	for i := range refs {
		r := &refs[i]
		if !portsOverlap(g.dest, r.ep) {
			continue
		}
		if plainA {
			if nb := policy.NormalizeHost(r.ep.Host); nb != "" && nb != na && plainName(nb) {
				continue
			}
		}
		if hostsMayOverlap(g.dest.Host, r.ep.Host) {
			rel = append(rel, r)
		}
	}
	sortRefs(rel)
	for _, r := range rel {
		entry := p.NetworkPolicies[r.key]
		if entry == nil {
			entry = &policy.NetworkPolicy{Name: r.entry.Name, Binaries: r.entry.Binaries}
			p.NetworkPolicies[r.key] = entry
			if collect {
				for _, b := range r.entry.Binaries {
					g.binPats = append(g.binPats, b.Path)
				}
			}
		}
		ep := stripSchemas(r.ep)
		g.m.charge("sub-policies", 1+len(ep.Rules)+len(ep.DenyRules))
		g.decideCost += 1 + len(ep.Rules) + len(ep.DenyRules)
		entry.Endpoints = append(entry.Endpoints, ep)
		idx[r.key] = append(idx[r.key], r.index)
		if collect {
			g.collect(ep)
		}
	}
	return p, idx
}

func stripSchemas(ep *policy.Endpoint) *policy.Endpoint {
	has := false
	for _, r := range ep.Rules {
		if r.Allow != nil && r.Allow.ArgumentsSchema != nil {
			has = true
		}
	}
	if !has {
		return ep
	}
	c := *ep
	c.Rules = make([]policy.Rule, len(ep.Rules))
	for i, r := range ep.Rules {
		if r.Allow != nil && r.Allow.ArgumentsSchema != nil {
			a := *r.Allow
			a.ArgumentsSchema = nil
			r.Allow = &a
		}
		c.Rules[i] = r
	}
	return &c
}

func (g *group) collect(ep *policy.Endpoint) {
	if ep.Host != "" {
		g.hostPats = append(g.hostPats, ep.Host)
	}
	if len(ep.AllowedIPs) > 0 {
		g.ipLists = append(g.ipLists, ep.AllowedIPs)
	}
	g.ports = append(g.ports, policy.EndpointPorts(ep)...)
	if ep.Path != "" {
		g.pathPats = append(g.pathPats, ep.Path)
	}
	g.aes = g.aes || ep.AllowEncodedSlash
	g.hasPreset = g.hasPreset || ep.Access != ""
	if ep.Protocol == policy.ProtocolMCP {
		g.hasMCP = true
		if ep.MCP != nil {
			g.versions = append(g.versions, ep.MCP.Versions...)
		}
	}
	rules := slices.Clone(ep.DenyRules)
	for _, r := range ep.Rules {
		rules = append(rules, r.Allow)
	}
	for _, r := range rules {
		if r == nil {
			continue
		}
		if len(r.Query) > 0 {
			g.hasQuery = true
			g.queryRules = append(g.queryRules, r.Query)
		}
		if ep.Protocol == policy.ProtocolMCP {
			if r.Method != "" {
				g.mcpMethodPats = append(g.mcpMethodPats, r.Method)
			}
			for _, m := range []*policy.Matcher{r.Tool, r.Params["name"]} {
				if m != nil {
					g.toolPats = append(g.toolPats, m.Any...)
				}
			}
			if r.Prompt != nil {
				g.promptPats = append(g.promptPats, r.Prompt.Any...)
			}
			if r.Resource != nil {
				g.resourcePats = append(g.resourcePats, r.Resource.Any...)
			}
			continue
		}
		if r.Method != "" && r.Method != "*" {
			g.methods = append(g.methods, strings.ToUpper(r.Method))
		}
		if r.Path != "" {
			g.pathPats = append(g.pathPats, r.Path)
		}
	}
}

func uniq[T comparable](s []T) []T {
	seen := map[T]bool{}
	out := s[:0]
	for _, x := range s {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}

// specialMethods are the HTTP methods Decide treats apart in this group
// besides those rules name: the access presets' methods, MCP's GET, DELETE
// and POST, HEAD under a deny on GET.
func (g *group) specialMethods() []string {
	var out []string
	if g.hasPreset {
		out = append(out, "GET", "HEAD", "OPTIONS", "POST", "PUT", "PATCH")
	}
	if g.hasMCP {
		out = append(out, "GET", "DELETE", "POST")
	}
	if slices.Contains(g.methods, "GET") {
		out = append(out, "HEAD")
	}
	return out
}

// otherMethod is a method the group's signature has no bit for: it stands
// for every such method.
func (g *group) otherMethod() string {
	for _, m := range []string{"PROPFIND", "TRACE", "X-PORTCULLIS-OTHER"} {
		if !slices.Contains(g.methods, m) {
			return m
		}
	}
	return "X-PORTCULLIS-OTHER-2"
}

func (pr *prover) newGroup(dest *policy.Endpoint) *group {
	g := &group{m: pr.m, dest: dest, dev: pr.opts.DevAllowLoopback}
	g.cur, g.curIdx = g.subPolicy(pr.cur, true)
	g.prop, g.propIdx = g.subPolicy(pr.prop, true)
	if pr.opts.Boundary != nil {
		g.bound, _ = g.subPolicy(pr.bound, true)
	}
	g.methods = append(g.methods, g.specialMethods()...)
	// Credentialed hosts are classes of their own, so that a wildcard
	// reaching one yields it as a counterexample; so are the L7-bypassing
	// binaries an entry of the group may name (a glob, or no binaries at
	// all), so that a glob admitting one yields it.
	credPort := false
	for _, c := range pr.opts.Credentialed {
		if hasPort(dest, c.Port) {
			g.hostPats = append(g.hostPats, c.Host)
			credPort = true
		}
	}
	if credPort {
		g.binPats = append(g.binPats, g.bypassBinaries()...)
	}
	sort.Strings(g.binPats)
	sort.Strings(g.hostPats)
	sort.Strings(g.pathPats)
	sort.Strings(g.mcpMethodPats)
	sort.Strings(g.toolPats)
	sort.Strings(g.promptPats)
	sort.Strings(g.resourcePats)
	sort.Strings(g.methods)
	sort.Strings(g.versions)
	slices.Sort(g.ports)
	g.binPats, g.hostPats, g.pathPats = uniq(g.binPats), uniq(g.hostPats), uniq(g.pathPats)
	g.mcpMethodPats, g.toolPats, g.methods = uniq(g.mcpMethodPats), uniq(g.toolPats), uniq(g.methods)
	g.promptPats, g.resourcePats = uniq(g.promptPats), uniq(g.resourcePats)
	g.versions, g.ports = uniq(g.versions), uniq(g.ports)
	return g
}

// bypassBinaries are the L7Bypass binaries an entry of the group's proposed
// sub-policy admits (by a binary glob, or by naming no binaries).
func (g *group) bypassBinaries() []string {
	var out []string
	for _, b := range l7Bypass {
		admitted := false
		for _, e := range g.prop.NetworkPolicies {
			g.m.charge("sub-policies", 1+len(e.Binaries))
			admitted = admitted || len(e.Binaries) == 0
			for _, p := range e.Binaries {
				admitted = admitted || policy.MatchGlob(p.Path, b)
			}
		}
		if admitted {
			out = append(out, b)
		}
	}
	return out
}

// ---------------------------------------------------------------------------
// Signatures: every predicate Decide evaluates on a request of the group.

func bit(sb *strings.Builder, b bool) {
	if b {
		sb.WriteByte('1')
	} else {
		sb.WriteByte('0')
	}
}

func cleanAbsolute(p string) bool { return strings.HasPrefix(p, "/") && path.Clean(p) == p }

func destAddr(r policy.Request) (netip.Addr, bool) {
	if r.Addr.IsValid() {
		return r.Addr.Unmap().WithZone(""), true
	}
	return policy.ParseHostIP(r.Host)
}

// inDest reports whether r is addressed to the group's destination.
func (g *group) inDest(r policy.Request) bool {
	if !hasPort(g.dest, r.Port) {
		return false
	}
	if g.dest.Host == "" {
		a, ok := destAddr(r)
		return ok && len(g.dest.AllowedIPs) > 0 && allowedIPsContains(g.dest.AllowedIPs, a)
	}
	return policy.MatchHost(g.dest.Host, r.Host)
}

// destSig is the destination part of the signature: binary, host, address
// and port.
func (g *group) destSig(r policy.Request) string {
	return g.binSig(r.Binary) + "|" + g.hostAddrSig(r)
}

// binSig is the binary's part of the signature.
func (g *group) binSig(binary string) string {
	var sb strings.Builder
	clean := cleanAbsolute(binary)
	for _, b := range g.binPats {
		bit(&sb, clean && policy.MatchGlob(b, binary))
	}
	return sb.String()
}

// hostAddrSig is the host, address and port part of the signature.
func (g *group) hostAddrSig(r policy.Request) string {
	var sb strings.Builder
	for _, h := range g.hostPats {
		bit(&sb, policy.MatchHost(h, r.Host))
	}
	bit(&sb, strings.TrimSpace(r.Host) == "")
	bit(&sb, policy.IsMetadataHost(r.Host))
	bit(&sb, policy.IsLoopbackName(r.Host))
	literal, isLiteral := policy.ParseHostIP(r.Host)
	bit(&sb, isLiteral)
	sb.WriteByte('|')
	a, ok := destAddr(r)
	bit(&sb, ok)
	if ok {
		for _, l := range g.ipLists {
			bit(&sb, allowedIPsContains(l, a))
		}
		bit(&sb, policy.IsPrivate(a))
		_, denied := policy.AlwaysDenied(a, g.dev)
		bit(&sb, denied)
		if isLiteral {
			_, denied := policy.AlwaysDenied(literal, g.dev)
			bit(&sb, denied)
		}
		bit(&sb, r.Addr.IsValid() && isLiteral && literal != r.Addr.Unmap().WithZone(""))
	}
	sb.WriteByte('|')
	sb.WriteString(strconv.Itoa(r.Port))
	return sb.String()
}

// l7Sig is the part of the signature from the HTTP method, path and MCP
// message.
func (g *group) l7Sig(r policy.Request) string { return g.l7SigMemo(r, nil) }

// l7SigMemo is l7Sig, taking the path part of the signature from
// pathSigs (by path; read only) when it is there.
func (g *group) l7SigMemo(r policy.Request, pathSigs map[string]string) string {
	var sb strings.Builder
	m := strings.ToUpper(r.HTTPMethod)
	if m == "" {
		return "-"
	}
	for _, x := range g.methods {
		bit(&sb, m == x)
	}
	sb.WriteByte('|')
	if ps, ok := pathSigs[r.Path]; ok {
		sb.WriteString(ps)
	} else {
		sb.WriteString(g.pathSig(r.Path))
	}
	if g.hasQuery {
		sb.WriteString("|q=" + strconv.Quote(r.Query))
	}
	if !g.hasMCP {
		return sb.String()
	}
	sb.WriteByte('|')
	bit(&sb, r.MCP == nil)
	if r.MCP == nil {
		return sb.String()
	}
	msg := r.MCP
	bit(&sb, msg.Response)
	if msg.Response {
		return sb.String()
	}
	bit(&sb, msg.Method == "")
	bit(&sb, policy.IsKnownMCPMethod(msg.Method))
	for _, p := range g.mcpMethodPats {
		bit(&sb, policy.MatchGlob(p, msg.Method))
		bit(&sb, policy.MatchDenyGlob(p, msg.Method))
	}
	if msg.Method == "tools/call" {
		sb.WriteByte('|')
		bit(&sb, msg.Tool == "")
		bit(&sb, policy.ValidToolName(msg.Tool))
		for _, t := range g.toolPats {
			bit(&sb, policy.MatchGlob(t, msg.Tool))
			bit(&sb, t == msg.Tool)
		}
		args := strings.TrimSpace(string(msg.Arguments))
		bit(&sb, args != "" && !json.Valid(msg.Arguments))
	}
	if msg.Method == "prompts/get" {
		sb.WriteByte('|')
		bit(&sb, msg.Prompt == "")
		for _, p := range g.promptPats {
			bit(&sb, policy.MatchGlob(p, msg.Prompt))
			bit(&sb, policy.MatchDenyGlob(p, msg.Prompt))
		}
	}
	if policy.IsResourceMethod(msg.Method) {
		sb.WriteByte('|')
		bit(&sb, msg.Resource == "")
		bit(&sb, policy.PlainResourceURI(msg.Resource) == nil)
		for _, p := range g.resourcePats {
			bit(&sb, policy.MatchResource(p, msg.Resource))
			bit(&sb, policy.MatchDenyResource(p, msg.Resource))
		}
	}
	sb.WriteByte('|')
	v := msg.ProtocolVersion
	bit(&sb, v == "")
	bit(&sb, v == policy.DefaultMCPVersion)
	for _, x := range g.versions {
		bit(&sb, v == x)
	}
	return sb.String()
}

// pathSig is the path part of l7Sig.
func (g *group) pathSig(p string) string {
	var sb strings.Builder
	for _, aes := range []bool{false, true} {
		if aes && !g.aes {
			break
		}
		c, err := policy.CanonicalPath(p, aes)
		bit(&sb, err != nil)
		if err == nil {
			for _, p := range g.pathPats {
				bit(&sb, policy.MatchGlob(p, c))
				bit(&sb, policy.MatchDenyPath(p, c))
			}
		}
	}
	return sb.String()
}

// pathSigTable is pathSig of every path candidate. Both depend only on
// the group's path patterns and whether one of its endpoints allows
// encoded slashes, so the table is remembered by those (and is read
// only).
func (g *group) pathSigTable() map[string]string {
	kind := "pathsig"
	if g.aes {
		kind += "%2F"
	}
	return cached(kind, g.pathPats, func() map[string]string {
		t := map[string]string{}
		for _, p := range g.pathCandidates() {
			g.m.charge(stageCandidates, 8*len(g.pathPats)*(len(p)+1)+len(p))
			t[p] = g.pathSig(p)
		}
		return t
	})
}

// signature names the class of r in the group; ok is false when r is not
// addressed to the group's destination.
func (g *group) signature(r policy.Request) (string, bool) {
	if !g.inDest(r) {
		return "", false
	}
	return g.destSig(r) + "#" + g.l7Sig(r), true
}
