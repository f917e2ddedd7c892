package prover

import (
	"net/netip"
	"net/url"
	"slices"

	"github.com/portcullis-dev/portcullis/policy"
)

// Candidate requests: for each dimension, witnesses of every class the
// group's patterns realise (automata.go), then one request per class of
// the product (deduplicated by signature).

const stageCandidates = "candidate requests"

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

// at is the request of this L7 class sent to r's destination.
func (c l7) at(r policy.Request) policy.Request {
	r.HTTPMethod, r.Path, r.Query, r.MCP = c.method, c.path, c.query, c.mcp
	return r
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
