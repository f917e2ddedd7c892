package policy

import (
	"strings"
	"testing"
)

func TestPlainResourceURI(t *testing.T) {
	for _, uri := range []string{
		"file:///docs/a.txt", "file:///My%20Docs/a.txt", "https://api.example.com:8443/v1/x.json?q=a&b=c",
		"urn:isbn:0451450523", "ui://widget/x.html", "test://static-text", "postgres://db/users/schema", "file:", "a+b.c-d:x",
		"file:///a%25b", "file:///%C3%A9t%C3%A9", "file:///docs/a..b/.hidden/...", "mailto:a@b.example",
	} {
		if err := PlainResourceURI(uri); err != nil {
			t.Errorf("PlainResourceURI(%q) = %v, want plain", uri, err)
		}
	}
	for _, tc := range []struct{ uri, why string }{
		{"", "empty"},
		{"docs/a.txt", "lower-case scheme"},
		{"FILE:///a", "lower-case scheme"},
		{"1file:///a", "lower-case scheme"},
		{"file", "no scheme"},
		{"https://API.example.com/x", "authority"},
		{"file:///docs/../secrets", "dot segment"},
		{"file:///docs/./a", "dot segment"},
		{"file:///docs/..", "dot segment"},
		{"file:..", "dot segment"},
		{"file:///docs/..;x/secrets", "dot segment"},
		{"file:///docs/..?x", "dot segment"},
		{"file:///docs/%2e%2e/secrets", "percent-encoding"},
		{"file:///docs/%2E%2E/secrets", "percent-encoding"},
		{"file:///a%2Fb", "percent-encoding"},
		{"file:///a%5Cb", "percent-encoding"},
		{"file:///a%41", "percent-encoding"},
		{"file:///a%c3%a9", "percent-encoding"},
		{"file:///a%00", "percent-encoding"},
		{"file:///a%2", "percent-encoding"},
		{"file:///a%", "percent-encoding"},
		{"file:///a#frag", "not allowed"},
		{"file:///a b", "not allowed"},
		{"http://[::1]/x", "not allowed"},
		{"file:///a\\b", "not allowed"},
		{"file:///é", "not allowed"},
	} {
		err := PlainResourceURI(tc.uri)
		if err == nil || !strings.Contains(err.Error(), tc.why) {
			t.Errorf("PlainResourceURI(%q) = %v, want an error about %q", tc.uri, err, tc.why)
		}
	}
}

func TestMatchResource(t *testing.T) {
	for _, tc := range []struct {
		glob, uri   string
		allow, deny bool
	}{
		{"file:///docs/*", "file:///docs/a.txt", true, true},
		{"file:///docs/*", "file:///docs/a/b.txt", false, true}, // deny reads * across /
		{"file:///docs/**", "file:///docs/a/b.txt", true, true},
		{"file:///docs/**", "file:///docs", true, true},
		{"file:///docs/*", "file:///DOCS/a.txt", false, true},       // deny ignores case
		{"file:///docs/*", "file:///docs/a.txt/", false, true},      // deny: trailing slash optional
		{"file:///docs/**", "file:///docs/../secrets", false, true}, // not plain: every deny, no allow
		{"file:///docs/**", "file:///docs/%2e%2e/secrets", false, true},
		{"file:///secrets/**", "FILE:///docs/a", false, true},
		{"file:///secrets/**", "file:///docs/a", false, false},
		{"https://api.example.com/v1/*.json", "https://api.example.com/v1/x.json", true, true},
		{"https://api.example.com/v1/*.json", "https://api.example.com:443/v1/x.json", false, false}, // ports are not normalised
		{"ui://*", "ui://w", true, true},
		{"file:///a%20b", "file:///a%20b", true, true},
	} {
		if got := MatchResource(tc.glob, tc.uri); got != tc.allow {
			t.Errorf("MatchResource(%q, %q) = %v, want %v", tc.glob, tc.uri, got, tc.allow)
		}
		if got := MatchDenyResource(tc.glob, tc.uri); got != tc.deny {
			t.Errorf("MatchDenyResource(%q, %q) = %v, want %v", tc.glob, tc.uri, got, tc.deny)
		}
	}
}

func (r Request) prompt(name string) Request {
	r = r.mcp("prompts/get", "", "")
	r.MCP.Prompt = name
	return r
}

func (r Request) resource(method, uri string) Request {
	r = r.mcp(method, "", "")
	r.MCP.Resource = uri
	return r
}

func TestDecideMCPPromptsAndResources(t *testing.T) {
	ep := mcpEP(nil, []Rule{
		allow(L7Rule{Method: "prompts/get", Prompt: anyOf("summarize", "report_*")}),
		allow(L7Rule{Method: "resources/read", Resource: anyOf("file:///docs/**")}),
		allow(L7Rule{Method: "resources/subscribe", Resource: anyOf("file:///docs/*.log")}),
		allow(L7Rule{Method: "resources/unsubscribe"}),
	},
		&L7Rule{Method: "prompts/get", Prompt: anyOf("report_secret*")},
		&L7Rule{Method: "resources/read", Resource: anyOf("file:///docs/private/**")},
	)
	p := pol(map[string]*NetworkPolicy{"docs": entry([]string{python}, ep)})
	r := req("orders.example.com", 443).from(python)
	runDecide(t, []decideCase{
		{"prompt allowed", p, r.prompt("summarize"), want{allow: true, rule: "rules[0]"}},
		{"prompt by glob", p, r.prompt("report_daily"), want{allow: true, rule: "rules[0]"}},
		{"prompt not named", p, r.prompt("delete_all"), want{reason: "prompts/get delete_all is not allowed by network_policies.docs"}},
		{"prompt case differs", p, r.prompt("Summarize"), want{reason: "prompts/get Summarize is not allowed"}},
		{"prompt denied by deny rule", p, r.prompt("report_secrets"), want{rule: "deny_rules[0]", reason: "prompts/get report_secrets is denied by deny_rules[0]"}},
		{"prompt deny reads * across /", p, r.prompt("report_secret/x"), want{rule: "deny_rules[0]"}},
		{"prompt without a name", p, r.prompt(""), want{reason: "prompts/get names no prompt"}},
		{"resource allowed", p, r.resource("resources/read", "file:///docs/a/b.txt"), want{allow: true, rule: "rules[1]"}},
		{"resource outside", p, r.resource("resources/read", "file:///etc/passwd"), want{reason: "resources/read file:///etc/passwd is not allowed"}},
		{"resource denied", p, r.resource("resources/read", "file:///docs/private/k"), want{rule: "deny_rules[1]", reason: "resources/read file:///docs/private/k is denied by deny_rules[1]"}},
		{"resource denied ignoring case", p, r.resource("resources/read", "file:///docs/PRIVATE/k"), want{rule: "deny_rules[1]"}},
		{"resource dot segments: denied", p, r.resource("resources/read", "file:///docs/x/../private/k"), want{rule: "deny_rules[1]"}},
		{"resource percent-encoded letters: denied", p, r.resource("resources/read", "file:///docs/%70rivate/k"), want{rule: "deny_rules[1]"}},
		{"resource rule is per method", p, r.resource("resources/subscribe", "file:///docs/a/b.txt"), want{reason: "resources/subscribe file:///docs/a/b.txt is not allowed"}},
		{"subscribe by glob", p, r.resource("resources/subscribe", "file:///docs/app.log"), want{allow: true, rule: "rules[2]"}},
		{"unsubscribe without matcher", p, r.resource("resources/unsubscribe", "file:///anything"), want{allow: true, rule: "rules[3]"}},
		{"resource without a URI", p, r.resource("resources/read", ""), want{reason: "resources/read names no resource"}},
		{"tools/call is not a prompt", p, r.mcp("tools/call", "summarize", ""), want{reason: "tools/call summarize is not allowed"}},
	})

	// A non-plain URI matches no allow rule even where no deny rule is.
	open := pol(map[string]*NetworkPolicy{"docs": entry(nil, mcpEP(nil, []Rule{
		allow(L7Rule{Method: "resources/read", Resource: anyOf("file:///docs/**")}),
	}))})
	runDecide(t, []decideCase{
		{"plain", open, r.resource("resources/read", "file:///docs/a"), want{allow: true}},
		{"dot segment", open, r.resource("resources/read", "file:///docs/../etc/passwd"), want{reason: "is not allowed"}},
		{"upper-case scheme", open, r.resource("resources/read", "FILE:///docs/a"), want{reason: "is not allowed"}},
	})
}

func TestValidatePromptAndResource(t *testing.T) {
	for _, tc := range []struct{ name, doc, path, msg string }{
		{"prompt needs prompts/get", mcpEndpoint("", "{allow: {method: tools/call, prompt: x}}"), ep0 + ".rules[0].allow.prompt", "needs method: prompts/get"},
		{"resource needs a resources method", mcpEndpoint("", "{allow: {method: resources/list, resource: 'file:///x'}}"), ep0 + ".rules[0].allow.resource", "needs method: resources/read"},
		{"prompt empty", mcpEndpoint("", "{allow: {method: prompts/get, prompt: {any: []}}}"), ep0 + ".rules[0].allow.prompt", "at least one glob"},
		{"prompt bad glob", mcpEndpoint("", "{allow: {method: prompts/get, prompt: 'a**'}}"), ep0 + ".rules[0].allow.prompt", "** must be a whole path segment"},
		{"resource braces", mcpEndpoint("", "{allow: {method: resources/read, resource: 'file:///{a,b}'}}"), ep0 + ".rules[0].allow.resource", "cannot hold { or }"},
		{"resource braces in any", mcpEndpoint("", "{allow: {method: resources/read, resource: {any: ['file:///a', 'file:///{b']}}}"), ep0 + ".rules[0].allow.resource.any[1]", "cannot hold { or }"},
		{"prompt on rest", withEndpoint("{host: a.example.com, port: 1, protocol: rest, rules: [{allow: {method: GET, path: /, prompt: x}}]}"), ep0 + ".rules[0].allow.prompt", "not valid on protocol rest"},
		{"resource on rest", withEndpoint("{host: a.example.com, port: 1, protocol: rest, rules: [{allow: {method: GET, path: /, resource: 'file:///x'}}]}"), ep0 + ".rules[0].allow.resource", "not valid on protocol rest"},
		{"broad prompts/get next to prompt rules", mcpEndpoint("", "{allow: {method: prompts/get, prompt: a}}, {allow: {method: prompts/get}}"), ep0 + ".rules[1].allow", "every prompts/get cannot be combined with prompt-specific"},
		{"broad resources/read deny next to resource rules", mcpEndpoint(", deny_rules: [{method: resources/read}]", "{allow: {method: resources/read, resource: 'file:///a'}}"), ep0 + ".deny_rules[0]", "every resources/read cannot be combined with resource-specific"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, _, err := Parse([]byte(tc.doc))
			if err == nil {
				t.Fatalf("Parse accepted the document:\n%s\ncanonical: %s", tc.doc, p.CanonicalJSON())
			}
			if p != nil {
				t.Error("Parse returned a policy with an error")
			}
			if ps := problemsOf(t, err); !hasProblem(ps, tc.path, tc.msg) {
				t.Errorf("no problem %q containing %q; got:\n%s", tc.path, tc.msg, err)
			}
		})
	}
	// Accepted: a broad resources/read next to resource-specific subscribe
	// rules (another method), and both matchers in deny rules.
	ok := mcpEndpoint(", deny_rules: [{method: prompts/get, prompt: 'admin*'}, {method: resources/read, resource: 'file:///secrets/**'}]",
		"{allow: {method: resources/read}}, {allow: {method: resources/subscribe, resource: 'file:///docs/*'}}, {allow: {method: prompts/get, prompt: {any: [b, a]}}}")
	p, _ := mustParse(t, ok)
	c := p.Canonical()
	var got []string
	for _, r := range c.NetworkPolicies["p"].Endpoints[0].Rules {
		if r.Allow.Prompt != nil {
			got = r.Allow.Prompt.Any
		}
	}
	if strings.Join(got, ",") != "a,b" {
		t.Errorf("canonical prompt matcher = %v, want [a b]", got)
	}
}
