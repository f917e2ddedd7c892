package policy

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"
)

// How a REST endpoint judges a request (step 3 of Decide, decide.go):
// access presets, allow rules and the matchers rules share (method, path
// and query globs).

// AccessMethods returns the HTTP methods an access preset allows
// (OpenShell): read-only is GET, HEAD, OPTIONS; read-write adds POST, PUT,
// PATCH. full (every method) and unknown presets return nil.
func AccessMethods(preset string) []string { return accessMethods[preset] }

var accessMethods = map[string][]string{
	AccessReadOnly:  {"GET", "HEAD", "OPTIONS"},
	AccessReadWrite: {"GET", "HEAD", "OPTIONS", "POST", "PUT", "PATCH"},
}

// judgeREST allows a request that the endpoint's access preset or one of
// its unexpired allow rules matches.
func judgeREST(e endpointRef, r Request) outcome {
	if r.HTTPMethod == "" {
		return requireL7(e)
	}
	path, err := CanonicalPath(r.Path, e.ep.AllowEncodedSlash)
	if err != nil {
		return outcome{ep: e, hard: true, reason: fmt.Sprintf("malformed request path: %v", err)}
	}
	method := strings.ToUpper(r.HTTPMethod)
	what := fmt.Sprintf("%s %s", method, path)
	switch e.ep.Access {
	case AccessFull:
		return outcome{ep: e, allow: true, rule: "access: full", reason: fmt.Sprintf("allowed by access: full on %s", e.name())}
	case AccessReadOnly, AccessReadWrite:
		if slices.Contains(accessMethods[e.ep.Access], method) {
			return outcome{ep: e, allow: true, rule: "access: " + e.ep.Access,
				reason: fmt.Sprintf("allowed by access: %s on %s", e.ep.Access, e.name())}
		}
	}
	var held *outcome
	for i, rule := range e.ep.Rules {
		if rule.Allow == nil || expired(rule.Allow, r.Time) {
			continue
		}
		if restRuleMatches(rule.Allow, r, path, true) {
			if o, done := allowedBy(e, i, rule.Allow, &held); done {
				return o
			}
		}
	}
	if held != nil {
		return *held
	}
	return outcome{ep: e, reason: fmt.Sprintf("%s is not allowed by %s: no rule matches", what, e.name())}
}

// allowedBy records that rules[i] of e allows the request. A rule without
// review decides at once (done); the first reviewed rule is kept in *held
// and decides only if no later rule allows the request without review:
// an allow needs review only when every rule that admits it does.
func allowedBy(e endpointRef, i int, rule *L7Rule, held **outcome) (o outcome, done bool) {
	o = outcome{ep: e, allow: true, rule: fmt.Sprintf("rules[%d]", i),
		reason: fmt.Sprintf("allowed by rules[%d] of %s", i, e.name())}
	wait, reviewed := rule.Reviewed()
	if !reviewed {
		return o, true
	}
	if *held == nil {
		o.review = wait
		o.reason = fmt.Sprintf("allowed by rules[%d] of %s once a person approves the call (review)", i, e.name())
		*held = &o
	}
	return o, false
}

// restRuleMatches reports whether a REST rule matches: method (`*` or
// absent = any method; compared case-insensitively), path glob (absent =
// any path) on the canonical path — MatchGlob for an allow rule,
// MatchDenyPath for a deny rule — and every query matcher.
func restRuleMatches(rule *L7Rule, r Request, path string, allow bool) bool {
	if !methodMatches(rule.Method, r.HTTPMethod) {
		return false
	}
	if rule.Path != "" && (allow && !MatchGlob(rule.Path, path) || !allow && !MatchDenyPath(rule.Path, path)) {
		return false
	}
	return queryMatches(rule.Query, r.Query, allow)
}

// methodMatches compares a REST rule's method (`*` or absent = any) with
// the request's, case-insensitively. A rule on GET also matches HEAD, in
// allow and deny rules alike, as OpenShell's rule does (RFC 9110 §9.3.2:
// HEAD is GET without the body): servers answer HEAD with the GET handler,
// so what GET must not reach HEAD must not either, and what GET may read
// HEAD reveals no more of.
func methodMatches(ruleMethod, method string) bool {
	switch {
	case ruleMethod == "" || ruleMethod == "*" || strings.EqualFold(ruleMethod, method):
		return true
	case strings.EqualFold(ruleMethod, "GET") && strings.EqualFold(method, "HEAD"):
		return true
	}
	return false
}

// pathGlobMatches reads allow globs narrowly (MatchGlob) and deny globs
// widely (MatchDenyGlob): each reading is the safe one for its side. Used
// for MCP method names; paths use MatchDenyPath.
func pathGlobMatches(pattern, path string, allow bool) bool {
	if allow {
		return MatchGlob(pattern, path)
	}
	return MatchDenyGlob(pattern, path)
}

// queryMatches applies a rule's query matchers to the decoded query
// parameters. Every named parameter must be present. In an allow rule every
// value of the parameter must match one of the globs; in a deny rule one
// matching value is enough — each the narrower reading for its side. A
// query that does not decode matches no allow rule and every deny rule
// that has query matchers. In query values `*` (and `**`) also matches
// `/`. A matcher is a glob string, {glob: g} or {any: [globs]}.
func queryMatches(matchers map[string]*Matcher, raw string, allow bool) bool {
	if len(matchers) == 0 {
		return true
	}
	values, err := url.ParseQuery(raw)
	if err != nil {
		return !allow
	}
	for name, m := range matchers {
		vs := values[name]
		if len(vs) == 0 {
			return false
		}
		matched := 0
		for _, v := range vs {
			if m != nil && m.matchesValue(v, allow) {
				matched++
			}
		}
		if allow && matched != len(vs) || !allow && matched == 0 {
			return false
		}
	}
	return true
}

// matchesValue matches a query value against the matcher's globs, with `*`
// free to cross `/` (query values are not paths) and `{a,b}` read as
// alternatives, as OpenShell reads them. A glob that does not parse
// (ValidQueryGlob) fails closed: it matches no value in an allow
// rule and every value in a deny rule.
func (m *Matcher) matchesValue(v string, allow bool) bool {
	for _, g := range m.Any {
		match, ok := matchQueryGlob(g, v)
		if !ok && !allow || match {
			return true
		}
	}
	return false
}

// expired reports whether an allow rule's grant has ended: expires_at at
// or before now.
func expired(rule *L7Rule, now time.Time) bool {
	return rule.ExpiresAt != nil && !now.Before(*rule.ExpiresAt)
}
