package prover

import (
	"fmt"
	"strings"

	"github.com/portcullis-dev/portcullis/policy"
)

// Judging a group: every class of candidate requests under the proposed
// and the current policy (and the boundary), and what each request the
// change adds is found to be.

const stageDecide = "judging of candidate requests"

// outcome of one candidate class.
type verdict struct {
	r                policy.Request
	sig              string
	cur, prop, bound policy.Decision
}

// proveGroup finds what the proposed policy adds at one changed
// endpoint's destination: the classes of destinations (binary × host,
// address and port) and of L7 requests there, judged destination by
// destination.
func (pr *prover) proveGroup(dest *policy.Endpoint) {
	defer pr.m.release(pr.m.mark())
	g := pr.newGroup(dest)
	dests := pr.destClasses(g)
	if len(dests) == 0 {
		return
	}
	l7s, l7sigs := g.l7Classes(dests[0].r)
	// The proposed policy first: only where it allows does the current
	// one need asking. Then, for destinations with added requests, the
	// current policy's reach there (for the finding kinds). A
	// destination's added requests are classified as soon as it is
	// judged, so the verdicts held at once are one destination's.
	var added, reviews []verdict
	curAllow := make([]int8, len(l7s)) // the current policy's verdicts already known at this dest: 1 allow, -1 deny
	for _, d := range dests {
		g.m.charge(stageDecide, g.decideCost)
		if alwaysDenied(d.r) || !mayAllow(g.prop, d.r) {
			continue
		}
		clear(curAllow)
		held := g.m.mark()
		added, reviews = g.addedAt(d, l7s, l7sigs, curAllow, added[:0], reviews[:0])
		if len(added) == 0 && len(reviews) == 0 {
			continue
		}
		// The verdicts go; what the findings keep of them (a signature
		// each) stays held until the group is done.
		kept := 0
		for _, v := range reviews {
			kept += pr.classifyReview(g, v)
		}
		if len(added) > 0 {
			// reach is made here, not in reachAt, so that its maps stay
			// on the stack; its methods are only those asked about.
			reach := destReach{methods: map[string]bool{}, named: map[string]bool{}}
			g.reachAt(&reach, d, l7s, added, curAllow)
			for _, v := range added {
				kept += pr.classify(g, v, reach)
			}
		}
		g.m.release(held)
		g.m.hold(stageDecide, kept)
	}
}

// destClass is one class of destinations of a group: a request naming
// only the binary, host, address and port, and its signature.
type destClass struct {
	r   policy.Request
	sig string
}

// destClasses are the group's destination classes. The binary and the
// (host, address, port) parts of the signature are independent: classes
// of each, then their product.
func (pr *prover) destClasses(g *group) []destClass {
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
	for _, port := range policy.EndpointPorts(g.dest) {
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
	return dests
}

// l7Classes are the group's classes of L7 requests (one candidate each)
// and their signatures, the L7 part of a request's being independent of
// its destination's: probe is any destination of the group.
func (g *group) l7Classes(probe policy.Request) ([]l7, []string) {
	var l7s []l7
	var l7sigs []string
	seen := map[string]bool{}
	pathSigs := g.pathSigTable()
	l7Cost := g.l7SigCost()
	for _, c := range g.l7Candidates() {
		g.m.charge(stageCandidates, l7Cost)
		g.m.hold(stageCandidates, 2*l7Cost+64)
		probe.HTTPMethod, probe.Path, probe.Query, probe.MCP = c.method, c.path, c.query, c.mcp
		s := g.l7SigMemo(probe, pathSigs)
		if !seen[s] {
			seen[s] = true
			l7s = append(l7s, c)
			l7sigs = append(l7sigs, s)
		}
	}
	return l7s, l7sigs
}

// addedAt appends to added the L7 classes at destination d that the
// proposed policy allows and the current one denies, and to reviews those
// both allow but only one after a person's review (a reviewed allow is a
// verdict of its own), noting in curAllow each current verdict it asked
// for.
func (g *group) addedAt(d destClass, l7s []l7, l7sigs []string, curAllow []int8, added, reviews []verdict) ([]verdict, []verdict) {
	for li, c := range l7s {
		r := c.at(d.r)
		g.m.charge(stageDecide, g.decideCost)
		prop := policy.Decide(g.prop, r)
		if !prop.Allow {
			continue
		}
		g.m.charge(stageDecide, g.decideCost)
		cur := policy.Decide(g.cur, r)
		if cur.Allow {
			curAllow[li] = 1
			if reviewKind(cur, prop) == "" {
				continue
			}
		} else {
			curAllow[li] = -1
		}
		v := verdict{r: r, sig: d.sig + "#" + l7sigs[li], cur: cur, prop: prop}
		g.m.charge(stageDecide, len(v.sig)+g.decideCost)
		g.m.hold(stageDecide, 2*len(v.sig)+512)
		if cur.Allow {
			reviews = append(reviews, v)
			continue
		}
		if g.bound != nil {
			v.bound = policy.Decide(g.bound, r)
		}
		added = append(added, v)
	}
	return added, reviews
}

// reachAt fills reach with what the finding kinds ask of destination d:
// whether the current policy reaches it at all, allows the methods of
// the added requests (without an MCP message) and some call of the MCP
// methods that name something. Requests that cannot change an answer
// asked for are not judged; curAllow holds the verdicts known already
// and gains those asked for here.
func (g *group) reachAt(reach *destReach, d destClass, l7s []l7, added []verdict, curAllow []int8) {
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
			curAllow[li] = -1
			g.m.charge(stageDecide, g.decideCost)
			if policy.Decide(g.cur, c.at(d.r)).Allow {
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
	if v.prop.Review > 0 {
		detail += "; each call is held for a person's review (review.required)"
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
		if c.Covers(r.Host, r.Port) {
			return true
		}
	}
	return false
}

// locate maps the proposed decision back to the proposed document.
func (pr *prover) locate(g *group, d policy.Decision) (entry string, ep *policy.Endpoint, label, rule string) {
	if ep := locateIn(pr.prop, g.propIdx, d); ep != nil {
		return d.Entry, ep, policy.EndpointLabel(ep), d.Rule
	}
	return d.Entry, nil, "", d.Rule
}

// locateIn maps a decision on a group's sub-policy back to the endpoint
// of the document refs lists (idx: the sub-policy's endpoint indexes);
// nil when the decision names none.
func locateIn(refs []ref, idx map[string][]int, d policy.Decision) *policy.Endpoint {
	if d.Entry == "" || d.Endpoint < 0 || d.Endpoint >= len(idx[d.Entry]) {
		return nil
	}
	i := idx[d.Entry][d.Endpoint]
	for _, r := range refs {
		if r.key == d.Entry && r.index == i {
			return r.ep
		}
	}
	return nil
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
