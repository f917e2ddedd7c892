package prover

import (
	"fmt"
	"net/netip"
	"net/url"
	"slices"
	"strings"

	"github.com/portcullis-dev/portcullis/policy"
)

// Candidate requests: for each dimension, witnesses of every class the
// group's patterns realise (automata.go), then one request per class of
// the product (deduplicated by signature).

func (g *group) binaryCandidates() []string {
	ws := cachedWitnesses(g.m, "bin", g.binPats, func() (domain, []*nfa) {
		ms := make([]*nfa, 0, len(g.binPats))
		for _, b := range g.binPats {
			ms = append(ms, narrowGlob(b))
		}
		return cleanBinaries, ms
	})
	return append([]string{""}, ws...)
}

type hostAddr struct {
	host string
	addr netip.Addr
}

func (g *group) hostCandidates() []hostAddr {
	var ips []netip.Addr
	for _, h := range g.hostPats {
		if a, ok := hostIP(h); ok {
			ips = append(ips, a)
		}
	}
	ws := cachedWitnesses(g.m, "host", g.hostPats, func() (domain, []*nfa) {
		var ms []*nfa
		for _, h := range g.hostPats {
			if _, ok := hostIP(h); ok {
				continue
			}
			if m := hostNFA(h); m != nil {
				ms = append(ms, m)
			}
		}
		// Names that policy helpers single out are matched literally too.
		for _, n := range []string{"localhost", "metadata.google.internal"} {
			ms = append(ms, literalNFA(n))
		}
		return dnsNames, ms
	})
	var names []string
	for _, w := range ws {
		if _, isIP := policy.ParseHostIP(w); !isIP {
			names = append(names, w)
		}
	}
	for _, l := range g.ipLists {
		g.m.charge(stageCandidates, 4*len(l))
	}
	addrs := addressCandidates(g.ipLists, ips)
	g.m.charge(stageCandidates, len(addrs)*(len(g.ipLists)+1))
	var out []hostAddr
	for _, n := range names {
		g.m.charge(stageCandidates, (len(addrs)+1)*(len(n)+8))
		out = append(out, hostAddr{host: n})
		for _, a := range addrs {
			out = append(out, hostAddr{host: n, addr: a})
		}
	}
	for _, a := range addrs {
		// An IP-literal host, and a request naming only an address.
		out = append(out, hostAddr{host: a.String()}, hostAddr{addr: a})
	}
	return out
}

func (g *group) pathCandidates() []string {
	ms := func(encodedSlashes bool) []*nfa {
		ms := make([]*nfa, 0, 2*len(g.pathPats))
		for _, p := range g.pathPats {
			ms = append(ms, narrowGlob(p), widePath(p, encodedSlashes))
		}
		return ms
	}
	out := append(cachedWitnesses(g.m, "path", g.pathPats, func() (domain, []*nfa) { return canonicalPaths, ms(false) }), "/%zz")
	if g.aes {
		out = append(out, cachedWitnesses(g.m, "path%2F", g.pathPats, func() (domain, []*nfa) { return encodedSlashPaths, ms(true) })...)
	}
	return out
}

func (g *group) mcpMessages() []*policy.MCPMessage {
	methods := append(cachedWitnesses(g.m, "mcp-method", g.mcpMethodPats, func() (domain, []*nfa) {
		ms := make([]*nfa, 0, 2*len(g.mcpMethodPats)+len(knownMethods))
		for _, p := range g.mcpMethodPats {
			ms = append(ms, narrowGlob(p), wideGlob(p))
		}
		for _, m := range knownMethods {
			ms = append(ms, literalNFA(m))
		}
		return anyString, ms
	}), "")
	tools := append(cachedWitnesses(g.m, "tool", g.toolPats, func() (domain, []*nfa) {
		ts := []*nfa{toolCharsNFA()}
		for _, t := range g.toolPats {
			ts = append(ts, narrowGlob(t), literalNFA(t))
		}
		return anyString, ts
	}), "")
	prompts := g.promptCandidates()
	resources := g.resourceCandidates()
	versions := append([]string{"", policy.DefaultMCPVersion, "1999-01-01"}, g.versions...)
	out := []*policy.MCPMessage{{Response: true}}
	for _, m := range methods {
		for _, v := range versions {
			g.m.charge(stageCandidates, 8+len(m)+len(v))
			switch {
			case m == "prompts/get":
				for _, p := range prompts {
					g.m.charge(stageCandidates, 8+len(p))
					g.m.hold(stageCandidates, 96)
					out = append(out, &policy.MCPMessage{Method: m, Prompt: p, ProtocolVersion: v})
				}
				continue
			case policy.IsResourceMethod(m):
				for _, u := range resources {
					g.m.charge(stageCandidates, 8+len(u))
					g.m.hold(stageCandidates, 96)
					out = append(out, &policy.MCPMessage{Method: m, Resource: u, ProtocolVersion: v})
				}
				continue
			case m != "tools/call":
				out = append(out, &policy.MCPMessage{Method: m, ProtocolVersion: v})
				continue
			}
			for _, t := range tools {
				g.m.charge(stageCandidates, 8+len(t))
				g.m.hold(stageCandidates, 96)
				// Pins are judged apart (tool_definition_changed).
				out = append(out, &policy.MCPMessage{Method: m, Tool: t, ProtocolVersion: v, AnyDefinition: true})
			}
		}
	}
	return out
}

// promptCandidates are the prompt names tried: one per combination of
// the group's prompt globs matching narrowly and widely, and "".
func (g *group) promptCandidates() []string {
	return append(cachedWitnesses(g.m, "prompt", g.promptPats, func() (domain, []*nfa) {
		ms := make([]*nfa, 0, 2*len(g.promptPats))
		for _, p := range g.promptPats {
			ms = append(ms, narrowGlob(p), wideGlob(p))
		}
		return anyString, ms
	}), "")
}

// resourceCandidates are the resource URIs tried: one per combination of
// being plain and of the group's resource globs matching in their allow
// (narrow) and deny (wide, case-folded) readings, and "".
func (g *group) resourceCandidates() []string {
	return append(cachedWitnesses(g.m, "resource", g.resourcePats, func() (domain, []*nfa) {
		ms := make([]*nfa, 0, 1+2*len(g.resourcePats))
		ms = append(ms, plainURINFA())
		for _, p := range g.resourcePats {
			ms = append(ms, narrowGlob(p), foldCase(wideGlob(p)))
		}
		return anyString, ms
	}), "")
}

// knownMethods is the allow_all_known_mcp_methods profile; each method
// is a class of its own.
var knownMethods = policy.KnownMCPMethods()

// l7 is the L7 part of a candidate request.
type l7 struct {
	method, path, query string
	mcp                 *policy.MCPMessage
}

// queryCandidates are the query strings tried. Not exact (see doc.go):
// no query, each rule's matchers satisfied on their own, all rules'
// matchers satisfied at once, and each named parameter with a value no
// glob matches.
func (g *group) queryCandidates() []string {
	out := []string{""}
	if !g.hasQuery {
		return out
	}
	all := url.Values{}
	miss := url.Values{}
	for _, rule := range g.queryRules {
		one := url.Values{}
		for name, m := range rule {
			v := "x"
			if m != nil && len(m.Any) > 0 {
				v = g.globWitness(m.Any[0])
			}
			one.Set(name, v)
			all.Set(name, v)
			miss.Set(name, "\x01no-match")
		}
		out = append(out, one.Encode())
	}
	return append(out, all.Encode(), miss.Encode())
}

// globWitness returns a string the glob matches in its query reading
// (`*` crossing '/', `{a,b}` alternatives: policy.ExpandQueryGlob).
func (g *group) globWitness(glob string) string {
	alts, ok := policy.ExpandQueryGlob(glob)
	if !ok || len(alts) == 0 {
		return glob
	}
	for _, alt := range alts {
		a := charsGlob(alt)
		for _, w := range cachedWitnesses(g.m, "query", []string{alt}, func() (domain, []*nfa) { return anyString, []*nfa{a} }) {
			if run(a, w) {
				return w
			}
		}
	}
	return alts[0]
}

func run(a *nfa, s string) bool {
	set := a.closure([]int{a.start})
	for i := 0; i < len(s); i++ {
		set = a.step(set, s[i])
	}
	return a.accepts(set)
}

func (g *group) l7Candidates() []l7 {
	out := []l7{{}}
	paths := g.pathCandidates()
	queries := g.queryCandidates()
	cost := g.l7SigCost()
	for _, m := range append(slices.Clone(g.methods), g.otherMethod()) {
		for _, p := range paths {
			for _, q := range queries {
				g.m.charge(stageCandidates, cost+len(p)+len(q))
				g.m.hold(stageCandidates, 128)
				out = append(out, l7{method: m, path: p, query: q})
			}
		}
	}
	if g.hasMCP {
		// Messages with every method, not only POST: a GET carrying a
		// message is refused by the MCP rules but still meets the deny
		// rules, and audit mode can let it through.
		msgs := g.mcpMessages()
		for _, m := range append(slices.Clone(g.methods), g.otherMethod()) {
			for _, p := range paths {
				for _, msg := range msgs {
					g.m.charge(stageCandidates, cost+len(p)+len(msg.Tool)+len(msg.Prompt)+len(msg.Resource))
					g.m.hold(stageCandidates, 128)
					out = append(out, l7{method: m, path: p, mcp: msg})
				}
			}
		}
	}
	return out
}

// l7SigCost is what building one L7 signature is charged: a unit per
// bit.
func (g *group) l7SigCost() int {
	return 8 + len(g.methods) + 4*len(g.pathPats) + 2*len(g.mcpMethodPats) + 2*len(g.toolPats) +
		2*len(g.promptPats) + 2*len(g.resourcePats) + len(g.versions)
}

const (
	stageCandidates = "candidate requests"
	stageDecide     = "judging of candidate requests"
)

// outcome of one candidate class.
type verdict struct {
	r                policy.Request
	sig              string
	cur, prop, bound policy.Decision
}

func (pr *prover) proveGroup(dest *policy.Endpoint) {
	defer pr.m.release(pr.m.mark())
	g := pr.newGroup(dest)
	// Destination classes.
	type destClass struct {
		r   policy.Request
		sig string
	}
	// The binary and the (host, address, port) parts of the signature are
	// independent: classes of each, then their product.
	var dests []destClass
	var bins, binSigs []string
	seen := map[string]bool{}
	for _, b := range g.binaryCandidates() {
		g.m.charge(stageCandidates, 1+len(g.binPats))
		if s := g.binSig(b); !seen[s] {
			seen[s] = true
			bins, binSigs = append(bins, b), append(binSigs, s)
		}
	}
	hosts := g.hostCandidates()
	for _, port := range policy.EndpointPorts(dest) {
		if port < 1 || port > 65535 || policy.DeniedPort(port) {
			continue
		}
		for _, h := range hosts {
			g.m.charge(stageCandidates, 8+len(g.hostPats)+len(g.ipLists))
			r := policy.Request{Host: h.host, Addr: h.addr, Port: port, Time: pr.opts.Now, DevAllowLoopback: pr.opts.DevAllowLoopback}
			if !g.inDest(r) || alwaysDenied(r) {
				continue
			}
			hs := g.hostAddrSig(r)
			if seen["h"+hs] {
				continue
			}
			seen["h"+hs] = true
			for i, b := range bins {
				g.m.charge(stageCandidates, 4+len(binSigs[i])+len(hs))
				g.m.hold(stageCandidates, 2*(len(binSigs[i])+len(hs))+256)
				r.Binary = b
				dests = append(dests, destClass{r, binSigs[i] + "|" + hs})
			}
		}
	}
	if len(dests) == 0 {
		return
	}
	// L7 classes.
	var l7s []l7
	var l7sigs []string
	seenL7 := map[string]bool{}
	probe := dests[0].r
	pathSigs := g.pathSigTable()
	l7Cost := g.l7SigCost()
	for _, c := range g.l7Candidates() {
		g.m.charge(stageCandidates, l7Cost)
		g.m.hold(stageCandidates, 2*l7Cost+64)
		probe.HTTPMethod, probe.Path, probe.Query, probe.MCP = c.method, c.path, c.query, c.mcp
		s := g.l7SigMemo(probe, pathSigs)
		if !seenL7[s] {
			seenL7[s] = true
			l7s = append(l7s, c)
			l7sigs = append(l7sigs, s)
		}
	}
	// The proposed policy first: only where it allows does the current
	// one need asking. Then, for destinations with added requests, the
	// current policy's reach there (for the finding kinds). A
	// destination's added requests are classified as soon as it is
	// judged, so the verdicts held at once are one destination's.
	var added []verdict
	curAllow := make([]int8, len(l7s)) // the current policy's verdicts already known at this dest: 1 allow, -1 deny
	for _, d := range dests {
		g.m.charge(stageDecide, g.decideCost)
		if alwaysDenied(d.r) || !mayAllow(g.prop, d.r) {
			continue
		}
		clear(curAllow)
		held := g.m.mark()
		added = added[:0]
		for li, c := range l7s {
			r := d.r
			r.HTTPMethod, r.Path, r.Query, r.MCP = c.method, c.path, c.query, c.mcp
			g.m.charge(stageDecide, g.decideCost)
			prop := policy.Decide(g.prop, r)
			if !prop.Allow {
				continue
			}
			g.m.charge(stageDecide, g.decideCost)
			cur := policy.Decide(g.cur, r)
			if cur.Allow {
				curAllow[li] = 1
				continue
			}
			curAllow[li] = -1
			v := verdict{r: r, sig: d.sig + "#" + l7sigs[li], cur: cur, prop: prop}
			g.m.charge(stageDecide, len(v.sig)+g.decideCost)
			g.m.hold(stageDecide, 2*len(v.sig)+512)
			if g.bound != nil {
				v.bound = policy.Decide(g.bound, r)
			}
			added = append(added, v)
		}
		if len(added) == 0 {
			continue
		}
		// What the finding kinds below ask of this destination: whether
		// the current policy reaches it at all, allows the methods of the
		// added requests (without an MCP message) and some tools/call.
		// Requests that cannot change an answer asked for are not judged.
		reach := destReach{methods: map[string]bool{}, named: map[string]bool{}} // methods: allowed somewhere (no MCP message); only where asked
		needMethod := map[string]bool{}
		needNamed := map[string]bool{} // tools/call, prompts/get, resources/*: some call of the method
		for _, v := range added {
			needMethod[v.r.HTTPMethod] = true
			if v.r.MCP != nil && namesSomething(v.r.MCP.Method) {
				needNamed[v.r.MCP.Method] = true
			}
		}
		for li, c := range l7s {
			if reach.any {
				switch {
				case c.mcp == nil:
					if !needMethod[c.method] || reach.methods[c.method] {
						continue
					}
				case namesSomething(c.mcp.Method):
					if !needNamed[c.mcp.Method] || reach.named[c.mcp.Method] {
						continue
					}
				default:
					continue
				}
			}
			if curAllow[li] == 0 {
				r := d.r
				r.HTTPMethod, r.Path, r.Query, r.MCP = c.method, c.path, c.query, c.mcp
				curAllow[li] = -1
				g.m.charge(stageDecide, g.decideCost)
				if policy.Decide(g.cur, r).Allow {
					curAllow[li] = 1
				}
			}
			if curAllow[li] < 0 {
				continue
			}
			reach.any = true
			if c.mcp == nil {
				reach.methods[c.method] = true
			} else if namesSomething(c.mcp.Method) {
				reach.named[c.mcp.Method] = true
			}
		}
		// The verdicts go; what the findings keep of them (a signature
		// each) stays held until the group is done.
		kept := 0
		for _, v := range added {
			kept += pr.classify(g, v, reach)
		}
		g.m.release(held)
		g.m.hold(stageDecide, kept)
	}
}

// destReach is what the current policy allows at one destination, as far
// as the finding kinds ask.
type destReach struct {
	any     bool            // some request
	methods map[string]bool // METHOD (no MCP message) on some path
	named   map[string]bool // some call of an MCP method that names something (namesSomething)
}

// namesSomething reports whether an MCP method names what it acts on, so
// that a rule can allow some of its calls and not others: tools/call (a
// tool), prompts/get (a prompt) and the resources methods (a URI).
func namesSomething(method string) bool {
	return method == "tools/call" || method == "prompts/get" || policy.IsResourceMethod(method)
}

// classify turns one added request into its findings and returns the
// bytes the findings keep of it.
func (pr *prover) classify(g *group, v verdict, reach destReach) int {
	// Locating the rule and the findings' lookups scan the proposed
	// and current policies.
	g.m.charge(stageDecide, 4*g.decideCost+len(pr.prop)+len(pr.cur))
	kind, detail := NewReach, ""
	r := v.r
	post := r.MCP != nil && strings.EqualFold(r.HTTPMethod, "POST")
	switch {
	case !reach.any:
		detail = "the binary could not reach this destination before"
		if pr.credentialed(r) {
			kind = NewCredentialedReach
		}
	case post && !r.MCP.Response && r.MCP.Method == "tools/call" && reach.named[r.MCP.Method]:
		kind, detail = NewMCPTool, "tools/call "+r.MCP.Tool+" was not allowed"
	case post && !r.MCP.Response && r.MCP.Method == "prompts/get" && reach.named[r.MCP.Method]:
		kind, detail = NewMCPPrompt, "prompts/get "+r.MCP.Prompt+" was not allowed"
	case post && !r.MCP.Response && policy.IsResourceMethod(r.MCP.Method) && reach.named[r.MCP.Method]:
		kind, detail = NewMCPResource, r.MCP.Method+" "+r.MCP.Resource+" was not allowed"
	case post:
		kind, detail = NewMCPMethod, "MCP method "+r.MCP.Method+" was not allowed"
	case r.HTTPMethod != "" && reach.methods[r.HTTPMethod]:
		kind, detail = NewPath, r.HTTPMethod+" was allowed on other paths only"
	case r.HTTPMethod != "":
		kind, detail = NewHTTPMethod, "HTTP "+r.HTTPMethod+" was not allowed"
	default:
		detail = "uninspected (L4) requests were not allowed"
	}
	if pr.credentialed(r) {
		detail += fmt.Sprintf("; on credentialed destination %s:%d", r.Host, r.Port)
	}
	entry, ep, epLabel, rule := pr.locate(g, v.prop)
	v = pr.withArguments(v, ep, rule)
	n := 0
	add := func(kind, detail string) {
		pr.add(kind, entry, epLabel, rule, detail, v, g)
		n++
	}
	add(kind, detail)
	// OpenShell's l7_bypass_credentialed: a binary whose wire protocol
	// the L7 proxy cannot inspect gains reach to a credentialed
	// destination. Reported beside new_credentialed_reach (OpenShell
	// reports the bypass category instead), so that rules keyed on
	// new_credentialed_reach still see the reach.
	if why, ok := L7Bypass[r.Binary]; ok && kind == NewCredentialedReach {
		add(L7BypassCredentialed, fmt.Sprintf("%s bypasses L7 inspection (%s) and could not reach credentialed destination %s:%d before", r.Binary, why, r.Host, r.Port))
	}
	if a, ok := destAddr(r); ok && !reach.any && policy.IsPrivate(a) && ep != nil && len(ep.AllowedIPs) > 0 {
		add(PrivateNetwork, fmt.Sprintf("private address %s reachable through allowed_ips %v", a, ep.AllowedIPs))
	}
	if why := pr.widening(entry, ep, rule, r); why != "" {
		add(WildcardWidening, why)
	}
	if g.bound != nil && !v.bound.Allow {
		add(ExceedsBoundary, "the boundary denies it: "+v.bound.Reason)
	}
	// The signature string is shared by the atoms; each atom is a
	// pointer and a string header.
	return len(v.sig) + 32*n
}

// mayAllow reports whether some endpoint of p could allow a request to
// r's destination from r's binary: Decide allows only through a candidate
// whose host, port and binary match and whose address rules pass (path
// scopes are ignored here, so this over-approximates).
func mayAllow(p *policy.Policy, r policy.Request) bool {
	addr, known := destAddr(r)
	for _, e := range p.NetworkPolicies {
		if len(e.Binaries) > 0 {
			ok := false
			if cleanAbsolute(r.Binary) {
				for _, b := range e.Binaries {
					ok = ok || policy.MatchGlob(b.Path, r.Binary)
				}
			}
			if !ok {
				continue
			}
		}
		for _, ep := range e.Endpoints {
			if !hasPort(ep, r.Port) {
				continue
			}
			if ep.Host == "" {
				if !known || len(ep.AllowedIPs) == 0 || !allowedIPsContains(ep.AllowedIPs, addr) {
					continue
				}
			} else if !policy.MatchHost(ep.Host, r.Host) {
				continue
			}
			if known && (len(ep.AllowedIPs) > 0 && !allowedIPsContains(ep.AllowedIPs, addr) || len(ep.AllowedIPs) == 0 && policy.IsPrivate(addr)) {
				continue
			}
			return true
		}
	}
	return false
}

// withArguments gives a tools/call counterexample arguments the allowing
// rule's arguments_schema accepts (schemas are dropped while judging), when
// the proposed policy would otherwise refuse the bare call.
func (pr *prover) withArguments(v verdict, ep *policy.Endpoint, rule string) verdict {
	r := v.r
	if r.MCP == nil || r.MCP.Method != "tools/call" || ep == nil || policy.Decide(pr.proposed, r).Allow {
		return v
	}
	i, ok := ruleIndex(rule)
	if !ok || i < 0 || i >= len(ep.Rules) || ep.Rules[i].Allow == nil {
		return v
	}
	m := *r.MCP
	m.Arguments = marshalArgs(schemaInstance(ep.Rules[i].Allow.ArgumentsSchema, 0))
	r.MCP = &m
	if policy.Decide(pr.proposed, r).Allow {
		v.r = r
	}
	return v
}

// alwaysDenied is Decide's first step: destinations no policy can open
// (nothing to prove there).
func alwaysDenied(r policy.Request) bool {
	if policy.IsMetadataHost(r.Host) || policy.IsLoopbackName(r.Host) && !r.DevAllowLoopback {
		return true
	}
	if a, ok := policy.ParseHostIP(r.Host); ok {
		if _, denied := policy.AlwaysDenied(a, r.DevAllowLoopback); denied {
			return true
		}
	}
	if r.Addr.IsValid() {
		if _, denied := policy.AlwaysDenied(r.Addr, r.DevAllowLoopback); denied {
			return true
		}
	}
	return false
}

func (pr *prover) credentialed(r policy.Request) bool {
	for _, c := range pr.opts.Credentialed {
		if c.Port != r.Port {
			continue
		}
		ca, cIP := hostIP(c.Host)
		ra, rIP := policy.ParseHostIP(r.Host)
		if cIP && rIP && ca == ra || !cIP && !rIP && policy.NormalizeHost(c.Host) == policy.NormalizeHost(r.Host) {
			return true
		}
	}
	return false
}

// locate maps the proposed decision back to the proposed document.
func (pr *prover) locate(g *group, d policy.Decision) (entry string, ep *policy.Endpoint, label, rule string) {
	if d.Entry == "" || d.Endpoint < 0 || d.Endpoint >= len(g.propIdx[d.Entry]) {
		return d.Entry, nil, "", d.Rule
	}
	idx := g.propIdx[d.Entry][d.Endpoint]
	for _, r := range pr.prop {
		if r.key == d.Entry && r.index == idx {
			return d.Entry, r.ep, policy.EndpointLabel(r.ep), d.Rule
		}
	}
	return d.Entry, nil, "", d.Rule
}

// ruleIndex reads i from a rule named "rules[i]", as
// fmt.Sscanf(rule, "rules[%d]", &i) does (the plain spelling without
// fmt; anything else goes to Sscanf).
func ruleIndex(rule string) (int, bool) {
	if rest, ok := strings.CutPrefix(rule, "rules["); ok {
		n, i := 0, 0
		for i < len(rest) && i < 9 && rest[i] >= '0' && rest[i] <= '9' {
			n = n*10 + int(rest[i]-'0')
			i++
		}
		if i > 0 && i < 9 && i < len(rest) && rest[i] == ']' {
			return n, true
		}
	}
	var i int
	_, err := fmt.Sscanf(rule, "rules[%d]", &i)
	return i, err == nil
}

// hasGlob reports whether s holds an unescaped `*`, `?` or `[`: an exact
// name with its metacharacters escaped (as the advisor writes a denied
// name) is no wildcard.
func hasGlob(s string) bool {
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '*', '?', '[':
			return true
		}
	}
	return false
}

// widening names a glob the allowing endpoint, entry or rule uses that the
// current policy does not use in the same place.
func (pr *prover) widening(entry string, ep *policy.Endpoint, rule string, r policy.Request) string {
	if ep == nil {
		return ""
	}
	var why []string
	if h := policy.NormalizeHost(ep.Host); hasGlob(h) && !pr.currentUses(globHost, h) {
		why = append(why, "host "+h)
	}
	if e := pr.proposed.NetworkPolicies[entry]; e != nil {
		for _, b := range e.Binaries {
			if hasGlob(b.Path) && !pr.currentUses(globBinary, b.Path) && cleanAbsolute(r.Binary) && policy.MatchGlob(b.Path, r.Binary) {
				why = append(why, "binary "+b.Path)
			}
		}
	}
	if i, ok := ruleIndex(rule); ok && i >= 0 && i < len(ep.Rules) && ep.Rules[i].Allow != nil {
		a := ep.Rules[i].Allow
		if hasGlob(a.Path) && !pr.currentUses(globPath, a.Path) {
			why = append(why, "path "+a.Path)
		}
		for _, m := range []struct {
			place int
			what  string
			glob  *policy.Matcher
		}{{globTool, "tool ", a.Tool}, {globPrompt, "prompt ", a.Prompt}, {globResource, "resource ", a.Resource}} {
			if m.glob == nil {
				continue
			}
			for _, t := range m.glob.Any {
				if hasGlob(t) && !pr.currentUses(m.place, t) {
					why = append(why, m.what+t)
				}
			}
		}
	}
	if len(why) == 0 {
		return ""
	}
	slices.Sort(why)
	return "glob where the current policy has none: " + strings.Join(why, ", ")
}

// Places a glob can take in widening.
const (
	globHost = iota
	globBinary
	globPath
	globTool
	globPrompt
	globResource
)

type globUse struct {
	place int
	glob  string
}

// currentUses reports whether the current policy uses glob at place (a
// host, after normalising; an entry's binary; an allow rule's path or
// tool). Only the few globs of allowing rules are asked about, so each is
// looked up by a scan of the current policy, remembered for the proof.
func (pr *prover) currentUses(place int, glob string) bool {
	k := globUse{place, glob}
	if v, ok := pr.curGlobs[k]; ok {
		return v
	}
	if pr.curGlobs == nil {
		pr.curGlobs = map[globUse]bool{}
	}
	found := false
	for _, c := range pr.cur {
		switch place {
		case globHost:
			found = policy.NormalizeHost(c.ep.Host) == glob
		case globBinary:
			for _, b := range c.entry.Binaries {
				found = found || b.Path == glob
			}
		case globPath, globTool, globPrompt, globResource:
			for _, rl := range c.ep.Rules {
				a := rl.Allow
				if a == nil {
					continue
				}
				var m *policy.Matcher
				switch place {
				case globPath:
					found = found || a.Path == glob
				case globTool:
					m = a.Tool
				case globPrompt:
					m = a.Prompt
				case globResource:
					m = a.Resource
				}
				found = found || m != nil && slices.Contains(m.Any, glob)
			}
		}
		if found {
			break
		}
	}
	pr.curGlobs[k] = found
	return found
}

func (pr *prover) add(kind, entry, endpoint, rule, detail string, v verdict, g *group) {
	// New access to a credentialed destination is a finding of its own, so
	// that the mark is never hidden behind an uncredentialed example.
	cred := (strings.HasPrefix(kind, "new_") || kind == L7BypassCredentialed) && pr.credentialed(v.r)
	key := fmt.Sprint(kind, "\x00", entry, "\x00", endpoint, "\x00", rule, "\x00", cred)
	f := pr.findings[key]
	if f == nil {
		r := v.r
		f = &Finding{Kind: kind, Counterexample: &r, Entry: entry, Endpoint: endpoint, Rule: rule, Detail: detail, Credentialed: cred}
		pr.findings[key] = f
	}
	f.atoms = append(f.atoms, atom{g: g, sig: v.sig})
}
