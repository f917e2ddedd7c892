package match

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/portcullis-dev/portcullis/policy"
)

// The matcher's contract is one sentence: Matcher.Decide(r) equals
// policy.Decide(p, r), every field. The table tests pin the key semantics
// by name; the property tests check the contract on random policies and
// requests, and the helpers (globs, canonical paths) against the policy
// package's.

var (
	curl   = "/usr/bin/curl"
	python = "/usr/bin/python3"
	when   = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	pubIP  = netip.MustParseAddr("93.184.216.34")
)

func mustCompile(t testing.TB, p *policy.Policy) *Matcher {
	t.Helper()
	m, err := Compile(p)
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	return m
}

func parse(t testing.TB, doc string) *policy.Policy {
	t.Helper()
	p, _, err := policy.Parse([]byte(doc))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return p
}

// tb is what agree needs of a *testing.T or a *rapid.T.
type tb interface {
	Helper()
	Fatalf(format string, args ...any)
}

// agree decides r with both evaluators and fails on any difference.
func agree(t tb, m *Matcher, r policy.Request) policy.Decision {
	t.Helper()
	want := policy.Decide(m.Policy(), r)
	got := m.Decide(&r)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Matcher.Decide differs from policy.Decide\nrequest: %s\nmatcher: %+v\npolicy:  %+v", describeRequest(r), got, want)
	}
	return got
}

func describeRequest(r policy.Request) string {
	s := fmt.Sprintf("binary=%q ancestors=%q host=%q addr=%v port=%d method=%q path=%q query=%q time=%v dev=%v",
		r.Binary, r.Ancestors, r.Host, r.Addr, r.Port, r.HTTPMethod, r.Path, r.Query, r.Time, r.DevAllowLoopback)
	if r.MCP != nil {
		s += fmt.Sprintf(" mcp=%+v args=%s", *r.MCP, r.MCP.Arguments)
	}
	return s
}

const tablePolicy = `
version: 1
network_policies:
  github:
    binaries: [{path: /usr/bin/curl}]
    endpoints:
      - host: api.github.com
        port: 443
        protocol: rest
        rules:
          - allow: {method: GET, path: "/repos/*/issues"}
          - allow: {method: POST, path: "/repos/**", expires_at: 2026-05-01T12:00:00Z}
          - allow: {method: GET, path: "/search", query: {q: "repo:*"}}
        deny_rules:
          - {method: GET, path: "/repos/*/secrets"}
      - host: "*.githubusercontent.com"
        port: 443
        protocol: rest
        access: read-only
  anyone:
    binaries: []
    endpoints:
      - host: pypi.org
        port: 443
  audited:
    binaries: [{path: "/usr/bin/python*"}]
    endpoints:
      - host: api.github.com
        port: 443
        protocol: rest
        enforcement: audit
        rules:
          - allow: {method: GET, path: "/user"}
        deny_rules:
          - {method: DELETE, path: "/repos/**"}
  orders:
    binaries: [{path: /usr/bin/python3}]
    endpoints:
      - host: orders.example.net
        port: 443
        path: /mcp
        protocol: mcp
        mcp: {versions: ["2025-11-25", "2026-07-28"], max_body_bytes: 4096}
        rules:
          - allow: {method: initialize}
          - allow: {method: tools/list}
          - allow:
              method: tools/call
              tool: lookup_order
              arguments_schema:
                type: object
                properties: {order_id: {type: string, pattern: "^[A-Z]-\\d{4}$"}}
                required: [order_id]
                additionalProperties: false
        deny_rules:
          - {method: tools/call, tool: refund_order}
  graphql:
    binaries: []
    endpoints:
      - host: api.github.com
        port: 443
        path: /graphql
        protocol: graphql
        access: read-only
`

// TestMatcherTable pins key semantics by name. (Rule indices are the
// positions in tablePolicy, which the canonical form keeps.)
func TestMatcherTable(t *testing.T) {
	m := mustCompile(t, parse(t, tablePolicy))
	rest := func(binary, host, method, path string) policy.Request {
		return policy.Request{Binary: binary, Host: host, Addr: pubIP, Port: 443, HTTPMethod: method, Path: path, Time: when.Add(-time.Hour)}
	}
	mcp := func(method, tool, args, version string) policy.Request {
		r := rest(python, "orders.example.net", "POST", "/mcp")
		r.MCP = &policy.MCPMessage{Method: method, Tool: tool, ProtocolVersion: version}
		if args != "" {
			r.MCP.Arguments = json.RawMessage(args)
		}
		return r
	}
	at := func(r policy.Request, t time.Time) policy.Request { r.Time = t; return r }
	withQuery := func(r policy.Request, q string) policy.Request { r.Query = q; return r }
	l4 := func(binary, host string, port int) policy.Request {
		return policy.Request{Binary: binary, Host: host, Addr: pubIP, Port: port, Time: when}
	}
	cases := []struct {
		name        string
		r           policy.Request
		allow       bool
		audit       bool
		rule, entry string
		refused     bool
	}{
		{"rest rule allows", rest(curl, "api.github.com", "GET", "/repos/x/issues"), true, false, "rules[0]", "github", false},
		{"method is case-insensitive", rest(curl, "api.github.com", "get", "/repos/x/issues"), true, false, "rules[0]", "github", false},
		{"host spelled oddly", rest(curl, " API.GitHub.com. ", "GET", "/repos/x/issues"), true, false, "rules[0]", "github", false},
		{"allow * stays in one segment", rest(curl, "api.github.com", "GET", "/repos/x/y/issues"), false, false, "", "github", false},
		{"dot segments are resolved first", rest(curl, "api.github.com", "GET", "/repos/x/../y/./issues"), true, false, "rules[0]", "github", false},
		{"deny wins over allow", rest(curl, "api.github.com", "GET", "/repos/x/secrets"), false, false, "deny_rules[0]", "github", false},
		{"deny * crosses segments", rest(curl, "api.github.com", "GET", "/repos/x/y/secrets"), false, false, "deny_rules[0]", "github", false},
		{"deny on GET denies HEAD", rest(curl, "api.github.com", "HEAD", "/repos/x/secrets/"), false, false, "deny_rules[0]", "github", false},
		{"expires_at before", at(rest(curl, "api.github.com", "POST", "/repos/a/b"), when.Add(-time.Second)), true, false, "rules[1]", "github", false},
		{"expires_at reached", at(rest(curl, "api.github.com", "POST", "/repos/a/b"), when), false, false, "", "github", false},
		{"query matches", withQuery(rest(curl, "api.github.com", "GET", "/search"), "q=repo:a/b"), true, false, "rules[2]", "github", false},
		{"query every value must match", withQuery(rest(curl, "api.github.com", "GET", "/search"), "q=repo:a&q=user:b"), false, false, "", "github", false},
		{"access preset on wildcard host", rest(curl, "raw.githubusercontent.com", "GET", "/a/b"), true, false, "access: read-only", "github", false},
		{"wildcard host needs a label", rest(curl, "githubusercontent.com", "GET", "/a/b"), false, false, "", "", false},
		{"access preset refuses POST", rest(curl, "raw.githubusercontent.com", "POST", "/a/b"), false, false, "", "github", false},
		{"audit entry lets a rule denial through", rest(python, "api.github.com", "GET", "/nope"), true, true, "", "audited", false},
		{"audit deny rule on an allowed request", rest(curl, "api.github.com", "DELETE", "/repos/a"), false, false, "", "github", false},
		{"binary not listed", rest("/bin/sh", "api.github.com", "GET", "/repos/x/issues"), false, false, "", "", false},
		{"binary with dot segments is unknown", rest("/usr/bin/../bin/curl", "api.github.com", "GET", "/repos/x/issues"), false, false, "", "", false},
		{"uninspected protocol closes its scope", rest(curl, "api.github.com", "POST", "/graphql"), false, false, "protocol", "graphql", false},
		{"L4 endpoint, any binary", l4("", "pypi.org", 443), true, false, "endpoint", "anyone", false},
		{"L4 request to an L7 endpoint", l4(curl, "api.github.com", 443), false, false, "", "", false},
		{"metadata host", l4(curl, "169.254.169.254", 80), false, false, "", "", false},
		{"metadata in decimal", l4(curl, "2852039166", 80), false, false, "", "", false},
		{"control-plane port", l4(curl, "pypi.org", 6443), false, false, "", "", false},
		{"mcp tool allowed with valid arguments", mcp("tools/call", "lookup_order", `{"order_id":"A-1042"}`, ""), true, false, "rules[2]", "orders", false},
		{"mcp schema refuses a bad id", mcp("tools/call", "lookup_order", `{"order_id":"x"}`, ""), false, false, "", "orders", false},
		{"mcp schema refuses an extra field", mcp("tools/call", "lookup_order", `{"order_id":"A-1042","x":1}`, ""), false, false, "", "orders", false},
		{"mcp deny rule", mcp("tools/call", "refund_order", `{}`, ""), false, false, "deny_rules[0]", "orders", false},
		{"mcp method listed", mcp("tools/list", "", "", "2026-07-28"), true, false, "rules[1]", "orders", false},
		{"mcp version not listed", mcp("tools/list", "", "", "2025-06-18"), false, false, "mcp.versions", "orders", true},
		{"mcp strict tool names", mcp("tools/call", "bad name", "", ""), false, false, "deny_rules", "orders", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := agree(t, m, c.r)
			if d.Allow != c.allow || d.Audit != c.audit || c.rule != "" && d.Rule != c.rule ||
				c.entry != "" && d.Entry != c.entry || d.VersionRefused != c.refused {
				t.Errorf("got %+v", d)
			}
		})
	}

	if !m.Inspect("api.github.com", 443) || m.Inspect("pypi.org", 443) || m.Inspect("example.com", 443) {
		t.Error("Inspect: want api.github.com:443 inspected, pypi.org:443 and unknown hosts not")
	}
	if n, ok := m.MCPLimits("orders.example.net", 443, "POST", "/mcp"); !ok || n != (MCPLimits{4096, policy.DefaultMaxResponseBytes}) {
		t.Errorf("MCPLimits(/mcp) = %+v, %v; want 4096 and the default response limit, true", n, ok)
	}
	if _, ok := m.MCPLimits("orders.example.net", 443, "POST", "/other"); ok {
		t.Error("MCPLimits(/other): want no mcp endpoint")
	}
	if _, ok := m.MCPLimits("api.github.com", 443, "POST", "/mcp"); ok {
		t.Error("MCPLimits(api.github.com): want no mcp endpoint")
	}
}

// TestWantsName: the names a DNS server in front of the sandbox resolves
// are the names some endpoint could match, any case, with or without the
// trailing dot; a hostless endpoint makes every name wanted.
func TestWantsName(t *testing.T) {
	m := mustCompile(t, parse(t, tablePolicy))
	for name, want := range map[string]bool{
		"api.github.com": true, "API.GitHub.com.": true, "raw.githubusercontent.com": true,
		"pypi.org": true, "orders.example.net": true,
		"githubusercontent.com": false, "evil.example.com": false, "github.com": false, "": false, "1.2.3.4": false,
	} {
		if got := m.WantsName(name); got != want {
			t.Errorf("WantsName(%q) = %v, want %v", name, got, want)
		}
	}
	var none *Matcher
	if none.WantsName("pypi.org") {
		t.Error("a nil matcher wants a name")
	}
	hostless := mustCompile(t, parse(t, `
version: 1
network_policies:
  db:
    endpoints: [{port: 5432, allowed_ips: [10.0.5.0/24]}]
`))
	if !hostless.WantsName("anything.example.com") {
		t.Error("a hostless endpoint matches by address, so every name is wanted")
	}
}

// TestTCPEndpoints: a tcp endpoint is an L4 endpoint: it allows the
// connection (host, ports, allowed_ips, binaries), agreeing with
// policy.Decide, and needs no L7 view — nor does it make its address one
// an L4 tunnel must not reach.
func TestTCPEndpoints(t *testing.T) {
	m := mustCompile(t, parse(t, `
version: 1
network_policies:
  redis:
    binaries: [{path: /usr/bin/redis-cli}]
    endpoints:
      - {host: redis.example.com, port: 6379, protocol: tcp, allowed_ips: [10.0.0.0/8]}
      - {host: 93.184.216.40, ports: [7000, 7001], protocol: tcp}
`))
	cli := "/usr/bin/redis-cli"
	ten, pub := netip.MustParseAddr("10.1.2.3"), netip.MustParseAddr("93.184.216.40")
	for _, c := range []struct {
		name  string
		r     policy.Request
		allow bool
	}{
		{"allowed", policy.Request{Binary: cli, Host: "redis.example.com", Addr: ten, Port: 6379, Time: when}, true},
		{"allowed, HTTP not read", policy.Request{Binary: cli, Host: "redis.example.com", Addr: ten, Port: 6379, HTTPMethod: "DELETE", Path: "/", Time: when}, true},
		{"outside allowed_ips", policy.Request{Binary: cli, Host: "redis.example.com", Addr: pub, Port: 6379, Time: when}, false},
		{"another binary", policy.Request{Binary: curl, Host: "redis.example.com", Addr: ten, Port: 6379, Time: when}, false},
		{"another port", policy.Request{Binary: cli, Host: "redis.example.com", Addr: ten, Port: 6380, Time: when}, false},
		{"IP host", policy.Request{Binary: cli, Host: "93.184.216.40", Addr: pub, Port: 7001, Time: when}, true},
	} {
		if d := agree(t, m, c.r); d.Allow != c.allow {
			t.Errorf("%s: %+v", c.name, d)
		}
	}
	if m.Inspect("redis.example.com", 6379) || m.Inspect("93.184.216.40", 7000) {
		t.Error("a tcp endpoint's destination is inspected")
	}
	if addrs, names := m.InspectedOn(7000); addrs != nil || names != nil {
		t.Errorf("InspectedOn(7000) = %v, %v", addrs, names)
	}
	if !m.WantsName("redis.example.com") || m.WantsName("cache.example.com") {
		t.Error("WantsName: want redis.example.com only")
	}
}

func TestMatcherNilAndInvalid(t *testing.T) {
	var m *Matcher
	r := policy.Request{Binary: curl, Host: "example.com", Port: 443, Time: when}
	if got, want := m.Decide(&r), policy.Decide(nil, r); !reflect.DeepEqual(got, want) {
		t.Errorf("nil matcher: %+v, want %+v", got, want)
	}
	if m.Inspect("example.com", 443) || m.Policy() != nil {
		t.Error("nil matcher inspects or has a policy")
	}
	if _, err := Compile(nil); err == nil {
		t.Error("Compile(nil) succeeded")
	}
	if _, err := Compile(&policy.Policy{Version: 2}); err == nil {
		t.Error("Compile(invalid) succeeded")
	}
}

// TestMatcherIsACopy: changing the policy after Compile changes nothing.
func TestMatcherIsACopy(t *testing.T) {
	p := parse(t, tablePolicy)
	m := mustCompile(t, p)
	p.NetworkPolicies["anyone"].Endpoints[0].Host = "evil.example.com"
	r := policy.Request{Host: "pypi.org", Addr: pubIP, Port: 443, Time: when}
	if !agree(t, m, r).Allow {
		t.Error("pypi.org no longer allowed after the caller changed its policy")
	}
}

func TestMatcherConcurrent(t *testing.T) {
	m := mustCompile(t, parse(t, tablePolicy))
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				r := policy.Request{Binary: python, Host: "orders.example.net", Addr: pubIP, Port: 443, HTTPMethod: "POST", Path: "/mcp", Time: when,
					MCP: &policy.MCPMessage{Method: "tools/call", Tool: "lookup_order", Arguments: json.RawMessage(fmt.Sprintf(`{"order_id":"A-%04d"}`, i))}}
				if d := m.Decide(&r); !d.Allow {
					t.Errorf("denied: %+v", d)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// TestMatcherAllocations pins the fast path: an allowed REST request to an
// exact host allocates nothing, with or without a resolved address (allow
// reasons are built at compile time; the address checks use fixed arrays).
func TestMatcherAllocations(t *testing.T) {
	m := mustCompile(t, parse(t, tablePolicy))
	r := policy.Request{Binary: curl, Host: "api.github.com", Port: 443, HTTPMethod: "GET", Path: "/repos/x/issues", Time: when}
	if d := m.Decide(&r); !d.Allow {
		t.Fatalf("denied: %+v", d)
	}
	if n := testing.AllocsPerRun(100, func() { m.Decide(&r) }); n != 0 {
		t.Errorf("Decide allocates %.0f times, want 0", n)
	}
	r.Addr = pubIP
	if n := testing.AllocsPerRun(100, func() { m.Decide(&r) }); n != 0 {
		t.Errorf("Decide with a resolved address allocates %.0f times, want 0", n)
	}
}

// TestMatcherTestdataPolicies: every policy of policy/testdata (OpenShell's
// and the article's, raw and canonical) compiles and agrees on requests
// drawn from its own vocabulary.
func TestMatcherTestdataPolicies(t *testing.T) {
	files, _ := filepath.Glob("../../policy/testdata/*/*.yaml")
	json, _ := filepath.Glob("../../policy/testdata/*/*.json")
	files = append(files, json...)
	if len(files) == 0 {
		t.Skip("no policy testdata")
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			p, _, err := policy.Parse(data)
			if err != nil {
				t.Skipf("not a valid policy: %v", err)
			}
			m := mustCompile(t, p)
			v := vocabularyOf(p)
			rapid.Check(t, func(rt *rapid.T) {
				agree(rt, m, v.request(rt))
			})
		})
	}
}

// ---------------------------------------------------------------------------
// The property test.

// TestMatcherAgreesWithDecide generates small valid policies and requests
// drawn mostly from each policy's own vocabulary, plus odd spellings, and
// checks Matcher.Decide against policy.Decide field by field, and Inspect
// and MCPLimits against Decide.
func TestMatcherAgreesWithDecide(t *testing.T) {
	var valid, invalid, allowed, reviewed, audited, total int
	rapid.Check(t, func(rt *rapid.T) {
		p := genPolicy(rt)
		if _, err := policy.Validate(p); err != nil {
			invalid++
			rt.Skip("invalid policy")
		}
		valid++
		m, err := Compile(p)
		if err != nil {
			rt.Fatalf("Compile of a valid policy: %v", err)
		}
		v := vocabularyOf(p)
		for range 20 {
			r := v.request(rt)
			d := agree(rt, m, r)
			total++
			if d.Allow {
				allowed++
			}
			if d.Review > 0 {
				reviewed++
			}
			if d.Audit {
				audited++
			}
			checkInspect(rt, m, r, d)
			checkWantsAddress(rt, m, r, d)
			checkWantsName(rt, m, v, r)
		}
	})
	t.Logf("policies: %d valid, %d invalid skipped; requests: %d, %d allowed (%d after review), %d audited", valid, invalid, total, allowed, reviewed, audited)
}

// checkInspect: when Inspect says host:port needs no L7 view, the L4
// decision is the whole answer — an L7 request gets the same verdict. And
// an allowed MCP POST reaches an endpoint MCPLimits reports.
func checkInspect(t *rapid.T, m *Matcher, r policy.Request, d policy.Decision) {
	if !m.Inspect(r.Host, r.Port) {
		l4 := r
		l4.HTTPMethod, l4.Path, l4.Query, l4.MCP = "", "", "", nil
		dl4 := m.Decide(&l4)
		if d.Allow != dl4.Allow || d.Audit != dl4.Audit || d.Entry != dl4.Entry || d.Endpoint != dl4.Endpoint || d.Rule != dl4.Rule {
			t.Fatalf("Inspect(%q, %d) is false but L7 and L4 decisions differ\nrequest: %s\nL7: %+v\nL4: %+v", r.Host, r.Port, describeRequest(r), d, dl4)
		}
	}
	if d.Allow && r.MCP != nil && d.Entry != "" && d.Endpoint >= 0 {
		ep := m.Policy().NetworkPolicies[d.Entry].Endpoints[d.Endpoint]
		if ep.Protocol == policy.ProtocolMCP {
			want := policy.DefaultMaxBodyBytes
			if ep.MCP != nil && ep.MCP.MaxBodyBytes > 0 {
				want = ep.MCP.MaxBodyBytes
			}
			if n, ok := m.MCPLimits(r.Host, r.Port, r.HTTPMethod, r.Path); !ok || n.Body != want {
				t.Fatalf("MCPLimits(%q, %d, %q) = %d, %v; want %d, true (decision %+v)", r.Host, r.Port, r.Path, n, ok, want, d)
			}
		}
	}
}

// checkWantsAddress: when WantsAddress says the address cannot matter, the
// request is denied with or without one — so the proxy may deny a name
// without resolving it, and never denies what resolving would allow.
func checkWantsAddress(t *rapid.T, m *Matcher, r policy.Request, d policy.Decision) {
	if m.WantsAddress(&r) {
		return
	}
	name := r
	name.Addr = netip.Addr{}
	if dn := m.Decide(&name); d.Allow || dn.Allow {
		t.Fatalf("WantsAddress is false but a decision allows\nrequest: %s\nwith its address: %+v\nwithout: %+v", describeRequest(r), d, dn)
	}
}

// checkWantsName: WantsName is WantsAddress with the port and the binary
// left open. When it is false, WantsAddress is false for r (a DNS server
// may refuse the name without resolving it); when it is true, some port of
// the policy and some binary of the vocabulary make WantsAddress true (it
// resolves nothing no request could need).
func checkWantsName(t *rapid.T, m *Matcher, v vocabulary, r policy.Request) {
	if !m.WantsName(r.Host) {
		if m.WantsAddress(&r) {
			t.Fatalf("WantsName(%q) is false but WantsAddress is true\nrequest: %s", r.Host, describeRequest(r))
		}
		return
	}
	var ports []int
	for _, e := range m.Policy().NetworkPolicies {
		for _, ep := range e.Endpoints {
			ports = append(ports, policy.EndpointPorts(ep)...)
		}
	}
	for _, port := range ports {
		for _, bin := range v.all.binaries {
			q := policy.Request{Host: r.Host, Port: port, Binary: bin}
			if m.WantsAddress(&q) {
				return
			}
		}
	}
	t.Fatalf("WantsName(%q) is true but WantsAddress is false on every port %v for every binary", r.Host, ports)
}

var (
	genHosts     = []string{"api.example.com", "api.example.com", "API.Example.com", "127.0.0.1", "*.example.com", "**.example.com", "a*.example.com", "*.s3.*.example.com", "**.s3.*.example.com", "other.test", "other.test", "93.184.216.34", "2606:4700::1111", "10.1.2.3", "localhost"}
	genMCPHosts  = []string{"mcp.example.net", "tools.example.net", "93.184.216.35"}
	genPorts     = []int{443, 80, 8080}
	genRESTPaths = []string{"/v1/items", "/v1/*", "/v1/**", "/v1/items/*/x", "/admin/", "/a/[bc]d", "/**/x", "/v1/it?ms", "/v1/\\*", "/**", "/"}
	genMethods   = []string{"GET", "POST", "*", "", "get", "DELETE", "HEAD"}
	genBinaries  = [][]string{nil, {"/usr/bin/curl"}, {"/usr/bin/*"}, {"/opt/**/python3"}, {"/usr/bin/curl", "/usr/bin/python3"}}
	genTools     = []string{"lookup_order", "refund_order", "tool.a"}
	genPrompts   = []string{"summarize", "sum*", "admin/*", "a b", "[ab]x"}
	genResources = []string{"file:///docs/*", "file:///docs/**", "file:///secrets/**", "https://api.example.com/v1/*.json", "ui://*", "file:///a%20b"}
	// Prompt names and resource URIs requests carry: matching, near
	// misses, and URIs that are not plain (policy.PlainResourceURI).
	reqPrompts   = []string{"summarize", "summary", "admin/x", "admin/x/y", "a b", "ax", "SUMMARIZE", ""}
	reqResources = []string{"file:///docs/a.txt", "file:///docs/a/b.txt", "file:///secrets/key", "file:///SECRETS/key", "file:///docs/../secrets/key",
		"file:///docs/%2e%2e/secrets", "FILE:///docs/a.txt", "https://API.example.com/v1/x.json", "https://api.example.com/v1/x.json", "ui://w",
		"file:///a%20b", "file:///a%2fb", "file:///docs/a.txt#x", "file:///secrets/", "file:///docs", ""}
	genVersions = []string{"2025-11-25", "2026-07-28", "2025-03-26"}
	genExpiries = []time.Time{when, when.Add(time.Hour), time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)}
	genSchema   = map[string]any{"type": "object", "properties": map[string]any{"order_id": map[string]any{"type": "string", "pattern": `^[A-Z]-\d{4}$`}}, "required": []any{"order_id"}, "additionalProperties": false}
)

func genPolicy(t *rapid.T) *policy.Policy {
	p := &policy.Policy{Version: 1, NetworkPolicies: map[string]*policy.NetworkPolicy{}}
	for _, key := range rapid.SliceOfNDistinct(rapid.SampledFrom([]string{"a", "b", "c", "d"}), 1, 4, rapid.ID[string]).Draw(t, "entries") {
		entry := &policy.NetworkPolicy{}
		for _, b := range rapid.SampledFrom(genBinaries).Draw(t, "binaries") {
			entry.Binaries = append(entry.Binaries, policy.Binary{Path: b})
		}
		for i := range rapid.IntRange(1, 3).Draw(t, "endpoints") {
			entry.Endpoints = append(entry.Endpoints, genEndpoint(t, i))
		}
		p.NetworkPolicies[key] = entry
	}
	return p
}

func genEndpoint(t *rapid.T, i int) *policy.Endpoint {
	ep := &policy.Endpoint{
		Protocol:    rapid.SampledFrom([]string{"", "", "rest", "rest", "rest", "rest", "rest", "mcp", "mcp", "mcp", "graphql", "tcp", "websocket"}).Draw(t, "protocol"),
		Enforcement: rapid.SampledFrom([]string{"", "enforce", "audit"}).Draw(t, "enforcement"),
	}
	if rapid.IntRange(0, 4).Draw(t, "multiport") == 0 {
		ep.Ports = rapid.SliceOfNDistinct(rapid.SampledFrom(genPorts), 1, 3, rapid.ID[int]).Draw(t, "ports")
	} else {
		ep.Port = rapid.SampledFrom(genPorts).Draw(t, "port")
	}
	if ep.Protocol == policy.ProtocolMCP {
		ep.Host = rapid.SampledFrom(genMCPHosts).Draw(t, "host")
	} else {
		ep.Host = rapid.SampledFrom(genHosts).Draw(t, "host")
	}
	switch rapid.IntRange(0, 5).Draw(t, "allowed_ips") {
	case 0:
		ep.AllowedIPs = []string{"10.0.0.0/8"}
	case 1:
		ep.AllowedIPs = []string{"93.184.216.0/24", "2606:4700::/32"}
	}
	// Endpoints on one host:port may disagree on tls (opa.rs
	// l7_overlapping_policies_*): skip must change no decision.
	if rapid.IntRange(0, 4).Draw(t, "tls skip") == 0 {
		ep.TLS = "skip"
	}
	switch ep.Protocol {
	case policy.ProtocolREST:
		if rapid.Bool().Draw(t, "scoped") {
			ep.Path = rapid.SampledFrom([]string{"/v1/**", "/admin", "/v1/*"}).Draw(t, "scope")
		}
		ep.AllowEncodedSlash = rapid.IntRange(0, 4).Draw(t, "encoded") == 0
		if rapid.IntRange(0, 3).Draw(t, "preset") == 0 {
			ep.Access = rapid.SampledFrom([]string{"read-only", "read-write", "full"}).Draw(t, "access")
		} else {
			for range rapid.IntRange(1, 4).Draw(t, "rules") {
				r := genRESTRule(t)
				if rapid.IntRange(0, 3).Draw(t, "expires") == 0 {
					e := rapid.SampledFrom(genExpiries).Draw(t, "expires_at")
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
	case policy.ProtocolWebSocket:
		ep.Rules = []policy.Rule{{Allow: &policy.L7Rule{Method: "GET", Path: "/ws"}}}
	}
	return ep
}

func genRESTRule(t *rapid.T) *policy.L7Rule {
	r := &policy.L7Rule{Method: rapid.SampledFrom(genMethods[:6]).Draw(t, "method")}
	if r.Method == "" {
		r.Method = "*"
	}
	if rapid.IntRange(0, 5).Draw(t, "anypath") > 0 {
		r.Path = rapid.SampledFrom(genRESTPaths).Draw(t, "path")
	} else {
		r.Path = "/**"
	}
	if rapid.IntRange(0, 5).Draw(t, "query") == 0 {
		r.Query = map[string]*policy.Matcher{"q": {Any: []string{rapid.SampledFrom([]string{"a*", "x", "*/y", "[a", "a**", "a\\", "{a1,b}", "{x,a{1,2}}", "{a"}).Draw(t, "qglob")}}}
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
		opts.Versions = rapid.SliceOfNDistinct(rapid.SampledFrom(genVersions), 1, 3, rapid.ID[string]).Draw(t, "version list")
	}
	if rapid.IntRange(0, 3).Draw(t, "max_body") == 0 {
		opts.MaxBodyBytes = 1024
	}
	ep.MCP = opts
	if rapid.Bool().Draw(t, "mcp scoped") {
		ep.Path = "/mcp"
	}
	if !opts.AllowAllKnownMCPMethods || rapid.Bool().Draw(t, "rules with allow_all") {
		for range rapid.IntRange(1, 4).Draw(t, "mcp rules") {
			r := genMCPRule(t, strict, opts.AllowAllKnownMCPMethods, true)
			ep.Rules = append(ep.Rules, policy.Rule{Allow: r})
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
		r.Prompt = &policy.Matcher{Any: []string{rapid.SampledFrom(genPrompts).Draw(t, "prompt")}}
		return r
	case policy.IsResourceMethod(r.Method) && rapid.IntRange(0, 3).Draw(t, "resource kind") > 0:
		r.Resource = &policy.Matcher{Any: []string{rapid.SampledFrom(genResources).Draw(t, "resource")}}
		return r
	}
	if r.Method != "tools/call" {
		return r
	}
	switch rapid.IntRange(0, 4).Draw(t, "tool kind") {
	case 0: // any tool
	case 1:
		if strict {
			r.Tool = &policy.Matcher{Any: []string{"lookup_*"}}
			break
		}
		fallthrough
	case 2:
		r.Tool = &policy.Matcher{Any: []string{rapid.SampledFrom(genTools).Draw(t, "tool"), rapid.SampledFrom(genTools).Draw(t, "tool2")}}
	default:
		tool := rapid.SampledFrom(genTools).Draw(t, "tool")
		if rapid.Bool().Draw(t, "params.name") {
			r.Params = map[string]*policy.Matcher{"name": {Any: []string{tool}}}
		} else {
			r.Tool = &policy.Matcher{Any: []string{tool}}
		}
		if allow && rapid.Bool().Draw(t, "schema") {
			r.ArgumentsSchema = genSchema
		}
	}
	if allow && rapid.IntRange(0, 3).Draw(t, "mcp expires") == 0 {
		e := rapid.SampledFrom(genExpiries).Draw(t, "mcp expires_at")
		r.ExpiresAt = &e
	}
	if allow {
		r.Review = genReview(t)
	}
	return r
}

// genReview draws an allow rule's review: mostly none, else required with
// the default or a timeout of its own, or one not required (the same as
// none).
func genReview(t *rapid.T) *policy.Review {
	switch rapid.IntRange(0, 5).Draw(t, "review") {
	case 0:
		return &policy.Review{Required: true}
	case 1:
		return &policy.Review{Required: true, Timeout: rapid.SampledFrom([]string{"30s", "5m", "15m"}).Draw(t, "review timeout")}
	case 2:
		return &policy.Review{}
	}
	return nil
}

// vocabulary is what a policy talks about, to draw requests that hit it:
// one target per endpoint (its host spellings, ports, binaries, methods,
// paths and tools) and the union of all.
type vocabulary struct {
	targets []vocabTarget
	all     vocabTarget
}

type vocabTarget struct {
	hosts, binaries, methods, paths, tools []string
	ports                                  []int
}

func vocabularyOf(p *policy.Policy) vocabulary {
	v := vocabulary{all: vocabTarget{
		ports:    []int{443, 80, 8080, 2379, 0},
		tools:    []string{"lookup_order", "refund_order", "tool.a", "lookup_x", "bad name!", ""},
		binaries: []string{curl, python, "/opt/x/bin/python3", "", "/usr/bin/../bin/curl", "/usr//bin/curl", "curl"},
		methods:  []string{"GET", "POST", "HEAD", "PUT", "DELETE", "get", "OPTIONS", "PATCH"},
		hosts:    []string{"example.com", "x.example.com", "pypi.org"},
		paths: []string{"/", "", "/mcp", "/mcp/", "//v1/items", "/v1/%69tems", "/v1/../admin", "/x/%2F", "/a b", "v1", "/v1/items?x=1", "/x/%2e%2e/admin",
			"/ADMIN/x", "/Admin;x/keys", "/admin%3Bx/keys", "/admin./x", "/a/;/b", "/x/..%2Fy", "/v1/ITEMS.", "/v1/%C4%B1tems"},
	}}
	for _, entry := range p.NetworkPolicies {
		if entry == nil {
			continue
		}
		var bins []string
		for _, b := range entry.Binaries {
			bins = append(bins, instantiate(b.Path)...)
		}
		if len(bins) == 0 {
			bins = []string{curl, ""}
		}
		for _, ep := range entry.Endpoints {
			if ep == nil {
				continue
			}
			tg := vocabTarget{binaries: bins, methods: []string{"GET", "POST"}}
			h := ep.Host
			switch {
			case strings.HasPrefix(h, "**."):
				tg.hosts = []string{"x" + h[2:], "a.b" + h[2:], h[3:]}
			case strings.HasPrefix(h, "*"):
				tg.hosts = []string{"x" + h[1:], strings.Replace(h, "*", "", 1)}
			case strings.Contains(h, "*"):
				tg.hosts = []string{strings.ReplaceAll(h, "*", "zz")}
			default:
				tg.hosts = []string{h}
			}
			if strings.Contains(h, "*") {
				// Every wildcard filled, filled with two labels, and
				// filled with bytes outside the host-name alphabet.
				tg.hosts = append(tg.hosts, strings.ReplaceAll(strings.ReplaceAll(h, "**", "a.b"), "*", "x"),
					strings.ReplaceAll(h, "*", "a.b"), strings.ReplaceAll(h, "*", "a\x00b"), strings.ReplaceAll(h, "*", "a*"))
			}
			tg.ports = policy.EndpointPorts(ep)
			tg.paths = append(tg.paths, instantiate(ep.Path)...)
			rules := []*policy.L7Rule{}
			for _, r := range ep.Rules {
				rules = append(rules, r.Allow)
			}
			for _, r := range append(rules, ep.DenyRules...) {
				if r == nil {
					continue
				}
				tg.paths = append(tg.paths, instantiate(r.Path)...)
				if r.Method != "" && !strings.Contains(r.Method, "/") {
					tg.methods = append(tg.methods, r.Method)
				}
				if tool := ruleTool(r); tool != nil {
					tg.tools = append(tg.tools, instantiate(tool.Any[0])...)
				}
			}
			if len(tg.paths) == 0 {
				tg.paths = []string{"/", "/v1/items"}
			}
			if len(tg.tools) == 0 {
				tg.tools = []string{"lookup_order"}
			}
			v.targets = append(v.targets, tg)
			v.all.hosts = append(v.all.hosts, tg.hosts...)
			v.all.ports = append(v.all.ports, tg.ports...)
			v.all.paths = append(v.all.paths, tg.paths...)
			v.all.tools = append(v.all.tools, tg.tools...)
		}
	}
	return v
}

// instantiate turns a glob into paths it should and nearly should match.
func instantiate(g string) []string {
	if g == "" {
		return nil
	}
	r := strings.NewReplacer("**", "a/b", "*", "x", "?", "e", "[bc]", "c", "\\", "")
	s := r.Replace(g)
	return []string{g, s, s + "/", strings.TrimSuffix(s, "/"), s + "/z", "/v1" + s, strings.ToUpper(s)}
}

func (v vocabulary) request(t *rapid.T) policy.Request {
	// Mostly one endpoint's vocabulary, so that requests reach rules; at
	// times any of the policy's words, or odd ones.
	tg := v.all
	if len(v.targets) > 0 && rapid.IntRange(0, 7).Draw(t, "targeted") > 0 {
		tg = rapid.SampledFrom(v.targets).Draw(t, "target")
	}
	pick := func(own, all []string, label string) string {
		if len(own) == 0 || rapid.IntRange(0, 9).Draw(t, label+" from all") == 0 {
			own = all
		}
		return rapid.SampledFrom(own).Draw(t, label)
	}
	r := policy.Request{Binary: pick(tg.binaries, v.all.binaries, "binary")}
	for range rapid.IntRange(0, 2).Draw(t, "ancestors") {
		r.Ancestors = append(r.Ancestors, pick(tg.binaries, v.all.binaries, "ancestor"))
	}
	r.Port = rapid.SampledFrom(tg.ports).Draw(t, "port")
	if rapid.IntRange(0, 9).Draw(t, "port from all") == 0 {
		r.Port = rapid.SampledFrom(v.all.ports).Draw(t, "any port")
	}
	host := pick(tg.hosts, v.all.hosts, "host")
	switch rapid.IntRange(0, 15).Draw(t, "host spelling") {
	case 0:
		host = strings.ToUpper(host)
	case 1:
		host += "."
	case 2:
		host = " " + host + ".."
	case 3:
		host = rapid.SampledFrom([]string{"1572395042", "0x5db8d822", "::ffff:93.184.216.34", "[2606:4700::1111]", "2606:4700:0::1111",
			"169.254.169.254", "metadata.google.internal", "localhost", "127.0.0.1", "a.localhost", "", "10.1.2.3", "0x0a010203", "ＡＰＩ.example.com", "ａｐｉ.example.com",
			"a\x00.example.com", "*.example.com", "a b.example.com", "é.example.com"}).Draw(t, "odd host")
	}
	r.Host = host
	if ip, ok := policy.ParseHostIP(host); ok && rapid.IntRange(0, 3).Draw(t, "literal addr") > 0 {
		r.Addr = ip
	} else if rapid.IntRange(0, 3).Draw(t, "public addr") > 0 {
		r.Addr = pubIP
	} else {
		r.Addr = rapid.SampledFrom([]netip.Addr{{}, netip.MustParseAddr("10.1.2.3"), netip.MustParseAddr("127.0.0.1"),
			netip.MustParseAddr("2606:4700::1111"), netip.MustParseAddr("::ffff:10.1.2.3"), netip.MustParseAddr("64:ff9b::a01:203")}).Draw(t, "addr")
	}
	r.DevAllowLoopback = rapid.IntRange(0, 9).Draw(t, "dev loopback") == 0
	if rapid.IntRange(0, 4).Draw(t, "time now") > 0 {
		r.Time = rapid.SampledFrom(genExpiries).Draw(t, "time base").Add(time.Duration(rapid.IntRange(-1, 1).Draw(t, "time offset")) * time.Second)
	}
	if rapid.IntRange(0, 4).Draw(t, "l4") == 0 {
		return r
	}
	r.HTTPMethod = pick(tg.methods, v.all.methods, "http method")
	r.Path = pick(tg.paths, v.all.paths, "path")
	r.Query = rapid.SampledFrom([]string{"", "", "q=a1", "q=a1&q=b", "q=x/y", "q=%zz", "r=1"}).Draw(t, "query")
	if strings.EqualFold(r.HTTPMethod, "POST") && rapid.IntRange(0, 3).Draw(t, "mcp message") > 0 {
		m := &policy.MCPMessage{
			Method: rapid.SampledFrom([]string{"tools/call", "tools/call", "tools/call", "tools/list", "initialize", "ping", "notifications/initialized", "foo/bar", "", "resources/read", "server/discover",
				"prompts/get", "prompts/get", "resources/read", "resources/subscribe", "resources/unsubscribe"}).Draw(t, "mcp method"),
			ProtocolVersion: rapid.SampledFrom([]string{"", "", "2025-11-25", "2026-07-28", "2025-03-26", "1999-01-01"}).Draw(t, "mcp version"),
			Response:        rapid.IntRange(0, 19).Draw(t, "response") == 0,
		}
		switch {
		case m.Method == "prompts/get":
			m.Prompt = rapid.SampledFrom(reqPrompts).Draw(t, "prompt")
		case policy.IsResourceMethod(m.Method):
			m.Resource = rapid.SampledFrom(reqResources).Draw(t, "resource")
		}
		if m.Method == "tools/call" {
			m.Tool = pick(tg.tools, v.all.tools, "tool")
			if args := rapid.SampledFrom([]string{"", `{"order_id":"A-1042"}`, `{"order_id":"A-1042"}`, `{"order_id":"x"}`, `{"order_id":"A-1042","x":1}`, `{`, `[]`, " "}).Draw(t, "args"); args != "" {
				m.Arguments = json.RawMessage(args)
			}
		}
		r.MCP = m
	}
	return r
}

// ---------------------------------------------------------------------------
// The helpers against the policy package's.

func TestGlobAgreesWithPolicy(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		pat := rapid.StringOfN(rapid.SampledFrom([]rune("abAB/*?[]!^-\\.%3")), 1, 10, -1).Draw(t, "pattern")
		s := rapid.StringOfN(rapid.SampledFrom([]rune("abAB/.-]!%3")), 0, 10, -1).Draw(t, "s")
		g := compileGlob(pat)
		if got, want := g.match(s), policy.MatchGlob(pat, s); got != want {
			t.Fatalf("match(%q, %q) = %v, policy.MatchGlob = %v", pat, s, got, want)
		}
		if got, want := g.matchDeny(s), policy.MatchDenyGlob(pat, s); got != want {
			t.Fatalf("matchDeny(%q, %q) = %v, policy.MatchDenyGlob = %v", pat, s, got, want)
		}
		pg := compilePathGlob(pat)
		if got, want := pg.matchDenyPath(s), policy.MatchDenyPath(pat, s); got != want {
			t.Fatalf("matchDenyPath(%q, %q) = %v, policy.MatchDenyPath = %v", pat, s, got, want)
		}
		if g.isLiteral() && g.match(s) != (s == pat) {
			t.Fatalf("literal glob %q: match(%q) = %v", pat, s, g.match(s))
		}
	})
}

func TestCanonicalPathAgreesWithPolicy(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		raw := rapid.StringOfN(rapid.SampledFrom([]rune("/a.%2Ff5c;?#\\ é~:@x\x00")), 0, 12, -1).Draw(t, "path")
		slash := rapid.Bool().Draw(t, "allow_encoded_slash")
		got, gerr := canonicalPath(raw, slash)
		want, werr := policy.CanonicalPath(raw, slash)
		if got != want || (gerr == nil) != (werr == nil) || gerr != nil && gerr.Error() != werr.Error() {
			t.Fatalf("canonicalPath(%q) = %q, %v; policy: %q, %v", raw, got, gerr, want, werr)
		}
	})
}

// TestHelpersAgreeWithPolicy checks the matcher's use of policy's tables
// (known MCP methods, loopback names) through policy.Decide.
func TestHelpersAgreeWithPolicy(t *testing.T) {
	p := &policy.Policy{Version: 1, NetworkPolicies: map[string]*policy.NetworkPolicy{"m": {
		Endpoints: []*policy.Endpoint{{Host: "mcp.example.net", Port: 443, Protocol: "mcp", MCP: &policy.MCPOptions{AllowAllKnownMCPMethods: true}}},
	}}}
	m := mustCompile(t, p)
	methods := []string{"server/discover", "sampling/createMessage", "elicitation/create", "roots/list", "notifications/message",
		"notifications/resources/updated", "resources/templates/list", "completion/complete", "logging/setLevel", "tasks/get", "x",
		"initialize", "ping", "tools/list", "tools/call", "resources/read", "prompts/get", "notifications/initialized"}
	for _, method := range methods {
		r := policy.Request{Host: "mcp.example.net", Addr: pubIP, Port: 443, HTTPMethod: "POST", Path: "/", Time: when,
			MCP: &policy.MCPMessage{Method: method, Tool: "t"}}
		agree(t, m, r)
	}
	for _, host := range []string{"localhost", "LOCALHOST.", "a.localhost", "localhost..", "ｌｏｃａｌｈｏｓｔ", "notlocalhost", "localhost.example"} {
		agree(t, m, policy.Request{Host: host, Port: 443, Time: when})
	}
}

func TestMatcherNamesBinaries(t *testing.T) {
	for doc, want := range map[string]bool{
		"version: 1\nnetwork_policies: {a: {endpoints: [{host: a.example.com, port: 443}], binaries: []}}\n":                   false,
		"version: 1\nnetwork_policies: {a: {endpoints: [{host: a.example.com, port: 443}], binaries: [{path: /usr/bin/x}]}}\n": true,
		"version: 1\n": false,
	} {
		if got := mustCompile(t, parse(t, doc)).NamesBinaries(); got != want {
			t.Errorf("NamesBinaries of %q = %v, want %v", doc, got, want)
		}
	}
	var nilMatcher *Matcher
	if nilMatcher.NamesBinaries() {
		t.Error("a nil matcher names binaries")
	}
}

// TestMatcherDenySpellings: every spelling of a denied path that some
// common server routes to it is denied by the matcher as by Decide
// (issue 11, finding 3); allow rules stay exact.
func TestMatcherDenySpellings(t *testing.T) {
	m := mustCompile(t, parse(t, `
version: 1
network_policies:
  api:
    endpoints:
      - host: api.example.com
        port: 443
        protocol: rest
        enforcement: enforce
        access: full
        deny_rules:
          - { method: GET, path: "/admin/**" }
          - { method: GET, path: "/a/secret" }
      - host: pub.example.com
        port: 443
        protocol: rest
        enforcement: enforce
        allow_encoded_slash: true
        rules:
          - allow: { method: GET, path: "/public/**" }
    binaries: []
`))
	for _, path := range denySpellings {
		for _, method := range []string{"GET", "HEAD"} {
			r := policy.Request{Binary: curl, Host: "api.example.com", Addr: pubIP, Port: 443, HTTPMethod: method, Path: path, Time: when}
			if d := agree(t, m, r); d.Allow {
				t.Errorf("%s %s allowed: %s", method, path, d.Reason)
			}
		}
	}
	for _, tc := range []struct {
		path  string
		allow bool
	}{
		{"/public/x", true}, {"/public/x;a=1", true}, {"/public/a%2Fb", true},
		{"/PUBLIC/x", false}, {"/public./x", false}, {"/public%3Bx/y", false},
		{"/public/..%2fsecret", false}, {"/public/.%2fsecret", false}, {"/public/..%3Bx/secret", false},
	} {
		r := policy.Request{Binary: curl, Host: "pub.example.com", Addr: pubIP, Port: 443, HTTPMethod: "GET", Path: tc.path, Time: when}
		if d := agree(t, m, r); d.Allow != tc.allow {
			t.Errorf("GET %s: allow = %v (%s), want %v", tc.path, d.Allow, d.Reason, tc.allow)
		}
	}
}

// denySpellings are spellings of /admin/keys and /a/secret that a common
// server routes there (policy's spelling_test.go explains each).
var denySpellings = []string{
	"/admin/keys", "/admin;jsessionid=x/keys", "/admin;/keys", "/a/;/secret", "/a;x/secret;y",
	"/public/..;/admin/keys", "/public/.;x/../admin/keys", "/ADMIN/keys", "/Admin/Keys", "/%41dmin/keys",
	"/A/SECRET", "/admin%2e/keys", "/admin./keys", "/a/secret%2e", "/a/secret.", "/a/secret/",
	"/admin%3Bx/keys", "/a/secret%3Bjsessionid=1", "/a/secret%3B", "/adm%C4%B1n/keys", "/a/%C5%BFecret",
	"/v1/../admin/keys", "/v1/%2e%2e/admin/keys",
}
