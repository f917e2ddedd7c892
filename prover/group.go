package prover

import (
	"slices"
	"sort"
	"strings"

	"github.com/portcullis-dev/portcullis/policy"
)

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

// credMayMeet reports whether a request to the destination host pattern
// dest may go to the credentialed host cred (HostPort.Covers): false only
// when both are valid patterns that no host matches together.
func credMayMeet(dest, cred string) bool {
	if policy.ValidHostPattern(dest) != nil || policy.ValidHostPattern(cred) != nil {
		return true
	}
	return hostsMayOverlap(dest, cred)
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
	// Credentialed hosts (exact or patterns) are classes of their own, so
	// that a wildcard reaching one, or an endpoint inside a credentialed
	// pattern, yields a concrete credentialed host as a counterexample; so
	// are the L7-bypassing binaries an entry of the group may name (a
	// glob, or no binaries at all), so that a glob admitting one yields
	// it. A credentialed host no request of the group can go to adds
	// nothing.
	credPort := false
	for _, c := range pr.opts.Credentialed {
		if hasPort(dest, c.Port) && credMayMeet(dest.Host, c.Host) {
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
