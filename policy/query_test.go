package policy

import (
	"strings"
	"testing"
)

func restQuery(query string, deny bool) string {
	rule := "rules: [{allow: {method: GET, path: /dl, query: " + query + "}}]"
	if deny {
		rule = "access: full, deny_rules: [{method: GET, path: /dl, query: " + query + "}]"
	}
	return withEndpoint("{host: a.example.com, port: 443, protocol: rest, enforcement: enforce, " + rule + "}")
}

// OpenShell's query matcher shapes: a glob string, {glob: g} and
// {any: [globs]} (l7/mod.rs validate_matcher_value); both keys, unknown
// keys and an empty any are errors.
func TestQueryMatcherForms(t *testing.T) {
	for _, q := range []string{`{tag: "v1.*"}`, `{tag: {glob: "v1.*"}}`, `{tag: {any: ["v1.*", "v2.*"]}}`} {
		if _, _, err := Parse([]byte(restQuery(q, false))); err != nil {
			t.Errorf("query %s refused: %v", q, err)
		}
	}
	qp := ep0 + ".rules[0].allow.query.tag"
	parseProblem(t, restQuery(`{tag: {glob: "a*", any: [b]}}`, false), qp, "both glob and any")
	parseProblem(t, restQuery(`{tag: {mode: "a*"}}`, false), qp+".mode", "unknown field")
	parseProblem(t, restQuery(`{tag: {any: []}}`, false), qp, "at least one glob")
	parseProblem(t, restQuery(`{tag: {glob: [a]}}`, false), qp+".glob", "must be a string")
	parseProblem(t, withEndpoint("{host: a.example.com, port: 443, ports: [443, 8443]}"), ep0+".port", "mutually exclusive")

	p, _ := mustParse(t, restQuery(`{tag: {glob: "v1.*"}}`, false))
	deny, _ := mustParse(t, restQuery(`{tag: {any: ["adm*", "root"]}}`, true))
	runDecide(t, []decideCase{
		{"glob object allows", p, req("a.example.com", 443).http("GET", "/dl").withQuery("tag=v1.2"), want{allow: true}},
		{"glob object: every value must match", p, req("a.example.com", 443).http("GET", "/dl").withQuery("tag=v1.2&tag=v2"), want{reason: "no rule matches"}},
		{"glob object crosses /", p, req("a.example.com", 443).http("GET", "/dl").withQuery("tag=v1.a/b"), want{allow: true}},
		{"any denies one value", deny, req("a.example.com", 443).http("GET", "/dl").withQuery("tag=x&tag=admin"), want{rule: "deny_rules[0]"}},
		{"any, no value matches", deny, req("a.example.com", 443).http("GET", "/dl").withQuery("tag=x"), want{allow: true}},
	})
}

// A malformed query glob is a warning (OpenShell: validate_query_glob_warns_on_unclosed_bracket,
// validate_query_any_warns_on_malformed_glob_item) and fails closed: it
// matches no value in an allow rule and every value in a deny rule.
func TestMalformedQueryGlob(t *testing.T) {
	allowDoc := restQuery(`{tag: "[unclosed"}`, false)
	p, warns := mustParse(t, allowDoc)
	if !hasProblem(warns, ep0+".rules[0].allow.query.tag", "unclosed bracket") {
		t.Errorf("no warning on the malformed glob: %v", warns)
	}
	anyDoc := restQuery(`{tag: {any: ["valid-*", "[bad"]}}`, false)
	pa, warns := mustParse(t, anyDoc)
	if !hasProblem(warns, ep0+".rules[0].allow.query.tag.any[1]", "unclosed bracket") {
		t.Errorf("no warning on the malformed any item: %v", warns)
	}
	denyDoc := restQuery(`{tag: {glob: "a\\"}}`, true)
	pd, warns := mustParse(t, denyDoc)
	if !hasProblem(warns, ep0+".deny_rules[0].query.tag", "trailing backslash") {
		t.Errorf("no warning on the malformed deny glob: %v", warns)
	}
	get := func(q string) Request { return req("a.example.com", 443).http("GET", "/dl").withQuery(q) }
	runDecide(t, []decideCase{
		{"malformed allow glob matches nothing", p, get("tag=[unclosed"), want{reason: "no rule matches"}},
		{"malformed allow glob, other value", p, get("tag=u"), want{reason: "no rule matches"}},
		{"valid item of any still matches", pa, get("tag=valid-1"), want{allow: true}},
		{"malformed item matches nothing", pa, get("tag=[bad"), want{reason: "no rule matches"}},
		{"malformed deny glob denies any value", pd, get("tag=anything"), want{rule: "deny_rules[0]"}},
		{"malformed deny glob, parameter absent", pd, get("other=1"), want{allow: true}},
	})
}

// OpenShell's query globs (Rego glob.match) read `{a,b}` as alternatives:
// so do ours, or a deny rule on {admin,root} would deny neither. An
// unclosed brace is a warning (OpenShell:
// validate_query_glob_warns_on_unclosed_brace) and fails closed.
func TestQueryGlobBraces(t *testing.T) {
	deny, _ := mustParse(t, restQuery(`{role: "{admin,ro*t}"}`, true))
	allow, _ := mustParse(t, restQuery(`{format: {glob: "{json,x{ml,sd}}"}}`, false))
	bad, warns := mustParse(t, restQuery(`{format: {glob: "{json,xml"}}`, false))
	if !hasProblem(warns, ep0+".rules[0].allow.query.format", "unclosed {") {
		t.Errorf("no warning on the unclosed brace: %v", warns)
	}
	get := func(q string) Request { return req("a.example.com", 443).http("GET", "/dl").withQuery(q) }
	runDecide(t, []decideCase{
		{"deny brace first", deny, get("role=admin"), want{rule: "deny_rules[0]"}},
		{"deny brace glob", deny, get("role=root"), want{rule: "deny_rules[0]"}},
		{"deny brace literal no longer matches", deny, get("role={admin,ro*t}"), want{allow: true}},
		{"deny brace other value", deny, get("role=user"), want{allow: true}},
		{"allow nested brace", allow, get("format=xsd"), want{allow: true}},
		{"allow brace other", allow, get("format=yaml"), want{reason: "no rule matches"}},
		{"unclosed brace matches nothing", bad, get("format=json"), want{reason: "no rule matches"}},
	})
	for g, want := range map[string]bool{"{a,b": false, "a}": false, "{a,{b}": false, `\{a,b\}`: true, "[{]a": true, "[{]a,b}": false, "a{b}c": true} {
		if _, ok := ExpandQueryGlob(g); ok != want {
			t.Errorf("ExpandQueryGlob(%q) ok = %v, want %v", g, ok, want)
		}
	}
	if alts, ok := ExpandQueryGlob("{" + strings.Repeat("a,", 300) + "b}"); ok {
		t.Errorf("%d alternatives accepted, want at most %d", len(alts), maxBraceAlternatives)
	}
}
