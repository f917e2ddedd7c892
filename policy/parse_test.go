package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// update rewrites the golden canonical YAML files: go test ./policy -update
var update = flag.Bool("update", false, "rewrite golden files under testdata")

// corpusFiles are the documents that must parse unchanged: the OpenShell
// corpus and the article's examples.
func corpusFiles(t testing.TB) []string {
	t.Helper()
	var files []string
	for _, pattern := range []string{"testdata/openshell/*.yaml", "testdata/article/*"} {
		m, err := filepath.Glob(pattern)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	if len(files) < 15 {
		t.Fatalf("corpus has %d files; want the 13 OpenShell policies and 2 article examples", len(files))
	}
	return files
}

func mustParse(t testing.TB, doc string) (*Policy, []Problem) {
	t.Helper()
	p, warns, err := Parse([]byte(doc))
	if err != nil {
		t.Fatalf("Parse: %v\n%s", err, doc)
	}
	return p, warns
}

func TestCorpusParsesAndRoundTrips(t *testing.T) {
	for _, file := range corpusFiles(t) {
		t.Run(filepath.Base(file), func(t *testing.T) {
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			p, _, err := Parse(data)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			hash := p.Hash()
			if got := p.Canonical().Hash(); got != hash {
				t.Errorf("canonical form is not idempotent: %s != %s", got, hash)
			}

			y, err := EncodeYAML(p)
			if err != nil {
				t.Fatal(err)
			}
			py, _, err := Parse(y)
			if err != nil {
				t.Fatalf("Parse(EncodeYAML): %v\n%s", err, y)
			}
			if py.Hash() != hash {
				t.Errorf("EncodeYAML round trip changed the hash\n%s", y)
			}

			j, err := EncodeJSON(p)
			if err != nil {
				t.Fatal(err)
			}
			pj, _, err := Parse(j)
			if err != nil {
				t.Fatalf("Parse(EncodeJSON): %v\n%s", err, j)
			}
			if pj.Hash() != hash {
				t.Errorf("EncodeJSON round trip changed the hash\n%s", j)
			}
			if !bytes.Equal(p.CanonicalJSON(), pj.CanonicalJSON()) {
				t.Errorf("canonical JSON differs after round trip")
			}

			golden := filepath.Join("testdata", "golden", filepath.Base(filepath.Dir(file))+"__"+strings.TrimSuffix(filepath.Base(file), filepath.Ext(file))+".yaml")
			if *update {
				if err := os.MkdirAll(filepath.Dir(golden), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(golden, y, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test ./policy -update)", err)
			}
			if !bytes.Equal(y, want) {
				t.Errorf("canonical YAML differs from %s (run go test ./policy -update)\ngot:\n%s", golden, y)
			}
		})
	}
}

func TestParseReturnsCanonicalPolicy(t *testing.T) {
	p, _ := mustParse(t, `
version: 1
network_policies:
  orders:
    endpoints:
      - {host: Orders.Example.COM., ports: [443], protocol: mcp, rules: [{allow: {method: tools/call, params: {name: b}}}]}
    binaries: [{path: /usr/bin/b}, {path: /usr/bin/a}, {path: /usr/bin/a}]
`)
	np := p.NetworkPolicies["orders"]
	if np.Name != "orders" {
		t.Errorf("name = %q, want the map key", np.Name)
	}
	ep := np.Endpoints[0]
	if ep.Host != "orders.example.com" || ep.Port != 443 || ep.Ports != nil {
		t.Errorf("host/port = %q %d %v", ep.Host, ep.Port, ep.Ports)
	}
	if ep.Enforcement != EnforcementEnforce {
		t.Errorf("enforcement = %q", ep.Enforcement)
	}
	if ep.MCP == nil || ep.MCP.StrictToolNames == nil || !*ep.MCP.StrictToolNames || ep.MCP.MaxBodyBytes != DefaultMaxBodyBytes ||
		len(ep.MCP.Versions) != 1 || ep.MCP.Versions[0] != DefaultMCPVersion {
		t.Errorf("mcp defaults = %+v", ep.MCP)
	}
	if r := ep.Rules[0].Allow; r.Tool == nil || r.Tool.Any[0] != "b" || r.Params != nil {
		t.Errorf("params.name not folded into tool: %+v", r)
	}
	if len(np.Binaries) != 2 || np.Binaries[0].Path != "/usr/bin/a" {
		t.Errorf("binaries = %+v", np.Binaries)
	}
}

// TestEquivalentDocumentsHashEqual: documents that mean the same have the
// same hash; documents that differ in meaning do not.
func TestEquivalentDocumentsHashEqual(t *testing.T) {
	ordersJSON, err := os.ReadFile("testdata/article/orders.json")
	if err != nil {
		t.Fatal(err)
	}
	const ordersYAML = `
version: 1
network_policies:
  orders:
    binaries:
      - path: /usr/bin/python3
    endpoints:
      - host: orders.example.com
        port: 443
        path: /mcp
        protocol: mcp
        rules:
          - allow: {method: initialize}
          - allow: {method: notifications/initialized}
          - allow: {method: tools/list}
          - allow: {method: tools/call, tool: {any: [lookup_order]}}
        deny_rules:
          - method: tools/call
            params: {name: refund_order}
`
	mcp := func(tool string) string {
		return `{version: 1, network_policies: {m: {binaries: [{path: /bin/a}], endpoints: [{host: m.example.com, port: 443, protocol: mcp, enforcement: enforce, rules: [{allow: {method: tools/call, ` + tool + `}}]}]}}}`
	}
	rest := func(ep string) string {
		return `{version: 1, network_policies: {r: {binaries: [{path: /bin/a}], endpoints: [` + ep + `]}}}`
	}
	same := []struct{ name, a, b string }{
		{"article JSON vs YAML", string(ordersJSON), ordersYAML},
		{"tool string vs any", mcp(`tool: x`), mcp(`tool: {any: [x]}`)},
		{"tool vs params.name", mcp(`tool: x`), mcp(`params: {name: x}`)},
		{"any order and duplicates", mcp(`tool: {any: [b, a]}`), mcp(`tool: {any: [a, b, a]}`)},
		{"reordered binaries", `{version: 1, network_policies: {x: {endpoints: [{host: a.example.com, port: 1}], binaries: [{path: /b}, {path: /a}]}}}`,
			`{version: 1, network_policies: {x: {endpoints: [{host: a.example.com, port: 1}], binaries: [{path: /a}, {path: /b}, {path: /a, harness: true}]}}}`},
		{"port vs ports", rest(`{host: a.example.com, port: 443}`), rest(`{host: a.example.com, ports: [443]}`)},
		{"ports order", rest(`{host: a.example.com, ports: [443, 80]}`), rest(`{host: a.example.com, ports: [80, 443, 443]}`)},
		{"query glob object vs string", rest(`{host: a.example.com, port: 1, protocol: rest, rules: [{allow: {method: GET, path: /a, query: {t: {glob: "v*"}}}}]}`),
			rest(`{host: a.example.com, port: 1, protocol: rest, rules: [{allow: {method: GET, path: /a, query: {t: "v*"}}}]}`)},
		{"host case and trailing dot", rest(`{host: A.Example.COM., port: 1}`), rest(`{host: a.example.com, port: 1}`)},
		{"endpoint order", rest(`{host: a.example.com, port: 1}, {host: b.example.com, port: 1}`), rest(`{host: b.example.com, port: 1}, {host: a.example.com, port: 1}`)},
		{"REST method case", rest(`{host: a.example.com, port: 1, protocol: rest, rules: [{allow: {method: get, path: /a}}, {allow: {method: POST, path: /b}}]}`),
			rest(`{host: a.example.com, port: 1, protocol: rest, enforcement: enforce, rules: [{allow: {method: GET, path: /a}}, {allow: {method: POST, path: /b}}]}`)},
		{"mcp defaults explicit", mcp(`tool: x`), `{version: 1, network_policies: {m: {name: m, binaries: [{path: /bin/a}], endpoints: [{host: m.example.com, port: 443, protocol: mcp, enforcement: enforce,
			mcp: {strict_tool_names: true, max_body_bytes: 65536, versions: ["2025-11-25"]}, rules: [{allow: {method: tools/call, tool: x}}]}]}}}`},
		{"allowed_ips spelling and order", rest(`{host: a.example.com, port: 1, allowed_ips: [10.0.0.1, 192.168.0.0/16]}`), rest(`{host: a.example.com, port: 1, allowed_ips: [192.168.0.0/16, 10.0.0.1/32, 10.0.0.1]}`)},
		{"filesystem order and trailing slash", `{version: 1, filesystem_policy: {read_only: [/usr/, /etc]}}`, `{version: 1, filesystem_policy: {read_only: [/etc, /usr, /usr]}}`},
		{"numeric process id", `{version: 1, process: {run_as_user: 1500, run_as_group: sandbox}}`, `{version: 1, process: {run_as_user: "1500", run_as_group: sandbox}}`},
		{"landlock default", `{version: 1, landlock: {}}`, `{version: 1, landlock: {compatibility: best_effort}}`},
		{"deprecated tls", rest(`{host: a.example.com, port: 1, tls: passthrough}`), rest(`{host: a.example.com, port: 1}`)},
		{"expires_at zone", mcp(`tool: x, expires_at: "2026-05-01T12:00:00+02:00"`), mcp(`tool: x, expires_at: 2026-05-01T10:00:00Z`)},
		{"middleware defaults", `{version: 1, network_middlewares: {g: {middleware: x, endpoints: {include: [B.example.com, a.example.com]}}}}`,
			`{version: 1, network_middlewares: {g: {name: g, middleware: x, on_error: fail_closed, endpoints: {include: [a.example.com, b.example.com, a.example.com]}}}}`},
		{"empty binaries list vs omitted", `{version: 1, network_policies: {x: {endpoints: [{host: a.example.com, port: 1}]}}}`,
			`{version: 1, network_policies: {x: {endpoints: [{host: a.example.com, port: 1}], binaries: []}}}`},
	}
	for _, tc := range same {
		t.Run(tc.name, func(t *testing.T) {
			a, _ := mustParse(t, tc.a)
			b, _ := mustParse(t, tc.b)
			if a.Hash() != b.Hash() {
				t.Errorf("hashes differ\n%s\n%s", a.CanonicalJSON(), b.CanonicalJSON())
			}
		})
	}
	differ := []struct{ name, a, b string }{
		{"port", rest(`{host: a.example.com, port: 443}`), rest(`{host: a.example.com, port: 444}`)},
		{"audit vs enforce", rest(`{host: a.example.com, port: 1, protocol: rest, access: full}`), rest(`{host: a.example.com, port: 1, protocol: rest, access: full, enforcement: audit}`)},
		{"tool", mcp(`tool: x`), mcp(`tool: y`)},
		// Rules keep the document's positions, which every message names
		// (rules[1]) and which decide the first rule that allows a call.
		{"rule order", rest(`{host: a.example.com, port: 1, protocol: rest, rules: [{allow: {method: GET, path: /a}}, {allow: {method: POST, path: /b}}]}`),
			rest(`{host: a.example.com, port: 1, protocol: rest, rules: [{allow: {method: POST, path: /b}}, {allow: {method: GET, path: /a}}]}`)},
		{"deny rule order", rest(`{host: a.example.com, port: 1, protocol: rest, access: full, deny_rules: [{method: GET, path: /a}, {method: POST, path: /b}]}`),
			rest(`{host: a.example.com, port: 1, protocol: rest, access: full, deny_rules: [{method: POST, path: /b}, {method: GET, path: /a}]}`)},
	}
	for _, tc := range differ {
		t.Run("differ/"+tc.name, func(t *testing.T) {
			a, _ := mustParse(t, tc.a)
			b, _ := mustParse(t, tc.b)
			if a.Hash() == b.Hash() {
				t.Errorf("hashes equal for different meanings\n%s", a.CanonicalJSON())
			}
		})
	}
}

func TestCanonicalJSONDeterministic(t *testing.T) {
	data, err := os.ReadFile("testdata/openshell/crates__openshell-supervisor-network__testdata__sandbox-policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p, _, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	first := p.CanonicalJSON()
	for i := 0; i < 20; i++ {
		q, _, _ := Parse(data)
		if !bytes.Equal(q.CanonicalJSON(), first) {
			t.Fatal("CanonicalJSON differs between runs")
		}
	}
	if len(p.Hash()) != 64 || strings.ToLower(p.Hash()) != p.Hash() {
		t.Errorf("Hash = %q, want 64 lower-case hex digits", p.Hash())
	}
	var v any
	if err := json.Unmarshal(first, &v); err != nil || bytes.Contains(first, []byte("\n")) {
		t.Errorf("CanonicalJSON is not compact JSON: %v", err)
	}
}

func TestCloneIsDeep(t *testing.T) {
	p, _ := mustParse(t, `{version: 1, network_policies: {m: {binaries: [{path: /bin/a}], endpoints: [{host: m.example.com, port: 443, protocol: mcp,
		rules: [{allow: {method: tools/call, tool: x, arguments_schema: {type: object, properties: {id: {type: string}}}}}]}]}},
		network_middlewares: {g: {middleware: x, config: {k: [1, 2]}, endpoints: {include: [a.example.com]}}}}`)
	before := p.Hash()
	c := p.Clone()
	c.NetworkPolicies["m"].Endpoints[0].Rules[0].Allow.Tool.Any[0] = "changed"
	c.NetworkPolicies["m"].Endpoints[0].Rules[0].Allow.ArgumentsSchema["type"] = "array"
	c.NetworkPolicies["m"].Binaries[0].Path = "/changed"
	c.NetworkMiddlewares["g"].Config["k"].([]any)[0] = "changed"
	*c.NetworkPolicies["m"].Endpoints[0].MCP.StrictToolNames = false
	if p.Hash() != before {
		t.Error("changing the clone changed the original")
	}
	if (*Policy)(nil).Clone() != nil || (*Policy)(nil).Canonical() != nil {
		t.Error("nil policy should clone to nil")
	}
}

func TestMatcherJSON(t *testing.T) {
	for _, tc := range []struct {
		m    Matcher
		want string
	}{
		{Matcher{Any: []string{"x"}}, `"x"`},
		{Matcher{Any: []string{"x", "x"}}, `"x"`},
		{Matcher{Any: []string{"b", "a", "b"}}, `{"any":["a","b"]}`},
		{Matcher{}, `{"any":[]}`},
	} {
		got, err := json.Marshal(tc.m)
		if err != nil || string(got) != tc.want {
			t.Errorf("Marshal(%v) = %s, %v; want %s", tc.m.Any, got, err, tc.want)
		}
	}
	for _, tc := range []struct {
		in      string
		want    []string
		wantErr bool
	}{
		{`"x*"`, []string{"x*"}, false},
		{`{"any":["a","b"]}`, []string{"a", "b"}, false},
		{`{"any":["a"],"all":["b"]}`, nil, true},
		{`5`, nil, true},
	} {
		var m Matcher
		err := json.Unmarshal([]byte(tc.in), &m)
		if (err != nil) != tc.wantErr || (!tc.wantErr && strings.Join(m.Any, ",") != strings.Join(tc.want, ",")) {
			t.Errorf("Unmarshal(%s) = %v, %v", tc.in, m.Any, err)
		}
	}
}

func TestProblemStrings(t *testing.T) {
	if got := (Problem{Path: "a.b", Message: "bad"}).String(); got != "a.b: bad" {
		t.Errorf("String = %q", got)
	}
	if got := (Problem{Message: "bad"}).String(); got != "bad" {
		t.Errorf("String without path = %q", got)
	}
	err := &ValidationError{Problems: []Problem{{Path: "a", Message: "x"}, {Path: "b", Message: "y"}}}
	if err.Error() != "a: x; b: y" {
		t.Errorf("Error = %q", err.Error())
	}
}

// FuzzParse: Parse never panics, and whatever it accepts round-trips
// through both encodings to the same hash.
func FuzzParse(f *testing.F) {
	for _, file := range corpusFiles(f) {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, s := range []string{
		"", "{}", "[]", "version: 1", "a: &a [*a, *a]", "version: 1\n---\nversion: 1\n",
		`{"version": 1, "version": 1}`, "version: 1\nnetwork_policies: {a: {endpoints: [{host: x.example.com, ports: [1, 2, 2]}]}}",
		"version: 1\nnetwork_middlewares: {m: {middleware: x, config: {a: .nan}, endpoints: {include: [a.b.c]}}}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, _, err := Parse(data)
		if err != nil {
			var ve *ValidationError
			if !errors.As(err, &ve) || len(ve.Problems) == 0 {
				t.Fatalf("error is not a *ValidationError with problems: %v", err)
			}
			return
		}
		hash := p.Hash()
		if p.Canonical().Hash() != hash {
			t.Fatalf("canonical form not idempotent")
		}
		for name, enc := range map[string]func(*Policy) ([]byte, error){"yaml": EncodeYAML, "json": EncodeJSON} {
			out, err := enc(p)
			if err != nil {
				t.Fatalf("Encode %s: %v", name, err)
			}
			q, _, err := Parse(out)
			if err != nil {
				t.Fatalf("Parse(Encode %s) failed: %v\n%s", name, err, out)
			}
			if q.Hash() != hash {
				t.Fatalf("Encode %s round trip changed the hash\n%s\n%s", name, p.CanonicalJSON(), q.CanonicalJSON())
			}
		}
	})
}

// mcp.filter_tools_list defaults to true: spelling the default changes
// neither the canonical document nor its hash; false is kept.
func TestFilterToolsListCanonical(t *testing.T) {
	doc := func(opt string) *Policy {
		p, _ := mustParse(t, `{version: 1, network_policies: {m: {binaries: [{path: /bin/a}], endpoints: [{host: m.example.com, port: 443, protocol: mcp,
			mcp: {`+opt+`}, rules: [{allow: {method: tools/list}}]}]}}}`)
		return p
	}
	omitted, on, off := doc(""), doc("filter_tools_list: true"), doc("filter_tools_list: false")
	if on.Hash() != omitted.Hash() || bytes.Contains(on.CanonicalJSON(), []byte("filter_tools_list")) {
		t.Errorf("filter_tools_list: true hashes apart from the default: %s", on.CanonicalJSON())
	}
	ep := off.NetworkPolicies["m"].Endpoints[0]
	if off.Hash() == omitted.Hash() || ep.MCP.FiltersToolsList() || !bytes.Contains(off.CanonicalJSON(), []byte(`"filter_tools_list":false`)) {
		t.Errorf("filter_tools_list: false lost: %s", off.CanonicalJSON())
	}
	if !omitted.NetworkPolicies["m"].Endpoints[0].MCP.FiltersToolsList() {
		t.Error("the default does not filter")
	}
	if _, _, err := Parse([]byte(`{version: 1, network_policies: {m: {binaries: [{path: /bin/a}], endpoints: [{host: m.example.com, port: 443, protocol: mcp,
		mcp: {filter_tools_list: "no"}, rules: [{allow: {method: tools/list}}]}]}}}`)); err == nil || !strings.Contains(err.Error(), "filter_tools_list") {
		t.Errorf("a string for filter_tools_list: %v, want an error naming it", err)
	}
}

// mcp.max_response_bytes: the default omitted from the canonical form,
// another value kept, and bounded like max_body_bytes.
func TestMaxResponseBytes(t *testing.T) {
	doc := func(opt string) (*Policy, error) {
		p, _, err := Parse([]byte(`{version: 1, network_policies: {m: {binaries: [{path: /bin/a}], endpoints: [{host: m.example.com, port: 443, protocol: mcp,
			mcp: {` + opt + `}, rules: [{allow: {method: tools/list}}]}]}}}`))
		return p, err
	}
	omitted, _ := doc("")
	def, _ := doc("max_response_bytes: 4194304")
	other, _ := doc("max_response_bytes: 1048576")
	if omitted == nil || def == nil || other == nil {
		t.Fatal("documents did not parse")
	}
	if def.Hash() != omitted.Hash() || omitted.NetworkPolicies["m"].Endpoints[0].MCP.ResponseLimit() != DefaultMaxResponseBytes {
		t.Errorf("the default spelled out hashes apart: %s", def.CanonicalJSON())
	}
	if other.Hash() == omitted.Hash() || other.NetworkPolicies["m"].Endpoints[0].MCP.ResponseLimit() != 1<<20 {
		t.Errorf("max_response_bytes 1 MiB lost: %s", other.CanonicalJSON())
	}
	for _, bad := range []string{"max_response_bytes: -1", "max_response_bytes: 1000000000"} {
		if _, err := doc(bad); err == nil || !strings.Contains(err.Error(), "max_response_bytes") {
			t.Errorf("%s: %v, want an error naming it", bad, err)
		}
	}
}

// mcp.oauth declaring nothing is the same document as none; a
// declaration is kept, and mcp options stay MCP-only.
func TestMCPOAuthCanonical(t *testing.T) {
	doc := func(opt string) (*Policy, error) {
		p, _, err := Parse([]byte(`{version: 1, network_policies: {m: {binaries: [{path: /bin/a}], endpoints: [{host: m.example.com, port: 443, protocol: mcp, path: /mcp,
			mcp: {` + opt + `}, rules: [{allow: {method: tools/list}}]}]}}}`))
		return p, err
	}
	none, _ := doc("")
	empty, _ := doc("oauth: {}")
	declared, _ := doc("oauth: {resource_metadata: true}")
	if none == nil || empty == nil || declared == nil {
		t.Fatal("documents did not parse")
	}
	if empty.Hash() != none.Hash() || declared.Hash() == none.Hash() {
		t.Errorf("hashes: none %s, empty %s, declared %s", none.Hash(), empty.Hash(), declared.Hash())
	}
	if rule, ok := declared.NetworkPolicies["m"].Endpoints[0].MCP.OAuthPath("GET", "/.well-known/oauth-protected-resource/mcp"); !ok || rule != "mcp.oauth.resource_metadata" {
		t.Errorf("OAuthPath = %q, %v", rule, ok)
	}
	if _, err := doc("oauth: {resource_metadata: yes}"); err == nil || !strings.Contains(err.Error(), "resource_metadata") {
		t.Errorf("a string for resource_metadata: %v", err)
	}
}

// mcp.oauth may name where the server's metadata and its authorization
// server live when they are not at the well-known root paths (RFC 9728
// lets WWW-Authenticate name any metadata URL; RFC 8414 issuers may have a
// path, whose endpoints sit under it): exactly those paths pass, each
// with the methods its role uses, and a declaration that names no role,
// or a path that is not one plain absolute path, is refused naming it.
func TestMCPOAuthDeclaredPaths(t *testing.T) {
	doc := func(opt string) (*Policy, error) {
		p, _, err := Parse([]byte(`{version: 1, network_policies: {m: {binaries: [{path: /bin/a}], endpoints: [{host: m.example.com, port: 443, protocol: mcp, path: /mcp,
			mcp: {oauth: {` + opt + `}}, rules: [{allow: {method: tools/list}}]}]}}}`))
		return p, err
	}
	p, err := doc("resource_metadata: true, resource_metadata_paths: [/custom/metadata/location.json], authorization_server: true, issuer_paths: [/tenant1]")
	if err != nil {
		t.Fatal(err)
	}
	plain, err := doc("resource_metadata: true, authorization_server: true")
	if err != nil {
		t.Fatal(err)
	}
	if p.Hash() == plain.Hash() {
		t.Error("the declared paths do not change the document's hash")
	}
	o := p.NetworkPolicies["m"].Endpoints[0].MCP
	for _, tc := range []struct {
		method, path, rule string
	}{
		{"GET", "/custom/metadata/location.json", "mcp.oauth.resource_metadata"},
		{"HEAD", "/custom/metadata/location.json", "mcp.oauth.resource_metadata"},
		{"POST", "/custom/metadata/location.json", ""},
		{"GET", "/custom/metadata/location.json/x", ""},
		{"GET", "/custom/metadata", ""},
		{"GET", "/tenant1/authorize", "mcp.oauth.authorization_server"},
		{"POST", "/tenant1/token", "mcp.oauth.authorization_server"},
		{"POST", "/tenant1/register", "mcp.oauth.authorization_server"},
		{"GET", "/tenant1/.well-known/openid-configuration", "mcp.oauth.authorization_server"},
		{"GET", "/tenant1/.well-known/oauth-authorization-server", "mcp.oauth.authorization_server"},
		{"GET", "/.well-known/oauth-authorization-server/tenant1", "mcp.oauth.authorization_server"},
		{"POST", "/tenant1/authorize", ""},
		{"GET", "/tenant1/token", ""},
		{"GET", "/tenant1/admin", ""},
		{"POST", "/tenant2/token", ""},
		{"POST", "/x/tenant1/token", ""},
	} {
		rule, ok := o.OAuthPath(tc.method, tc.path)
		if rule != tc.rule || ok != (tc.rule != "") {
			t.Errorf("OAuthPath(%s %s) = %q, %v; want %q", tc.method, tc.path, rule, ok, tc.rule)
		}
	}
	if rule, ok := plain.NetworkPolicies["m"].Endpoints[0].MCP.OAuthPath("POST", "/tenant1/token"); ok {
		t.Errorf("without issuer_paths, POST /tenant1/token passes as %s", rule)
	}
	for _, tc := range []struct{ opt, field string }{
		{"resource_metadata_paths: [/a.json]", "resource_metadata_paths"},
		{"issuer_paths: [/tenant1]", "issuer_paths"},
		{"authorization_server: true, issuer_paths: [/]", "issuer_paths[0]"},
		{"authorization_server: true, issuer_paths: [tenant1]", "issuer_paths[0]"},
		{"authorization_server: true, issuer_paths: [/t/*]", "issuer_paths[0]"},
		{"authorization_server: true, issuer_paths: [/t/../u]", "issuer_paths[0]"},
		{"authorization_server: true, issuer_paths: [/t/]", "issuer_paths[0]"},
		{"resource_metadata: true, resource_metadata_paths: [/a, '/b?x=1']", "resource_metadata_paths[1]"},
		{"resource_metadata: true, resource_metadata_paths: [/mcp]", "resource_metadata_paths[0]"},
	} {
		if _, err := doc(tc.opt); err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s: %v; want an error naming %s", tc.opt, err, tc.field)
		}
	}
}

// TestDecodeStrictInline: the fields of an embedded struct tagged
// `yaml:",inline"` are read as the outer struct's, with their paths, and
// an unknown key beside them is still refused.
func TestDecodeStrictInline(t *testing.T) {
	type ref struct {
		Host string `yaml:"host"`
		Port int    `yaml:"port"`
	}
	type op struct {
		ref  `yaml:",inline"`
		Tool string `yaml:"tool"`
	}
	var got op
	if ok, problems := DecodeStrict([]byte(`{"host": "h", "port": 443, "tool": "t"}`), &got, "op", 1<<10); !ok || len(problems) > 0 {
		t.Fatalf("DecodeStrict = %v, %v", ok, problems)
	}
	if want := (op{ref: ref{Host: "h", Port: 443}, Tool: "t"}); got != want {
		t.Errorf("decoded %+v, want %+v", got, want)
	}
	_, problems := DecodeStrict([]byte(`{"host": "h", "port": "x", "path": "/"}`), &op{}, "op", 1<<10)
	var paths []string
	for _, p := range problems {
		paths = append(paths, p.Path)
	}
	if strings.Join(paths, " ") != "port path" {
		t.Errorf("problems %v, want one at port and one at path (unknown)", problems)
	}
}
