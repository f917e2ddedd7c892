package prover

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/portcullis-dev/portcullis/policy"
	"pgregory.net/rapid"
)

// The generators draw policies and requests from one small vocabulary, so
// that random requests hit the rules; requests also take values no policy
// names. Policies carry no query matchers and no arguments_schema, the
// prover's request-level scope (doc.go).

var (
	vHosts     = []string{"api.example.com", "API.Example.com", "*.example.com", "**.example.com", "a*.example.com", "other.test", "93.184.216.34", "2606:4700::1111", "10.1.2.3"}
	vMCPHosts  = []string{"mcp.example.net", "tools.example.net", "93.184.216.35"}
	vPorts     = []int{443, 80, 8080}
	vPaths     = []string{"/v1/items", "/v1/*", "/v1/**", "/v1/items/*/x", "/admin/", "/a/[bc]d", "/**/x", "/v1/it?ms", "/v1/\\*", "/**", "/"}
	vMethods   = []string{"GET", "POST", "*", "get", "DELETE", "HEAD"}
	vBinaries  = [][]string{nil, {"/usr/bin/curl"}, {"/usr/bin/*"}, {"/opt/**/python3"}, {"/usr/bin/curl", "/usr/bin/python3"}}
	vTools     = []string{"lookup_order", "refund_order", "tool.a"}
	vPrompts   = []string{"summarize", "sum*", "admin/*", "a b"}
	vResources = []string{"file:///docs/*", "file:///docs/**", "file:///secrets/**", "ui://*", "file:///a%20b"}
	vVersions  = []string{"2025-11-25", "2026-07-28", "2025-03-26"}
	vExpiries  = []time.Time{now, now.Add(time.Hour), time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)}
	vAllowedIP = [][]string{nil, nil, nil, nil, {"10.0.0.0/8"}, {"93.184.216.0/24", "2606:4700::/32"}}

	rBinaries = []string{"", "/usr/bin/curl", "/usr/bin/python3", "/usr/bin/wget", "/opt/x/python3", "/opt/python3", "/bin/sh", "/usr/bin/../bin/curl", "relative"}
	rHosts    = []string{"", "api.example.com", "API.EXAMPLE.COM.", "x.example.com", "a.b.example.com", "ab.example.com", "example.com", "other.test", "mcp.example.net", "tools.example.net", "zzz.invalid", "93.184.216.34", "93.184.216.35", "10.1.2.3", "2606:4700::1111", "127.0.0.1", "169.254.169.254"}
	rAddrs    = []string{"", "", "", "93.184.216.34", "93.184.216.99", "10.1.2.3", "10.9.9.9", "2606:4700::1111", "8.8.8.8", "127.0.0.1"}
	rPorts    = []int{443, 80, 8080, 9999, 6443}
	rMethods  = []string{"GET", "get", "POST", "HEAD", "DELETE", "PUT", "OPTIONS", ""}
	rPaths    = []string{"/", "/v1/items", "/v1/items/", "/v1/x", "/v1/a/b", "/v1/items/1/x", "/admin", "/admin/", "/a/bd", "/a/cd", "/a/dd", "/q/x", "/v1/itxms", "/v1/*", "/v1/../admin", "//v1//items", "/mcp", "/mcp/", "/%zz", "/v1/a%2Fb", "",
		"/ADMIN", "/Admin/", "/admin.", "/V1/items", "/v1/items.", "/admin;x", "/v1/a%3Bb", "/v1/a%2F.."}
	rMCPMeth = []string{"tools/call", "tools/list", "initialize", "notifications/initialized", "tools/other", "ping", "x/y", "",
		"prompts/get", "resources/read", "resources/subscribe", "resources/unsubscribe"}
	rTools   = []string{"lookup_order", "lookup_x", "refund_order", "tool.a", "other", "bad name", ""}
	rPrompts = []string{"summarize", "summary", "admin/x", "admin/x/y", "a b", "SUMMARIZE", ""}
	rURIs    = []string{"file:///docs/a.txt", "file:///docs/a/b.txt", "file:///secrets/key", "file:///SECRETS/key", "file:///docs/../secrets/key",
		"FILE:///docs/a.txt", "ui://w", "file:///a%20b", "file:///a%2fb", "file:///docs/", "file:///docs", "x", ""}
)

func genPolicy(t *rapid.T, label string) *policy.Policy {
	p := &policy.Policy{Version: 1, NetworkPolicies: map[string]*policy.NetworkPolicy{}}
	for _, key := range rapid.SliceOfNDistinct(rapid.SampledFrom([]string{"a", "b", "c", "d"}), 1, 3, rapid.ID[string]).Draw(t, label+" entries") {
		entry := &policy.NetworkPolicy{}
		for _, b := range rapid.SampledFrom(vBinaries).Draw(t, "binaries") {
			entry.Binaries = append(entry.Binaries, policy.Binary{Path: b})
		}
		for range rapid.IntRange(1, 2).Draw(t, "endpoints") {
			entry.Endpoints = append(entry.Endpoints, genEndpoint(t))
		}
		p.NetworkPolicies[key] = entry
	}
	return p
}

func genEndpoint(t *rapid.T) *policy.Endpoint {
	ep := &policy.Endpoint{
		Protocol:    rapid.SampledFrom([]string{"", "", "rest", "rest", "rest", "rest", "mcp", "mcp", "mcp", "graphql", "tcp"}).Draw(t, "protocol"),
		Enforcement: rapid.SampledFrom([]string{"", "", "enforce", "audit"}).Draw(t, "enforcement"),
		AllowedIPs:  rapid.SampledFrom(vAllowedIP).Draw(t, "allowed_ips"),
	}
	if rapid.IntRange(0, 4).Draw(t, "multiport") == 0 {
		ep.Ports = rapid.SliceOfNDistinct(rapid.SampledFrom(vPorts), 1, 2, rapid.ID[int]).Draw(t, "ports")
	} else {
		ep.Port = rapid.SampledFrom(vPorts).Draw(t, "port")
	}
	if ep.Protocol == policy.ProtocolMCP {
		ep.Host = rapid.SampledFrom(vMCPHosts).Draw(t, "host")
	} else {
		ep.Host = rapid.SampledFrom(vHosts).Draw(t, "host")
	}
	// Endpoints on one host:port may disagree on tls (opa.rs
	// l7_overlapping_policies_*): skip must change no verdict.
	if rapid.IntRange(0, 4).Draw(t, "tls skip") == 0 {
		ep.TLS = "skip"
	}
	if ep.AllowedIPs != nil && ep.Protocol != policy.ProtocolMCP && rapid.IntRange(0, 2).Draw(t, "hostless") == 0 {
		ep.Host = ""
	}
	switch ep.Protocol {
	case policy.ProtocolREST:
		if rapid.IntRange(0, 2).Draw(t, "scoped") == 0 {
			ep.Path = rapid.SampledFrom([]string{"/v1/**", "/admin", "/v1/*"}).Draw(t, "scope")
		}
		ep.AllowEncodedSlash = rapid.IntRange(0, 4).Draw(t, "encoded") == 0
		if rapid.IntRange(0, 4).Draw(t, "preset") == 0 {
			ep.Access = rapid.SampledFrom([]string{"read-only", "read-write", "full"}).Draw(t, "access")
		} else {
			for range rapid.IntRange(1, 3).Draw(t, "rules") {
				r := genRESTRule(t)
				if rapid.IntRange(0, 4).Draw(t, "expires") == 0 {
					e := rapid.SampledFrom(vExpiries).Draw(t, "expires_at")
					r.ExpiresAt = &e
				}
				r.Review = genReview(t)
				ep.Rules = append(ep.Rules, policy.Rule{Allow: r})
			}
		}
		for range rapid.IntRange(0, 2).Draw(t, "deny_rules") {
			ep.DenyRules = append(ep.DenyRules, genRESTRule(t))
		}
	case policy.ProtocolMCP:
		genMCP(t, ep)
	case policy.ProtocolGraphQL:
		ep.Path = "/graphql"
		ep.Access = "read-only"
	}
	return ep
}

func genRESTRule(t *rapid.T) *policy.L7Rule {
	r := &policy.L7Rule{Method: rapid.SampledFrom(vMethods).Draw(t, "method")}
	if rapid.IntRange(0, 5).Draw(t, "anypath") > 0 {
		r.Path = rapid.SampledFrom(vPaths).Draw(t, "path")
	}
	return r
}

func genMCP(t *rapid.T, ep *policy.Endpoint) {
	opts := &policy.MCPOptions{}
	switch rapid.IntRange(0, 2).Draw(t, "strict") {
	case 1:
		opts.StrictToolNames = new(true)
	case 2:
		opts.StrictToolNames = new(false)
	}
	strict := opts.StrictToolNames == nil || *opts.StrictToolNames
	opts.AllowAllKnownMCPMethods = rapid.IntRange(0, 3).Draw(t, "allow_all") == 0
	if rapid.Bool().Draw(t, "versions") {
		opts.Versions = rapid.SliceOfNDistinct(rapid.SampledFrom(vVersions), 1, 2, rapid.ID[string]).Draw(t, "version list")
	}
	ep.MCP = opts
	if rapid.Bool().Draw(t, "mcp scoped") {
		ep.Path = "/mcp"
	}
	if !opts.AllowAllKnownMCPMethods || rapid.Bool().Draw(t, "rules with allow_all") {
		for range rapid.IntRange(1, 3).Draw(t, "mcp rules") {
			ep.Rules = append(ep.Rules, policy.Rule{Allow: genMCPRule(t, strict, opts.AllowAllKnownMCPMethods, true)})
		}
	}
	for range rapid.IntRange(0, 2).Draw(t, "mcp deny") {
		ep.DenyRules = append(ep.DenyRules, genMCPRule(t, strict, opts.AllowAllKnownMCPMethods, false))
	}
}

func genMCPRule(t *rapid.T, strict, allowAll, allow bool) *policy.L7Rule {
	methods := []string{"tools/call", "tools/call", "tools/list", "initialize", "notifications/initialized", "tools/*",
		"prompts/get", "prompts/get", "resources/read", "resources/read", "resources/subscribe"}
	if allowAll {
		methods = append(methods, "")
	}
	r := &policy.L7Rule{Method: rapid.SampledFrom(methods).Draw(t, "mcp method")}
	switch {
	case r.Method == "prompts/get" && rapid.IntRange(0, 3).Draw(t, "prompt kind") > 0:
		r.Prompt = &policy.Matcher{Any: []string{rapid.SampledFrom(vPrompts).Draw(t, "prompt")}}
	case policy.IsResourceMethod(r.Method) && rapid.IntRange(0, 3).Draw(t, "resource kind") > 0:
		r.Resource = &policy.Matcher{Any: []string{rapid.SampledFrom(vResources).Draw(t, "resource")}}
	}
	if r.Method != "tools/call" {
		return r
	}
	switch rapid.IntRange(0, 3).Draw(t, "tool kind") {
	case 0: // any tool
	case 1:
		if strict {
			r.Tool = &policy.Matcher{Any: []string{"lookup_*"}}
			break
		}
		fallthrough
	case 2:
		r.Tool = &policy.Matcher{Any: []string{rapid.SampledFrom(vTools).Draw(t, "tool"), rapid.SampledFrom(vTools).Draw(t, "tool2")}}
	default:
		r.Tool = &policy.Matcher{Any: []string{rapid.SampledFrom(vTools).Draw(t, "tool")}}
	}
	if allow && rapid.IntRange(0, 4).Draw(t, "mcp expires") == 0 {
		e := rapid.SampledFrom(vExpiries).Draw(t, "mcp expires_at")
		r.ExpiresAt = &e
	}
	if allow {
		r.Review = genReview(t)
	}
	return r
}

// genReview draws an allow rule's review: mostly none.
func genReview(t *rapid.T) *policy.Review {
	switch rapid.IntRange(0, 4).Draw(t, "review") {
	case 0:
		return &policy.Review{Required: true}
	case 1:
		return &policy.Review{Required: true, Timeout: rapid.SampledFrom([]string{"30s", "5m"}).Draw(t, "review timeout")}
	}
	return nil
}

// mutate returns a copy of p with a few random changes, so that the pair
// differs in a handful of places (the interesting case) rather than
// everywhere.
func mutate(t *rapid.T, p *policy.Policy) *policy.Policy {
	q := p.Clone()
	keys := sortedKeys(q)
	for range rapid.IntRange(1, 3).Draw(t, "mutations") {
		entry := q.NetworkPolicies[rapid.SampledFrom(keys).Draw(t, "entry")]
		i := rapid.IntRange(0, len(entry.Endpoints)-1).Draw(t, "endpoint")
		ep := entry.Endpoints[i]
		switch rapid.IntRange(0, 8).Draw(t, "mutation") {
		case 0:
			entry.Endpoints[i] = genEndpoint(t)
		case 1:
			entry.Endpoints = append(entry.Endpoints, genEndpoint(t))
		case 2:
			entry.Binaries = nil
			for _, b := range rapid.SampledFrom(vBinaries).Draw(t, "binaries") {
				entry.Binaries = append(entry.Binaries, policy.Binary{Path: b})
			}
		case 3:
			if len(ep.DenyRules) > 0 {
				ep.DenyRules = ep.DenyRules[1:]
			}
		case 4:
			switch ep.Protocol {
			case policy.ProtocolREST:
				ep.Access = ""
				ep.Rules = append(ep.Rules, policy.Rule{Allow: genRESTRule(t)})
			case policy.ProtocolMCP:
				ep.Rules = append(ep.Rules, policy.Rule{Allow: genMCPRule(t, ep.MCP.StrictToolNames == nil || *ep.MCP.StrictToolNames, ep.MCP.AllowAllKnownMCPMethods, true)})
			}
		case 5:
			ep.Enforcement = rapid.SampledFrom([]string{"enforce", "audit"}).Draw(t, "enforcement")
		case 6:
			ep.AllowedIPs = rapid.SampledFrom(vAllowedIP).Draw(t, "allowed_ips")
		case 7:
			ep.Host = rapid.SampledFrom(append(vHosts, vMCPHosts...)).Draw(t, "host")
		case 8:
			// Review on or off (or another timeout) on one allow rule
			// that may carry it.
			if len(ep.Rules) > 0 {
				r := ep.Rules[rapid.IntRange(0, len(ep.Rules)-1).Draw(t, "reviewed rule")].Allow
				if r != nil && (ep.Protocol == policy.ProtocolREST || r.Method == "tools/call") {
					r.Review = genReview(t)
				}
			}
		}
	}
	return q
}

func sortedKeys(p *policy.Policy) []string {
	var keys []string
	for _, k := range []string{"a", "b", "c", "d"} {
		if p.NetworkPolicies[k] != nil {
			keys = append(keys, k)
		}
	}
	return keys
}

func genRequest(t *rapid.T) policy.Request {
	r := policy.Request{
		Binary: rapid.SampledFrom(rBinaries).Draw(t, "r binary"),
		Host:   rapid.SampledFrom(rHosts).Draw(t, "r host"),
		Port:   rapid.SampledFrom(rPorts).Draw(t, "r port"),
		Time:   now,
	}
	if a := rapid.SampledFrom(rAddrs).Draw(t, "r addr"); a != "" {
		r.Addr = netip.MustParseAddr(a)
	}
	if ip, ok := policy.ParseHostIP(r.Host); ok && rapid.Bool().Draw(t, "addr is host") {
		r.Addr = ip
	}
	r.HTTPMethod = rapid.SampledFrom(rMethods).Draw(t, "r method")
	if r.HTTPMethod == "" {
		return r
	}
	r.Path = rapid.SampledFrom(rPaths).Draw(t, "r path")
	if mcp := rapid.IntRange(0, 5).Draw(t, "mcp"); mcp > 1 && strings.EqualFold(r.HTTPMethod, "POST") || mcp == 1 {
		m := &policy.MCPMessage{Method: rapid.SampledFrom(rMCPMeth).Draw(t, "r mcp method")}
		if rapid.IntRange(0, 9).Draw(t, "response") == 0 {
			m = &policy.MCPMessage{Response: true}
		}
		switch {
		case m.Method == "tools/call":
			m.Tool = rapid.SampledFrom(rTools).Draw(t, "r tool")
		case m.Method == "prompts/get":
			m.Prompt = rapid.SampledFrom(rPrompts).Draw(t, "r prompt")
		case policy.IsResourceMethod(m.Method):
			m.Resource = rapid.SampledFrom(rURIs).Draw(t, "r uri")
		}
		m.ProtocolVersion = rapid.SampledFrom(append([]string{"", "1999-01-01"}, vVersions...)).Draw(t, "r version")
		r.MCP = m
	}
	return r
}

// TestProveCoversEveryAddedRequest is the "no findings is true" property.
// A proof either completes exactly or is refused as too complex (the
// generator can draw pairs of many-port, glob-heavy entries past the
// budget); a refusal is a sound answer, so it is not a failure, but it
// must stay rare, or the property would hold of almost nothing.
func TestProveCoversEveryAddedRequest(t *testing.T) {
	var cases, refused int
	defer func() {
		if refused*10 > cases {
			t.Errorf("%d of %d proofs were refused as too complex: the property was hardly checked", refused, cases)
		}
	}()
	rapid.Check(t, func(t *rapid.T) {
		cur := genPolicy(t, "current")
		var prop *policy.Policy
		if rapid.IntRange(0, 3).Draw(t, "independent") == 0 {
			prop = genPolicy(t, "proposed")
		} else {
			prop = mutate(t, cur)
		}
		var boundary *policy.Policy
		if rapid.Bool().Draw(t, "with boundary") {
			boundary = mutate(t, prop)
		}
		opts := Options{Now: now, Boundary: boundary}
		switch rapid.IntRange(0, 2).Draw(t, "credentialed") {
		case 1:
			opts.Credentialed = []HostPort{{"api.example.com", 443}, {"93.184.216.35", 80}}
		case 2:
			// Attached providers' hosts: patterns.
			opts.Credentialed = []HostPort{{rapid.SampledFrom(vCredPatterns).Draw(t, "credentialed pattern"), 443}, {"**.example.net", 80}}
		}
		cases++
		rep, err := proveOrRefuse(t, cur, prop, opts)
		if errors.Is(err, ErrTooComplex) {
			refused++
			return
		}
		for range 50 {
			r := genRequest(t)
			c, p := policy.Decide(cur, r), policy.Decide(prop, r)
			added := p.Allow && !c.Allow
			review := reviewKind(c, p)
			covered, reviewCovered := false, false
			for _, f := range rep.Findings {
				if f.Counterexample == nil || !f.Covers(r) {
					continue
				}
				if f.Kind == ReviewRemoved || f.Kind == ReviewAdded {
					if f.Kind != review {
						t.Fatalf("finding %s (%s %s %s) covers %s, whose review did not change so: current %+v, proposed %+v", f.Kind, f.Entry, f.Endpoint, f.Rule, describe(r), c, p)
					}
					reviewCovered = true
					continue
				}
				if f.Kind == ExceedsBoundary {
					if b := policy.Decide(boundary, r); b.Allow || !added {
						t.Fatalf("exceeds_boundary %+v covers %s, which is not added beyond the boundary (boundary %+v)", f, describe(r), b)
					}
					continue
				}
				if !added {
					t.Fatalf("finding %s (%s %s %s) covers %s, which is not added: current %+v, proposed %+v", f.Kind, f.Entry, f.Endpoint, f.Rule, describe(r), c, p)
				}
				if marks := strings.HasPrefix(f.Kind, "new_") || f.Kind == L7BypassCredentialed; marks && f.Credentialed != credentialedIn(opts, r) {
					t.Fatalf("finding %s (%s %s %s, credentialed %v) covers %s, credentialed %v under %v", f.Kind, f.Entry, f.Endpoint, f.Rule, f.Credentialed, describe(r), !f.Credentialed, opts.Credentialed)
				}
				covered = true
			}
			if added && !covered {
				debugMiss(t, cur, prop, opts, r)
				t.Fatalf("%s is allowed by the proposed policy (%s) and denied by the current one (%s), but no finding covers it; findings: %s", describe(r), p.Reason, c.Reason, show(rep.Findings))
			}
			if review != "" && !reviewCovered {
				debugMiss(t, cur, prop, opts, r)
				t.Fatalf("%s is %s (current %+v, proposed %+v), but no finding of that kind covers it; findings: %s", describe(r), review, c, p, show(rep.Findings))
			}
		}
	})
}

// vCredPatterns are credentialed host patterns meeting vHosts and rHosts.
var vCredPatterns = []string{"*.example.com", "**.example.com", "api.example.com", "a*.example.com", "*b.example.com", "93.184.216.34"}

func credentialedIn(opts Options, r policy.Request) bool {
	for _, c := range opts.Credentialed {
		if c.Covers(r.Host, r.Port) {
			return true
		}
	}
	return false
}

func show(fs []Finding) string {
	s := ""
	for _, f := range fs {
		s += fmt.Sprintf("\n  %s %s %s %s: %s", f.Kind, f.Entry, f.Endpoint, f.Rule, f.Detail)
		if f.Counterexample != nil {
			s += " — " + describe(*f.Counterexample)
		}
	}
	return s
}

func describe(r policy.Request) string {
	s := r.Binary + " → " + r.Host + ":" + itoa(r.Port)
	if r.Addr.IsValid() {
		s += " @" + r.Addr.String()
	}
	if r.HTTPMethod != "" {
		s += " " + r.HTTPMethod + " " + r.Path
	}
	if r.MCP != nil {
		s += " mcp{" + policy.DescribeMCP(r.MCP) + " v" + r.MCP.ProtocolVersion + "}"
	}
	return s
}

// Equivalent spellings and narrowing add nothing.
func TestProveNoFindings(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cur := genPolicy(t, "current")
		if rep := prove(t, cur, cur, Options{}); len(rep.Findings) != 0 {
			t.Fatalf("Prove(p, p): %s", show(rep.Findings))
		}
		// Canonical form, re-cased hosts, reordered rules.
		eq := cur.Clone()
		for _, e := range eq.NetworkPolicies {
			for _, ep := range e.Endpoints {
				ep.Host = strings.ToUpper(ep.Host)
				if len(ep.Rules) > 1 {
					ep.Rules[0], ep.Rules[len(ep.Rules)-1] = ep.Rules[len(ep.Rules)-1], ep.Rules[0]
				}
			}
			if len(e.Endpoints) > 1 {
				e.Endpoints[0], e.Endpoints[1] = e.Endpoints[1], e.Endpoints[0]
			}
		}
		for _, q := range []*policy.Policy{cur.Canonical(), eq, eq.Canonical()} {
			if rep := prove(t, cur, q, Options{}); len(rep.Findings) != 0 {
				t.Fatalf("equivalent policy: %s", show(rep.Findings))
			}
		}
		// Narrowing: drop an inspected endpoint without deny rules, drop
		// one of several allow rules, add a deny rule, name a binary.
		// (Dropping an endpoint with deny rules, or an uninspected one,
		// or an MCP endpoint's last rule under allow_all_known_mcp_methods,
		// is not narrowing, and the prover rightly says so.)
		nar := cur.Clone()
		for _, e := range nar.NetworkPolicies {
			ep := e.Endpoints[0]
			switch rapid.IntRange(0, 3).Draw(t, "narrowing") {
			case 0:
				if len(ep.DenyRules) == 0 && policy.Inspected(ep.Protocol) {
					e.Endpoints = e.Endpoints[1:]
				}
			case 1:
				// On an audit endpoint a request no rule allows passes
				// (audited) without review: dropping a reviewed rule
				// there lifts its review, and the prover says so.
				if len(ep.Rules) > 1 && (ep.Enforcement != policy.EnforcementAudit || ep.Rules[0].Allow.Review == nil) {
					ep.Rules = ep.Rules[1:]
				}
			case 2:
				switch ep.Protocol {
				case policy.ProtocolREST:
					ep.DenyRules = append(ep.DenyRules, genRESTRule(t))
				case policy.ProtocolMCP:
					ep.DenyRules = append(ep.DenyRules, genMCPRule(t, true, false, false))
				}
			case 3:
				if len(e.Binaries) == 0 {
					e.Binaries = []policy.Binary{{Path: "/usr/bin/curl"}}
				}
			}
		}
		// Dropping an unreviewed rule may leave requests only a
		// reviewed rule allows: review_added, a tightening, is reported.
		if rep := prove(t, cur, nar, Options{}); len(rep.Findings) != len(kinds(rep)[ReviewAdded]) {
			t.Fatalf("narrowing: %s", show(rep.Findings))
		}
	})
}

func debugMiss(t *rapid.T, cur, prop *policy.Policy, opts Options, r policy.Request) {
	pr := &prover{opts: opts, m: newMeter(context.Background(), 0), cur: refsOf(cur), prop: refsOf(prop), proposed: prop, findings: map[string]*Finding{}}
	for _, e := range changedEndpoints(pr.cur, pr.prop) {
		g := pr.newGroup(e)
		sig, ok := g.signature(r)
		t.Logf("group %s: inDest %v mayAllow %v alwaysDenied %v sig %s", policy.EndpointLabel(e), ok, mayAllow(g.prop, r), alwaysDenied(r), sig)
		if !ok {
			continue
		}
		found := false
		for _, h := range g.hostCandidates() {
			for _, b := range g.binaryCandidates() {
				c := policy.Request{Host: h.host, Addr: h.addr, Port: r.Port, Binary: b, Time: now}
				if g.inDest(c) && g.destSig(c) == g.destSig(r) {
					found = true
				}
			}
		}
		t.Logf("dest class found: %v", found)
		probe := r
		for _, c := range g.l7Candidates() {
			probe.HTTPMethod, probe.Path, probe.Query, probe.MCP = c.method, c.path, c.query, c.mcp
			if g.l7Sig(probe) == g.l7Sig(r) {
				t.Logf("l7 class found: %+v", c)
				return
			}
		}
		t.Logf("l7 class missing; methods %v paths %v", g.methods, g.pathCandidates())
	}
}
