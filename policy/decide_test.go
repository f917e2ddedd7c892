package policy

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// Helpers to build policies as Go literals.

func pol(entries map[string]*NetworkPolicy) *Policy {
	return &Policy{Version: 1, NetworkPolicies: entries}
}

func entry(binaries []string, eps ...*Endpoint) *NetworkPolicy {
	bs := make([]Binary, len(binaries))
	for i, b := range binaries {
		bs[i] = Binary{Path: b}
	}
	return &NetworkPolicy{Endpoints: eps, Binaries: bs}
}

func allow(r L7Rule) Rule { return Rule{Allow: &r} }

func anyOf(globs ...string) *Matcher { return &Matcher{Any: globs} }

func boolp(b bool) *bool { return &b }

var (
	curl   = "/usr/bin/curl"
	python = "/usr/bin/python3"
	now    = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	pubIP  = netip.MustParseAddr("93.184.216.34")
)

// req builds a request from curl to host:port resolved to a public address.
func req(host string, port int) Request {
	return Request{Binary: curl, Host: host, Addr: pubIP, Port: port, Time: now}
}

func (r Request) http(method, path string) Request {
	r.HTTPMethod, r.Path = method, path
	return r
}

func (r Request) from(binary string) Request { r.Binary = binary; return r }

func (r Request) under(ancestors ...string) Request { r.Ancestors = ancestors; return r }

func (r Request) at(addr string) Request {
	if addr == "" {
		r.Addr = netip.Addr{}
	} else {
		r.Addr = netip.MustParseAddr(addr)
	}
	return r
}

func (r Request) mcp(method, tool string, args string) Request {
	r.HTTPMethod, r.Path = "POST", "/mcp"
	r.MCP = &MCPMessage{Method: method, Tool: tool, ProtocolVersion: DefaultMCPVersion}
	if args != "" {
		r.MCP.Arguments = json.RawMessage(args)
	}
	return r
}

// want is the part of a Decision a test checks; empty strings are not
// checked.
type want struct {
	allow, audit, versionRefused bool
	entry, rule, reason          string
}

type decideCase struct {
	name string
	p    *Policy
	r    Request
	want want
}

func runDecide(t *testing.T, cases []decideCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := Decide(tc.p, tc.r)
			w := tc.want
			if got.Allow != w.allow || got.Audit != w.audit || got.VersionRefused != w.versionRefused ||
				w.entry != "" && got.Entry != w.entry || w.rule != "" && got.Rule != w.rule ||
				!strings.Contains(got.Reason, w.reason) {
				t.Errorf("Decide = %+v\nwant %+v", got, w)
			}
			if got.Allow && got.Entry == "" {
				t.Errorf("allowed without an entry: %+v", got)
			}
			if got.Reason == "" {
				t.Errorf("decision without a reason: %+v", got)
			}
		})
	}
}

func l4(host string, port int) *Endpoint { return &Endpoint{Host: host, Port: port} }

// TestDecideAncestors: a rule's binary matches the calling executable or
// any of its ancestors, exactly or by glob, as OpenShell's binary_allowed
// (sandbox-policy.rego: exec.path and exec.ancestors; python3 run by git
// passes a git rule). Nothing of an unknown caller matches.
func TestDecideAncestors(t *testing.T) {
	git := "/usr/bin/git"
	p := pol(map[string]*NetworkPolicy{
		"git":   entry([]string{git}, l4("github.com", 443)),
		"tools": entry([]string{"/opt/tools/**"}, l4("tools.example.com", 443)),
	})
	runDecide(t, []decideCase{
		{"the executable itself", p, req("github.com", 443).from(git), want{allow: true, entry: "git"}},
		{"python3 whose parent is git", p, req("github.com", 443).from(python).under(git), want{allow: true, entry: "git"}},
		{"git further up", p, req("github.com", 443).from(python).under("/bin/sh", "/usr/bin/make", git), want{allow: true, entry: "git"}},
		{"no ancestor matches", p, req("github.com", 443).from(python).under("/bin/sh"), want{reason: "do not list that binary"}},
		{"glob on an ancestor", p, req("tools.example.com", 443).from(curl).under("/opt/tools/x/run"), want{allow: true, entry: "tools"}},
		{"glob on an ancestor stays a path glob", p, req("tools.example.com", 443).from(curl).under("/opt/toolsx/run"), want{}},
		{"an unknown caller's ancestors do not count", p, req("github.com", 443).from("").under(git), want{reason: "unidentified binary"}},
		{"an unclean ancestor path is no match", p, req("tools.example.com", 443).from(curl).under("/opt/tools/../../tmp/x"), want{}},
		{"an unclean ancestor does not hide a clean one", p, req("github.com", 443).from(python).under("/usr//bin/git", git), want{allow: true, entry: "git"}},
		{"ancestors do not reach another destination", p, req("example.com", 443).from(python).under(git), want{reason: "default deny"}},
	})
}

func TestDecideL4AndDefaults(t *testing.T) {
	p := pol(map[string]*NetworkPolicy{
		"web":  entry([]string{curl}, l4("example.com", 443)),
		"anyb": entry(nil, l4("open.example.com", 443)),
		"wild": entry([]string{"/usr/bin/*", "/opt/tools/**"}, &Endpoint{Host: "*.glob.example.com", Ports: []int{80, 443}}),
	})
	runDecide(t, []decideCase{
		{"nil policy denies", nil, req("example.com", 443), want{reason: "default deny"}},
		{"empty policy denies", pol(nil), req("example.com", 443), want{reason: "default deny"}},
		{"l4 allows", p, req("example.com", 443), want{allow: true, entry: "web", rule: "endpoint"}},
		{"host case and trailing dot", p, req("EXAMPLE.com.", 443), want{allow: true, entry: "web"}},
		{"other port denied", p, req("example.com", 8443), want{reason: "default deny"}},
		{"other host denied", p, req("example.org", 443), want{reason: "default deny"}},
		{"other binary denied", p, req("example.com", 443).from(python), want{reason: "do not list that binary"}},
		{"unknown binary never matches a named binary", p, req("example.com", 443).from(""), want{reason: "unidentified binary"}},
		{"empty binaries = any binary", p, req("open.example.com", 443).from(python), want{allow: true, entry: "anyb"}},
		{"empty binaries admit an unknown binary", p, req("open.example.com", 443).from(""), want{allow: true, entry: "anyb"}},
		{"binary glob *", p, req("a.glob.example.com", 80).from("/usr/bin/wget"), want{allow: true, entry: "wild"}},
		{"binary glob * stays in its directory", p, req("a.glob.example.com", 80).from("/usr/bin/x/wget"), want{}},
		{"binary glob **", p, req("a.glob.example.com", 443).from("/opt/tools/a/b/run"), want{allow: true, entry: "wild"}},
		{"ports list", p, req("a.glob.example.com", 8080), want{}},
		{"host wildcard is one label", p, req("a.b.glob.example.com", 443), want{}},
		{"l4 endpoint admits an inspected request too", p, req("example.com", 443).http("DELETE", "/x"), want{allow: true, entry: "web"}},
		{"no destination", p, Request{Binary: curl, Port: 443}, want{reason: "no destination"}},
		{"port zero", p, req("example.com", 0), want{reason: "not a valid port"}},
	})
}

func TestDecideAlwaysDenied(t *testing.T) {
	// A policy that tries to open everything it names.
	open := func(host string, port int) *Policy {
		return pol(map[string]*NetworkPolicy{"all": entry(nil, &Endpoint{Host: host, Port: port})})
	}
	var cases []decideCase
	metadataSpellings := []string{
		"169.254.169.254", "2852039166", "0xA9FEA9FE", "0xa9.0xfe.0xa9.0xfe", "0251.0376.0251.0376", "169.254.43518",
		"169.254.169.254.", "[::ffff:169.254.169.254]", "[64:ff9b::a9fe:a9fe]",
		"169.254.170.2", "169.254.170.23", "[fd00:ec2::254]", "[fd00:ec2::23]", "100.100.100.200", "0x646464c8",
		"168.63.129.16", "[::ffff:a83f:8110]", "metadata.google.internal", "METADATA.GOOGLE.INTERNAL.", "metadata.azure.internal",
	}
	for _, h := range metadataSpellings {
		cases = append(cases, decideCase{"metadata host " + h, open(h, 80), req(h, 80).at(""), want{reason: "always denied"}})
	}
	loopbackSpellings := []string{"127.0.0.1", "127.1", "2130706433", "0x7f000001", "017700000001", "[::1]", "[::ffff:127.0.0.1]", "localhost", "api.localhost"}
	for _, h := range loopbackSpellings {
		cases = append(cases, decideCase{"loopback host " + h, open(h, 80), req(h, 80).at(""), want{reason: "loopback"}})
	}
	for _, h := range []string{"127.0.0.1", "localhost", "[::1]"} {
		cases = append(cases, decideCase{"dev flag opens loopback " + h, open(h, 80),
			func() Request { r := req(h, 80).at(""); r.DevAllowLoopback = true; return r }(), want{allow: true}})
	}
	for _, h := range []string{"169.254.1.1", "[fe80::1]", "0.0.0.0", "0", "[::]", "224.0.0.1", "255.255.255.255", "[ff02::1]"} {
		cases = append(cases, decideCase{"literal host " + h, open(h, 80), req(h, 80).at(""), want{reason: "always denied"}})
	}
	// Resolved addresses: a harmless name that resolves somewhere forbidden.
	for _, a := range []string{"169.254.169.254", "::ffff:169.254.169.254", "64:ff9b::a9fe:a9fe", "127.0.0.1", "::1", "fe80::1", "0.0.0.0", "100.100.100.200", "168.63.129.16", "fd00:ec2::254"} {
		cases = append(cases, decideCase{"resolved " + a, open("rebind.example.com", 80), req("rebind.example.com", 80).at(a), want{reason: "always-denied"}})
	}
	dev := req("rebind.example.com", 80).at("127.0.0.1")
	dev.DevAllowLoopback = true
	cases = append(cases, decideCase{"dev flag: resolved loopback", open("rebind.example.com", 80), dev, want{allow: true}})
	devMeta := req("rebind.example.com", 80).at("169.254.169.254")
	devMeta.DevAllowLoopback = true
	cases = append(cases, decideCase{"dev flag never opens metadata", open("rebind.example.com", 80), devMeta, want{reason: "metadata"}})
	for _, port := range []int{2379, 2380, 6443, 10250, 10255} {
		cases = append(cases, decideCase{fmt.Sprintf("control-plane port %d", port), open("k8s.example.com", port), req("k8s.example.com", port), want{reason: "control-plane port"}})
	}
	cases = append(cases, decideCase{"ip-literal host must equal the dialled address", open("8.8.8.8", 80), req("8.8.8.8", 80).at("8.8.4.4"), want{reason: "would dial"}})
	cases = append(cases, decideCase{"ip-literal host in another spelling", open("8.8.8.8", 80), req("134744072", 80).at("8.8.8.8"), want{allow: true}})
	// Audit mode never opens an always-denied destination.
	audit := pol(map[string]*NetworkPolicy{"a": entry(nil, &Endpoint{Host: "rebind.example.com", Port: 80, Enforcement: EnforcementAudit})})
	cases = append(cases, decideCase{"audit does not open metadata", audit, req("rebind.example.com", 80).at("169.254.169.254"), want{reason: "metadata"}})
	runDecide(t, cases)
}

func TestDecidePrivateAddresses(t *testing.T) {
	p := pol(map[string]*NetworkPolicy{
		"exact":    entry(nil, l4("db.corp.example.com", 5432)),
		"covered":  entry(nil, &Endpoint{Host: "git.corp.example.com", Port: 443, AllowedIPs: []string{"10.0.0.0/8", "fd00::/8"}}),
		"single":   entry(nil, &Endpoint{Host: "one.corp.example.com", Port: 443, AllowedIPs: []string{"192.168.1.5"}}),
		"hostless": entry(nil, &Endpoint{Port: 6379, AllowedIPs: []string{"10.1.0.0/16"}}),
		"nohost":   entry(nil, &Endpoint{Port: 6380}),
	})
	runDecide(t, []decideCase{
		{"exact hostname to private address needs allowed_ips", p, req("db.corp.example.com", 5432).at("10.0.0.5"), want{reason: "needs allowed_ips"}},
		{"exact hostname to CGNAT", p, req("db.corp.example.com", 5432).at("100.64.1.1"), want{reason: "private"}},
		{"exact hostname to ULA", p, req("db.corp.example.com", 5432).at("fd12::1"), want{reason: "private"}},
		{"exact hostname to TEST-NET", p, req("db.corp.example.com", 5432).at("192.0.2.1"), want{reason: "private"}},
		{"exact hostname to 198.18/15", p, req("db.corp.example.com", 5432).at("198.18.0.1"), want{reason: "private"}},
		{"exact hostname to mapped private", p, req("db.corp.example.com", 5432).at("::ffff:10.0.0.5"), want{reason: "private"}},
		{"exact hostname to NAT64 private", p, req("db.corp.example.com", 5432).at("64:ff9b::a00:5"), want{reason: "private"}},
		{"exact hostname, public address", p, req("db.corp.example.com", 5432), want{allow: true}},
		{"exact hostname, unresolved", p, req("db.corp.example.com", 5432).at(""), want{allow: true}},
		{"allowed_ips covers", p, req("git.corp.example.com", 443).at("10.9.9.9"), want{allow: true, entry: "covered"}},
		{"allowed_ips covers v6", p, req("git.corp.example.com", 443).at("fd00::9"), want{allow: true}},
		{"allowed_ips is an allowlist", p, req("git.corp.example.com", 443).at("172.16.0.1"), want{reason: "outside the allowed_ips"}},
		{"allowed_ips refuses public too", p, req("git.corp.example.com", 443), want{reason: "outside the allowed_ips"}},
		{"allowed_ips single address", p, req("one.corp.example.com", 443).at("192.168.1.5"), want{allow: true}},
		{"allowed_ips single address, other", p, req("one.corp.example.com", 443).at("192.168.1.6"), want{reason: "outside"}},
		{"private IP literal host", p, req("10.0.0.5", 5432).at(""), want{}},
		{"hostless endpoint by address", p, req("cache.internal", 6379).at("10.1.2.3"), want{allow: true, entry: "hostless"}},
		{"hostless endpoint by IP literal", p, req("10.1.2.3", 6379).at(""), want{allow: true, entry: "hostless"}},
		{"hostless endpoint outside", p, req("cache.internal", 6379).at("10.2.0.1"), want{}},
		{"hostless endpoint needs an address", p, req("cache.internal", 6379).at(""), want{}},
		{"hostless endpoint without allowed_ips matches nothing", p, req("x.example.com", 6380), want{}},
	})
}

func TestDecideREST(t *testing.T) {
	ro := &Endpoint{Host: "ro.example.com", Port: 443, Protocol: ProtocolREST, Access: AccessReadOnly}
	rw := &Endpoint{Host: "rw.example.com", Port: 443, Protocol: ProtocolREST, Access: AccessReadWrite}
	full := &Endpoint{Host: "full.example.com", Port: 443, Protocol: ProtocolREST, Access: AccessFull}
	past, future := now.Add(-time.Minute), now.Add(time.Hour)
	rules := &Endpoint{Host: "api.example.com", Port: 443, Protocol: ProtocolREST, Rules: []Rule{
		allow(L7Rule{Method: "GET", Path: "/v1/orders/*"}),
		allow(L7Rule{Method: "POST", Path: "/v1/orders/**"}),
		{}, // no allow: allows nothing
		allow(L7Rule{Method: "*", Path: "/v1/any"}),
		allow(L7Rule{Method: "GET", Path: "/search", Query: map[string]*Matcher{"tag": anyOf("foo-*", "bar")}}),
		allow(L7Rule{Method: "PUT", Path: "/v1/temp", ExpiresAt: &future}),
		allow(L7Rule{Method: "DELETE", Path: "/v1/temp", ExpiresAt: &past}),
		allow(L7Rule{Method: "PATCH", Path: "/v1/edge", ExpiresAt: &now}),
	}}
	slash := &Endpoint{Host: "npm.example.com", Port: 443, Protocol: ProtocolREST, AllowEncodedSlash: true,
		Rules: []Rule{allow(L7Rule{Method: "GET", Path: "/*"})}}
	p := pol(map[string]*NetworkPolicy{
		"ro": entry(nil, ro), "rw": entry(nil, rw), "full": entry(nil, full), "api": entry(nil, rules), "npm": entry(nil, slash),
	})
	runDecide(t, []decideCase{
		{"read-only GET", p, req("ro.example.com", 443).http("GET", "/x"), want{allow: true, rule: "access: read-only"}},
		{"read-only HEAD", p, req("ro.example.com", 443).http("HEAD", "/x"), want{allow: true}},
		{"read-only OPTIONS", p, req("ro.example.com", 443).http("OPTIONS", "/x"), want{allow: true}},
		{"read-only lowercase get", p, req("ro.example.com", 443).http("get", "/x"), want{allow: true}},
		{"read-only POST", p, req("ro.example.com", 443).http("POST", "/x"), want{reason: "POST /x is not allowed"}},
		{"read-write POST", p, req("rw.example.com", 443).http("POST", "/x"), want{allow: true, rule: "access: read-write"}},
		{"read-write PUT", p, req("rw.example.com", 443).http("PUT", "/x"), want{allow: true}},
		{"read-write PATCH", p, req("rw.example.com", 443).http("PATCH", "/x"), want{allow: true}},
		{"read-write DELETE", p, req("rw.example.com", 443).http("DELETE", "/x"), want{}},
		{"full DELETE", p, req("full.example.com", 443).http("DELETE", "/x"), want{allow: true, rule: "access: full"}},
		{"full custom method", p, req("full.example.com", 443).http("PROPFIND", "/x"), want{allow: true}},
		{"no L7 info on an L7 endpoint", p, req("full.example.com", 443), want{reason: "not inspected"}},
		{"rule GET", p, req("api.example.com", 443).http("GET", "/v1/orders/7"), want{allow: true, rule: "rules[0]"}},
		{"rule * stays in one segment", p, req("api.example.com", 443).http("GET", "/v1/orders/7/items"), want{reason: "no rule matches"}},
		{"rule ** crosses segments", p, req("api.example.com", 443).http("POST", "/v1/orders/7/items"), want{allow: true, rule: "rules[1]"}},
		{"rule wrong method", p, req("api.example.com", 443).http("DELETE", "/v1/orders/7"), want{}},
		{"rule * method", p, req("api.example.com", 443).http("DELETE", "/v1/any"), want{allow: true, rule: "rules[3]"}},
		{"dot segments resolved before matching", p, req("api.example.com", 443).http("GET", "/v1/x/../orders/7"), want{allow: true}},
		{"dot segments cannot escape the rule", p, req("api.example.com", 443).http("GET", "/v1/orders/../admin"), want{}},
		{"a/../admin", p, req("api.example.com", 443).http("GET", "/v1/orders/a/../admin"), want{allow: true}},
		{"%2e%2e resolved", p, req("api.example.com", 443).http("GET", "/v1/orders/%2e%2e/%2e%2e/admin"), want{}},
		{"%2e%2e into an allowed path", p, req("api.example.com", 443).http("GET", "/v2/%2e%2e/v1/orders/7"), want{allow: true}},
		{"// collapsed", p, req("api.example.com", 443).http("GET", "//v1//orders/7"), want{allow: true}},
		{"%2F refused", p, req("api.example.com", 443).http("GET", "/v1/orders/a%2Fb"), want{reason: "malformed request path"}},
		{"%2F allowed with allow_encoded_slash", p, req("npm.example.com", 443).http("GET", "/@scope%2Fname"), want{allow: true}},
		{"backslash refused", p, req("api.example.com", 443).http("GET", `/v1/orders\7`), want{reason: "malformed"}},
		{"NUL refused", p, req("api.example.com", 443).http("GET", "/v1/orders/%00"), want{reason: "malformed"}},
		{"percent-encoded letters", p, req("api.example.com", 443).http("GET", "/v1/%6Frders/7"), want{allow: true}},
		{"query matcher", p, req("api.example.com", 443).http("GET", "/search").withQuery("tag=foo-1"), want{allow: true, rule: "rules[4]"}},
		{"query matcher any", p, req("api.example.com", 443).http("GET", "/search").withQuery("tag=bar&x=1"), want{allow: true}},
		{"query matcher no match", p, req("api.example.com", 443).http("GET", "/search").withQuery("tag=baz"), want{}},
		{"query matcher missing param", p, req("api.example.com", 443).http("GET", "/search"), want{}},
		{"query matcher every value", p, req("api.example.com", 443).http("GET", "/search").withQuery("tag=foo-1&tag=evil"), want{}},
		{"query matcher decoded", p, req("api.example.com", 443).http("GET", "/search").withQuery("tag=%66oo-x"), want{allow: true}},
		{"query malformed", p, req("api.example.com", 443).http("GET", "/search").withQuery("tag=%zz"), want{}},
		{"path query stripped", p, req("api.example.com", 443).http("GET", "/v1/orders/7?x=1"), want{allow: true}},
		{"unexpired grant", p, req("api.example.com", 443).http("PUT", "/v1/temp"), want{allow: true, rule: "rules[5]"}},
		{"expired grant", p, req("api.example.com", 443).http("DELETE", "/v1/temp"), want{}},
		{"grant expiring exactly now", p, req("api.example.com", 443).http("PATCH", "/v1/edge"), want{}},
		{"grant still valid a moment before", p, req("api.example.com", 443).http("PATCH", "/v1/edge").atTime(now.Add(-time.Nanosecond)), want{allow: true}},
	})
}

func (r Request) withQuery(q string) Request { r.Query = q; return r }
func (r Request) atTime(t time.Time) Request { r.Time = t; return r }

func TestDecideDenyRules(t *testing.T) {
	gh := &Endpoint{Host: "api.github.com", Port: 443, Protocol: ProtocolREST, Access: AccessReadWrite, DenyRules: []*L7Rule{
		{Method: "POST", Path: "/repos/*/*/pulls/*/reviews"},
		{Method: "*", Path: "/repos/*/*/rulesets"},
		{Method: "GET", Path: "/search", Query: map[string]*Matcher{"q": anyOf("*secret*")}},
		{Method: "DELETE", Path: "/orgs/*/hooks"},
	}}
	p := pol(map[string]*NetworkPolicy{
		"github": entry([]string{curl}, gh),
		// A second entry, for another binary, that would allow everything.
		"python_all": entry([]string{python}, &Endpoint{Host: "api.github.com", Port: 443, Protocol: ProtocolREST, Access: AccessFull}),
		// A third, any binary, L4 only.
		"l4": entry(nil, l4("api.github.com", 443)),
	})
	runDecide(t, []decideCase{
		{"allowed by preset", p, req("api.github.com", 443).http("POST", "/repos/o/r/issues"), want{allow: true}},
		{"deny rule wins", p, req("api.github.com", 443).http("POST", "/repos/o/r/pulls/1/reviews"), want{entry: "github", rule: "deny_rules[0]", reason: "denied by deny_rules[0]"}},
		{"deny wins across entries (another binary)", p, req("api.github.com", 443).http("POST", "/repos/o/r/pulls/1/reviews").from(python), want{entry: "github", rule: "deny_rules[0]"}},
		{"deny wins over an L4 entry", p, req("api.github.com", 443).http("DELETE", "/repos/o/r/rulesets").from("/bin/other"), want{rule: "deny_rules[1]"}},
		{"deny wins with an unknown binary", p, req("api.github.com", 443).http("PUT", "/repos/o/r/rulesets").from(""), want{rule: "deny_rules[1]"}},
		{"deny through dot segments", p, req("api.github.com", 443).http("GET", "/x/../repos/o/r/rulesets").from(python), want{rule: "deny_rules[1]"}},
		{"deny through %2e%2e", p, req("api.github.com", 443).http("GET", "/x/%2e%2e/repos/o/r/rulesets").from(python), want{rule: "deny_rules[1]"}},
		{"a GET deny also denies HEAD", p, req("api.github.com", 443).http("HEAD", "/search").withQuery("q=my-secret"), want{rule: "deny_rules[2]"}},
		{"deny globs read widely: * crosses /", p, req("api.github.com", 443).http("DELETE", "/orgs/a/b/hooks"), want{rule: "deny_rules[3]"}},
		{"deny globs read widely: the narrow match still applies", p, req("api.github.com", 443).http("DELETE", "/orgs/a/hooks"), want{rule: "deny_rules[3]"}},
		{"deny through //", p, req("api.github.com", 443).http("GET", "//repos//o/r/rulesets").from(python), want{rule: "deny_rules[1]"}},
		{"deny query: one value matches", p, req("api.github.com", 443).http("GET", "/search").withQuery("q=ok&q=my-secret-x"), want{rule: "deny_rules[2]"}},
		{"deny query: crosses /", p, req("api.github.com", 443).http("GET", "/search").withQuery("q=a/secret/b"), want{rule: "deny_rules[2]"}},
		{"deny query: malformed query", p, req("api.github.com", 443).http("GET", "/search").withQuery("q=%zz"), want{rule: "deny_rules[2]"}},
		{"deny query: other value", p, req("api.github.com", 443).http("GET", "/search").withQuery("q=public"), want{allow: true}},
		{"other path allowed for python", p, req("api.github.com", 443).http("DELETE", "/repos/o/r").from(python), want{allow: true}},
		{"L4 request cannot pass deny rules unchecked", p, req("api.github.com", 443).from(python), want{reason: "without L7 inspection"}},
		{"deny host case-insensitive", p, req("API.GITHUB.COM.", 443).http("POST", "/repos/o/r/pulls/1/reviews").from(python), want{rule: "deny_rules[0]"}},
	})
}

func TestDecideDenyPathScope(t *testing.T) {
	// One host:port split by path: deny rules apply only inside their scope.
	p := pol(map[string]*NetworkPolicy{
		"rest": entry(nil,
			&Endpoint{Host: "api.example.com", Port: 443, Path: "/repos/**", Protocol: ProtocolREST, Access: AccessFull,
				DenyRules: []*L7Rule{{Method: "DELETE", Path: "/**"}}},
			&Endpoint{Host: "api.example.com", Port: 443, Path: "/graphql", Protocol: ProtocolGraphQL, Access: AccessReadOnly},
		),
	})
	runDecide(t, []decideCase{
		{"inside scope, denied", p, req("api.example.com", 443).http("DELETE", "/repos/x"), want{rule: "deny_rules[0]"}},
		{"inside scope, allowed", p, req("api.example.com", 443).http("PUT", "/repos/x"), want{allow: true, rule: "access: full"}},
		{"outside any scope", p, req("api.example.com", 443).http("GET", "/users"), want{}},
		{"graphql not inspected yet", p, req("api.example.com", 443).http("POST", "/graphql"), want{reason: "protocol graphql is not inspected yet"}},
		{"scope escape via dot segments", p, req("api.example.com", 443).http("DELETE", "/repos/../users"), want{}},
	})
}

func TestDecideUninspectedProtocols(t *testing.T) {
	for _, proto := range []string{ProtocolGraphQL, ProtocolWebSocket, ProtocolJSONRPC, ProtocolSQL} {
		p := pol(map[string]*NetworkPolicy{"x": entry(nil, &Endpoint{Host: "svc.example.com", Port: 443, Protocol: proto, Access: AccessFull, Enforcement: EnforcementAudit,
			Rules: []Rule{allow(L7Rule{Method: "*"})}})})
		runDecide(t, []decideCase{
			{proto + " with L7", p, req("svc.example.com", 443).http("GET", "/"), want{reason: "protocol " + proto + " is not inspected yet"}},
			{proto + " without L7", p, req("svc.example.com", 443), want{reason: "not inspected yet"}},
		})
		// Deny rules of such an endpoint cannot be checked: they close the
		// destination to every other entry too.
		q := pol(map[string]*NetworkPolicy{
			"x":  entry(nil, &Endpoint{Host: "svc.example.com", Port: 443, Protocol: proto, Access: AccessFull, DenyRules: []*L7Rule{{Method: "DELETE"}}}),
			"l4": entry(nil, l4("svc.example.com", 443)),
		})
		runDecide(t, []decideCase{{proto + " deny rules close the destination", q, req("svc.example.com", 443).http("GET", "/"), want{reason: "not inspected yet"}}})
	}
}

// TestDecideTCPEndpoints: a tcp endpoint (OpenShell's transparent TCP)
// allows a connection exactly as an L4 endpoint does — host, ports,
// allowed_ips, binaries — and reads nothing of it.
func TestDecideTCPEndpoints(t *testing.T) {
	redis := &Endpoint{Host: "redis.example.com", Port: 6379, Protocol: ProtocolTCP, AllowedIPs: []string{"10.0.0.0/8"}}
	p := pol(map[string]*NetworkPolicy{
		"redis": entry([]string{"/usr/bin/redis-cli"}, redis),
		"pg":    entry(nil, &Endpoint{Host: "*.db.example.com", Ports: []int{5432, 5433}, Protocol: ProtocolTCP}),
	})
	cli := func(r Request) Request { return r.from("/usr/bin/redis-cli") }
	runDecide(t, []decideCase{
		{"allowed", p, cli(req("redis.example.com", 6379).at("10.1.2.3")), want{allow: true, rule: "endpoint", reason: "no L7 inspection"}},
		{"allowed before resolution", p, cli(req("redis.example.com", 6379).at("")), want{allow: true}},
		{"outside allowed_ips", p, cli(req("redis.example.com", 6379).at("192.168.1.1")), want{reason: "outside the allowed_ips"}},
		{"another port", p, cli(req("redis.example.com", 6380).at("10.1.2.3")), want{}},
		{"another binary", p, req("redis.example.com", 6379).at("10.1.2.3"), want{}},
		{"an HTTP request is not read", p, cli(req("redis.example.com", 6379).at("10.1.2.3").http("DELETE", "/x")), want{allow: true}},
		{"wildcard host, second port", p, req("eu.db.example.com", 5433).at("93.184.216.34"), want{allow: true}},
		{"wildcard host, private address", p, req("eu.db.example.com", 5432).at("10.0.0.1"), want{reason: "private address"}},
		{"another host", p, req("db.example.com", 5432).at("93.184.216.34"), want{}},
	})
	if !Inspected(ProtocolTCP) {
		t.Error("Inspected(tcp) is false: Decide judges tcp endpoints")
	}
}

func mcpEP(opts *MCPOptions, rules []Rule, deny ...*L7Rule) *Endpoint {
	return &Endpoint{Host: "orders.example.com", Port: 443, Path: "/mcp", Protocol: ProtocolMCP, MCP: opts, Rules: rules, DenyRules: deny}
}

func TestDecideMCP(t *testing.T) {
	past, future := now.Add(-time.Second), now.Add(time.Hour)
	schema := map[string]any{
		"type":                 "object",
		"properties":           map[string]any{"order_id": map[string]any{"type": "string", "pattern": "^[0-9]+$"}, "limit": map[string]any{"type": "integer", "maximum": 10}},
		"required":             []any{"order_id"},
		"additionalProperties": false,
	}
	ep := mcpEP(nil, []Rule{
		allow(L7Rule{Method: "initialize"}),
		allow(L7Rule{Method: "notifications/initialized"}),
		allow(L7Rule{Method: "tools/list"}),
		allow(L7Rule{Method: "tools/call", Tool: anyOf("lookup_order")}),
		allow(L7Rule{Method: "tools/call", Tool: anyOf("get_*", "list_orders")}),
		allow(L7Rule{Method: "tools/call", Tool: anyOf("track_shipment"), ArgumentsSchema: schema}),
		allow(L7Rule{Method: "tools/call", Params: map[string]*Matcher{"name": anyOf("by_params")}}),
		allow(L7Rule{Method: "tools/call", Tool: anyOf("temp_tool"), ExpiresAt: &future}),
		allow(L7Rule{Method: "tools/call", Tool: anyOf("old_tool"), ExpiresAt: &past}),
		allow(L7Rule{Method: "x-vendor/extension"}),
	}, &L7Rule{Method: "tools/call", Tool: anyOf("get_secret*")})
	p := pol(map[string]*NetworkPolicy{"orders": entry([]string{python}, ep)})
	r := req("orders.example.com", 443).from(python)
	withVersion := func(r Request, v string) Request { m := *r.MCP; m.ProtocolVersion = v; r.MCP = &m; return r }
	response := r.http("POST", "/mcp")
	response.MCP = &MCPMessage{Response: true}
	runDecide(t, []decideCase{
		{"initialize", p, r.mcp("initialize", "", ""), want{allow: true, entry: "orders", rule: "rules[0]"}},
		{"notifications/initialized", p, r.mcp("notifications/initialized", "", ""), want{allow: true, rule: "rules[1]"}},
		{"unlisted method", p, r.mcp("resources/list", "", ""), want{reason: "resources/list is not allowed"}},
		{"extension method listed", p, r.mcp("x-vendor/extension", "", ""), want{allow: true}},
		{"tool by name", p, r.mcp("tools/call", "lookup_order", `{"id":"1"}`), want{allow: true, rule: "rules[3]"}},
		{"tool by glob", p, r.mcp("tools/call", "get_order", ""), want{allow: true, rule: "rules[4]"}},
		{"tool by any", p, r.mcp("tools/call", "list_orders", ""), want{allow: true, rule: "rules[4]"}},
		{"tool by params.name", p, r.mcp("tools/call", "by_params", ""), want{allow: true, rule: "rules[6]"}},
		{"tool not listed", p, r.mcp("tools/call", "cancel_order", ""), want{reason: "tools/call cancel_order is not allowed"}},
		{"deny rule beats tool glob", p, r.mcp("tools/call", "get_secret_key", ""), want{rule: "deny_rules[0]", reason: "tools/call get_secret_key"}},
		{"strict name refused", p, r.mcp("tools/call", "get order", ""), want{reason: "strict_tool_names"}},
		{"strict name too long", p, r.mcp("tools/call", strings.Repeat("a", 129), ""), want{reason: "strict_tool_names"}},
		{"strict name with slash", p, r.mcp("tools/call", "get_/x", ""), want{reason: "strict_tool_names"}},
		{"tools/call without a tool", p, r.mcp("tools/call", "", ""), want{reason: "names no tool"}},
		{"message without method", p, r.mcp("", "", ""), want{reason: "no method"}},
		{"arguments pass the schema", p, r.mcp("tools/call", "track_shipment", `{"order_id":"42","limit":5}`), want{allow: true, rule: "rules[5]"}},
		{"arguments fail the schema: pattern", p, r.mcp("tools/call", "track_shipment", `{"order_id":"42; rm -rf /"}`), want{reason: "arguments_schema refuses"}},
		{"arguments fail the schema: extra property", p, r.mcp("tools/call", "track_shipment", `{"order_id":"42","x":1}`), want{reason: "arguments_schema"}},
		{"arguments fail the schema: maximum", p, r.mcp("tools/call", "track_shipment", `{"order_id":"42","limit":11}`), want{reason: "arguments_schema"}},
		{"absent arguments checked as {}", p, r.mcp("tools/call", "track_shipment", ""), want{reason: "arguments_schema"}},
		{"arguments not JSON", p, r.mcp("tools/call", "track_shipment", `{"order_id":`), want{reason: "not valid JSON"}},
		{"unexpired tool grant", p, r.mcp("tools/call", "temp_tool", ""), want{allow: true, rule: "rules[7]"}},
		{"expired tool grant", p, r.mcp("tools/call", "old_tool", ""), want{}},
		{"version listed", p, withVersion(r.mcp("initialize", "", ""), "2025-11-25"), want{allow: true}},
		{"version absent means the default", p, withVersion(r.mcp("initialize", "", ""), ""), want{allow: true}},
		{"version not listed", p, withVersion(r.mcp("tools/call", "lookup_order", ""), "2026-07-28"), want{versionRefused: true, rule: "mcp.versions", reason: "not listed"}},
		{"version not listed and rule denies: not version-only", p, withVersion(r.mcp("tools/call", "cancel_order", ""), "2026-07-28"), want{reason: "not listed"}},
		{"GET stream", p, r.http("GET", "/mcp"), want{allow: true, rule: "endpoint"}},
		{"DELETE session", p, r.http("DELETE", "/mcp"), want{allow: true}},
		{"PUT cannot be checked against deny rules", p, r.http("PUT", "/mcp"), want{reason: "cannot be checked"}},
		{"POST without message", p, r.http("POST", "/mcp"), want{reason: "carries no MCP message"}},
		{"response passes", p, response, want{allow: true, rule: "endpoint"}},
		{"no L7 info", p, r, want{reason: "without L7 inspection"}},
		{"path scope", p, r.mcp("initialize", "", "").http("POST", "/other"), want{reason: "default deny"}},
		{"other binary", p, r.mcp("initialize", "", "").from(curl), want{reason: "do not list that binary"}},
		{"GET stream for another binary", p, r.http("GET", "/mcp").from(curl), want{}},
	})
}

func TestDecideMCPOptions(t *testing.T) {
	r := req("orders.example.com", 443)
	profile := pol(map[string]*NetworkPolicy{"m": entry(nil, mcpEP(&MCPOptions{AllowAllKnownMCPMethods: true}, nil,
		&L7Rule{Method: "tools/call", Tool: anyOf("delete_*")}, &L7Rule{Tool: anyOf("drop_table")}))})
	profileRules := pol(map[string]*NetworkPolicy{"m": entry(nil, mcpEP(&MCPOptions{AllowAllKnownMCPMethods: true}, []Rule{
		allow(L7Rule{}), // no method: the profile
		allow(L7Rule{Tool: anyOf("lookup_order")}),
	}))})
	noProfileEmptyRule := pol(map[string]*NetworkPolicy{"m": entry(nil, mcpEP(nil, []Rule{allow(L7Rule{})}))})
	lax := pol(map[string]*NetworkPolicy{"m": entry(nil, mcpEP(&MCPOptions{StrictToolNames: boolp(false)}, []Rule{
		allow(L7Rule{Method: "tools/call", Tool: anyOf("weird name/with slash", "get_*")}),
	}, &L7Rule{Method: "tools/call", Tool: anyOf("bad tool")}))})
	versions := pol(map[string]*NetworkPolicy{"m": entry(nil, mcpEP(&MCPOptions{Versions: []string{"2025-03-26", "2025-06-18"}}, []Rule{allow(L7Rule{Method: "ping"})}))})
	withVersion := func(r Request, v string) Request { r.MCP.ProtocolVersion = v; return r }
	runDecide(t, []decideCase{
		{"profile: known method", profile, r.mcp("resources/list", "", ""), want{allow: true, rule: "allow_all_known_mcp_methods"}},
		{"profile: any tool", profile, r.mcp("tools/call", "anything", ""), want{allow: true}},
		{"profile: unknown method", profile, r.mcp("x-vendor/thing", "", ""), want{reason: "not a known MCP method"}},
		{"profile: deny rule", profile, r.mcp("tools/call", "delete_order", ""), want{rule: "deny_rules[0]"}},
		{"profile: deny rule without method", profile, r.mcp("tools/call", "drop_table", ""), want{rule: "deny_rules[1]"}},
		{"profile rule without method", profileRules, r.mcp("prompts/list", "", ""), want{allow: true, rule: "rules[0]"}},
		{"profile rule: unknown method", profileRules, r.mcp("x-vendor/thing", "", ""), want{}},
		{"no profile: rule without method allows nothing", noProfileEmptyRule, r.mcp("initialize", "", ""), want{}},
		{"non-strict: exact odd name", lax, r.mcp("tools/call", "weird name/with slash", ""), want{allow: true}},
		{"non-strict: globs are literal", lax, r.mcp("tools/call", "get_order", ""), want{}},
		{"non-strict: literal glob name", lax, r.mcp("tools/call", "get_*", ""), want{allow: true}},
		{"non-strict: deny exact", lax, r.mcp("tools/call", "bad tool", ""), want{rule: "deny_rules[0]"}},
		{"PUT refused", versions, r.http("PUT", "/mcp"), want{reason: "HTTP PUT is not allowed"}},
		{"no L7 info, path-scoped endpoint", versions, r, want{reason: "default deny"}},
		{"versions: listed", versions, withVersion(r.mcp("ping", "", ""), "2025-06-18"), want{allow: true}},
		{"versions: default not listed", versions, withVersion(r.mcp("ping", "", ""), "2025-11-25"), want{versionRefused: true}},
		{"versions: absent version is the default, not listed", versions, withVersion(r.mcp("ping", "", ""), ""), want{versionRefused: true}},
	})
}

func TestDecideAudit(t *testing.T) {
	auditREST := &Endpoint{Host: "api.example.com", Port: 443, Protocol: ProtocolREST, Enforcement: EnforcementAudit,
		Rules:     []Rule{allow(L7Rule{Method: "GET", Path: "/**"})},
		DenyRules: []*L7Rule{{Method: "DELETE", Path: "/admin/**"}}}
	auditMCP := mcpEP(&MCPOptions{}, []Rule{allow(L7Rule{Method: "tools/call", Tool: anyOf("ok")})}, &L7Rule{Method: "tools/call", Tool: anyOf("bad")})
	auditMCP.Enforcement = EnforcementAudit
	enforcing := &Endpoint{Host: "enf.example.com", Port: 443, Protocol: ProtocolREST, Access: AccessFull, DenyRules: []*L7Rule{{Method: "DELETE"}}}
	auditDenyOnly := &Endpoint{Host: "enf.example.com", Port: 443, Protocol: ProtocolREST, Enforcement: EnforcementAudit, Access: AccessFull,
		DenyRules: []*L7Rule{{Method: "POST"}}}
	p := pol(map[string]*NetworkPolicy{
		"rest":  entry([]string{curl}, auditREST),
		"mcp":   entry(nil, auditMCP),
		"enf":   entry([]string{curl}, enforcing),
		"audit": entry([]string{python}, auditDenyOnly),
	})
	r := req("api.example.com", 443)
	m := req("orders.example.com", 443)
	e := req("enf.example.com", 443)
	runDecide(t, []decideCase{
		{"audit: rule denial passes", p, r.http("POST", "/x"), want{allow: true, audit: true, entry: "rest"}},
		{"audit: deny rule passes", p, r.http("DELETE", "/admin/x"), want{allow: true, audit: true, rule: "deny_rules[0]"}},
		{"audit: allowed is not audited", p, r.http("GET", "/x"), want{allow: true, rule: "rules[0]"}},
		{"audit: never for another binary", p, r.http("POST", "/x").from(python), want{}},
		{"audit: never for malformed paths", p, r.http("GET", "/a%2Fb"), want{reason: "malformed"}},
		{"audit: never without L7 info", p, r, want{reason: "deny rules"}},
		{"audit: mcp tool denial passes", p, m.mcp("tools/call", "other", ""), want{allow: true, audit: true}},
		{"audit: mcp deny rule passes", p, m.mcp("tools/call", "bad", ""), want{allow: true, audit: true, rule: "deny_rules[0]"}},
		{"audit: never for strict-name violations", p, m.mcp("tools/call", "bad name", ""), want{reason: "strict_tool_names"}},
		{"audit: never for unlisted versions", p, func() Request { x := m.mcp("tools/call", "ok", ""); x.MCP.ProtocolVersion = "1999-01-01"; return x }(), want{versionRefused: true}},
		{"audit: never for a POST without message", p, m.http("POST", "/mcp"), want{reason: "no MCP message"}},
		{"audit deny rule + enforcing allow", p, e.http("POST", "/x"), want{allow: true, audit: true, entry: "audit"}},
		{"enforcing deny rule beats audit", p, e.http("DELETE", "/x").from(python), want{entry: "enf", rule: "deny_rules[0]"}},
		{"audit deny rule does not grant an ungranted binary", p, e.http("POST", "/x").from("/bin/sh"), want{}},
	})
}

func TestDecideTimeDefault(t *testing.T) {
	past := time.Now().Add(-time.Minute)
	p := pol(map[string]*NetworkPolicy{"a": entry(nil, &Endpoint{Host: "api.example.com", Port: 443, Protocol: ProtocolREST,
		Rules: []Rule{allow(L7Rule{Method: "GET", Path: "/**", ExpiresAt: &past})}})})
	r := req("api.example.com", 443).http("GET", "/")
	r.Time = time.Time{}
	if d := Decide(p, r); d.Allow {
		t.Errorf("expired grant allowed with zero Time (= now): %+v", d)
	}
}

// TestDecideFromYAML checks Decide on policies read by Parse, so defaults
// filled by the canonical form are the ones Decide sees.
func TestDecideFromYAML(t *testing.T) {
	const doc = `
version: 1
network_policies:
  orders:
    endpoints:
      - host: orders.example.com
        port: 443
        path: /mcp
        protocol: mcp
        rules:
          - allow: {method: initialize}
          - allow: {method: tools/call, tool: lookup_order}
        deny_rules:
          - {method: tools/call, tool: cancel_order}
    binaries: [{path: /usr/bin/python3}]
  github:
    endpoints:
      - host: api.github.com
        port: 443
        protocol: rest
        access: read-only
    binaries: [{path: /usr/bin/curl}]
`
	p, _, err := Parse([]byte(doc))
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	o := req("orders.example.com", 443).from(python)
	g := req("api.github.com", 443)
	runDecide(t, []decideCase{
		{"yaml: tool", p, o.mcp("tools/call", "lookup_order", ""), want{allow: true, entry: "orders", rule: "rules[1]"}},
		{"yaml: default version", p, o.mcp("initialize", "", ""), want{allow: true}},
		{"yaml: strict default", p, o.mcp("tools/call", "lookup order", ""), want{reason: "strict_tool_names"}},
		{"yaml: deny", p, o.mcp("tools/call", "cancel_order", ""), want{rule: "deny_rules[0]"}},
		{"yaml: enforce by default", p, o.mcp("tools/call", "other", ""), want{}},
		{"yaml: read-only", p, g.http("GET", "/repos"), want{allow: true, entry: "github"}},
		{"yaml: read-only refuses POST", p, g.http("POST", "/repos"), want{}},
	})
}

// BenchmarkDecide1000Rules measures the reference evaluator on a policy with
// 1,000 REST rules, the request matching the last one, against a baseline
// of the same request on a 1-rule policy measured in the same loop. It
// reports both latencies and their ratio. Reference only: the proxy uses a
// compiled matcher.
//
//	go test -run '^$' -bench Decide1000Rules ./policy/
func BenchmarkDecide1000Rules(b *testing.B) {
	restPolicy := func(n int) *Policy {
		rules := make([]Rule, n)
		for i := range rules {
			rules[i] = allow(L7Rule{Method: "GET", Path: fmt.Sprintf("/v1/resource%d/*", 999-n+1+i)})
		}
		return pol(map[string]*NetworkPolicy{"api": entry([]string{curl}, &Endpoint{Host: "api.example.com", Port: 443, Protocol: ProtocolREST, Rules: rules})})
	}
	big, small := restPolicy(1000), restPolicy(1)
	r := req("api.example.com", 443).http("GET", "/v1/resource999/x")
	for _, p := range []*Policy{big, small} {
		if d := Decide(p, r); !d.Allow {
			b.Fatalf("benchmark request denied: %+v", d)
		}
	}
	var bigTime, smallTime time.Duration
	b.ReportAllocs()
	for b.Loop() {
		start := time.Now()
		Decide(big, r)
		mid := time.Now()
		Decide(small, r)
		bigTime += mid.Sub(start)
		smallTime += time.Since(mid)
	}
	b.ReportMetric(float64(bigTime.Nanoseconds())/float64(b.N), "ns/decide-1000")
	b.ReportMetric(float64(smallTime.Nanoseconds())/float64(b.N), "ns/decide-1")
	b.ReportMetric(float64(bigTime)/float64(smallTime), "x-vs-1-rule")
}

// An endpoint whose protocol is not inspected denies every request to its
// destination, even when another endpoint on the same host:port would
// allow it: otherwise a REST `/**` next to a GraphQL `/graphql` (OpenShell's
// own example) lets every GraphQL mutation through.
func TestDecideUninspectedEndpointClosesItsDestination(t *testing.T) {
	p := pol(map[string]*NetworkPolicy{
		"github": entry(nil,
			&Endpoint{Host: "api.github.com", Port: 443, Path: "/**", Protocol: ProtocolREST, Access: AccessFull},
			&Endpoint{Host: "api.github.com", Port: 443, Path: "/graphql", Protocol: ProtocolGraphQL, Rules: []Rule{allow(L7Rule{OperationType: "query"})}}),
		"redis": entry(nil, l4("cache.example.com", 6379), &Endpoint{Host: "cache.example.com", Port: 6379, Protocol: ProtocolTCP}),
	})
	runDecide(t, []decideCase{
		{"rest path still allowed", p, req("api.github.com", 443).http("POST", "/repos/a/b/issues"), want{allow: true}},
		{"graphql path denied", p, req("api.github.com", 443).http("POST", "/graphql"), want{reason: "not inspected yet"}},
		{"graphql path in another spelling", p, req("api.github.com", 443).http("POST", "//graphql/."), want{reason: "not inspected yet"}},
		{"no L7 view on a split host", p, req("api.github.com", 443), want{reason: "not inspected yet"}},
		{"tcp endpoint next to l4", p, req("cache.example.com", 6379), want{allow: true}},
	})
}

func TestDecideAlwaysDeniedOddSpellings(t *testing.T) {
	open := func(host string) *Policy {
		return pol(map[string]*NetworkPolicy{"all": entry(nil, &Endpoint{Host: host, Port: 80})})
	}
	var cases []decideCase
	// IPv4-compatible IPv6 (::a.b.c.d, deprecated but still parsed and
	// routed by some stacks) is one more spelling of the IPv4 address.
	for _, h := range []string{"[::169.254.169.254]", "[::a9fe:a9fe]", "[::127.0.0.1]", "[::7f00:1]"} {
		cases = append(cases, decideCase{"literal " + h, open(h), req(h, 80).at(""), want{reason: "always denied"}})
	}
	for _, a := range []string{"::169.254.169.254", "::127.0.0.1", "::a9fe:1"} {
		cases = append(cases, decideCase{"resolved " + a, open("rebind.example.com"), req("rebind.example.com", 80).at(a), want{reason: "always-denied"}})
	}
	// Full-width letters map to ASCII (UTS #46) in clients that resolve
	// through IDNA.
	wild := pol(map[string]*NetworkPolicy{"g": entry(nil, &Endpoint{Host: "*.google.internal", Port: 80}), "l": entry(nil, &Endpoint{Host: "*.example.com", Port: 80})})
	for _, h := range []string{"ｍｅｔａｄａｔａ.google.internal", "metadata.google.internal..", "ｌｏｃａｌｈｏｓｔ"} {
		cases = append(cases, decideCase{"name " + h, wild, req(h, 80).at(""), want{reason: "always denied"}})
	}
	runDecide(t, cases)
}

// A binary path that is not clean (dot segments, doubled slashes) could
// walk out of a `**` glob; it is treated as unidentified.
func TestDecideBinaryMustBeClean(t *testing.T) {
	p := pol(map[string]*NetworkPolicy{"tools": entry([]string{"/opt/tools/**"}, l4("example.com", 443))})
	runDecide(t, []decideCase{
		{"clean path", p, req("example.com", 443).from("/opt/tools/bin/run"), want{allow: true}},
		{"dot-dot escapes **", p, req("example.com", 443).from("/opt/tools/../../tmp/evil"), want{reason: "do not list that binary"}},
		{"relative path", p, req("example.com", 443).from("opt/tools/run"), want{reason: "do not list that binary"}},
		{"doubled slash", p, req("example.com", 443).from("/opt/tools//run"), want{reason: "do not list that binary"}},
	})
}

// Deny rules read their method glob widely, like their path globs.
func TestDecideMCPDenyMethodGlobIsWide(t *testing.T) {
	p := pol(map[string]*NetworkPolicy{"o": entry(nil, mcpEP(nil,
		[]Rule{allow(L7Rule{Method: "tools/admin/reset"})},
		&L7Rule{Method: "tools/*"}))})
	runDecide(t, []decideCase{
		{"nested tools method denied", p, req("orders.example.com", 443).mcp("tools/admin/reset", "", ""), want{rule: "deny_rules[0]"}},
	})
}

// FuzzDecide: Decide never panics, and even a policy that opens every
// address (a hostless endpoint with allowed_ips 0/0) never allows an
// always-denied destination.
func FuzzDecide(f *testing.F) {
	for _, s := range []string{"169.254.169.254", "[::a9fe:a9fe]", "0x7f.1", "metadata.google.internal.", "a.example.com"} {
		f.Add(s, []byte{169, 254, 169, 254}, 80, "GET", "/a/../b", "tools/call", "x")
	}
	openAll := pol(map[string]*NetworkPolicy{
		"all": entry(nil, &Endpoint{Ports: []int{80, 443, 2379}, AllowedIPs: []string{"0.0.0.0/0", "::/0"}}),
		"rest": entry(nil, &Endpoint{Host: "*.example.com", Port: 443, Protocol: ProtocolREST, Access: AccessFull,
			DenyRules: []*L7Rule{{Method: "*", Path: "/admin/**"}}}),
		"mcp": entry(nil, mcpEP(&MCPOptions{AllowAllKnownMCPMethods: true}, nil, &L7Rule{Method: "tools/call", Tool: anyOf("rm*")})),
	})
	f.Fuzz(func(t *testing.T, host string, addr []byte, port int, method, path, mcpMethod, tool string) {
		r := Request{Binary: curl, Host: host, Port: port, HTTPMethod: method, Path: path, Time: now}
		if a, ok := netip.AddrFromSlice(addr); ok {
			r.Addr = a
		}
		if method == "POST" {
			r.MCP = &MCPMessage{Method: mcpMethod, Tool: tool}
		}
		d := Decide(openAll, r)
		if !d.Allow {
			return
		}
		if lit, ok := ParseHostIP(host); ok {
			if why, denied := AlwaysDenied(lit, false); denied {
				t.Fatalf("allowed host %q (%s): %+v", host, why, d)
			}
		}
		if r.Addr.IsValid() {
			if why, denied := AlwaysDenied(r.Addr, false); denied {
				t.Fatalf("allowed address %s (%s): %+v", r.Addr, why, d)
			}
		}
		if IsMetadataHost(host) || IsLoopbackName(host) || DeniedPort(port) {
			t.Fatalf("allowed %q:%d: %+v", host, port, d)
		}
		if !r.Addr.IsValid() {
			if _, ok := ParseHostIP(host); !ok && d.Entry == "all" {
				t.Fatalf("hostless endpoint allowed %q without an address: %+v", host, d)
			}
		}
	})
}
