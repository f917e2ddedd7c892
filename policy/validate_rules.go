package policy

import "strings"

// This file holds the checks on an endpoint's L7 rules and their HTTP
// matchers (method, path, query).

// rule checks one allow (allow=true) or deny rule against its endpoint's
// protocol.
func (v *validator) rule(path string, ep *Endpoint, r *L7Rule, allow bool) {
	proto := ep.Protocol
	notValid := func(field string, set bool) {
		if set {
			v.errorf(keyPath(path, field), "is not valid on protocol %s", proto)
		}
	}
	// Each protocol refuses the fields of the others' rules.
	notHTTP := func() {
		notValid("method", r.Method != "")
		notValid("path", r.Path != "")
		notValid("query", r.Query != nil)
	}
	notSQL := func() {
		notValid("command", r.Command != "")
	}
	notMCP := func() {
		notValid("tool", r.Tool != nil)
		notValid("params", r.Params != nil)
		notValid("prompt", r.Prompt != nil)
		notValid("resource", r.Resource != nil)
		notValid("arguments_schema", r.ArgumentsSchema != nil)
		notValid("rate_limit", r.RateLimit != nil)
		notValid("definition", r.Definition != "")
	}
	notGraphQL := func() {
		notValid("operation_type", r.OperationType != "")
		notValid("operation_name", r.OperationName != "")
		notValid("fields", r.Fields != nil)
	}
	graphQLFields := func(required bool) {
		switch r.OperationType {
		case "query", "mutation", "subscription", "*":
		case "":
			if required {
				v.errorf(keyPath(path, "operation_type"), "is required")
			}
		default:
			v.errorf(keyPath(path, "operation_type"), "must be query, mutation, subscription or *")
		}
		if r.OperationName != "" {
			if err := ValidGlob(r.OperationName); err != nil {
				v.errorf(keyPath(path, "operation_name"), "%v", err)
			}
		}
		if r.Fields != nil && len(r.Fields) == 0 {
			v.errorf(keyPath(path, "fields"), "must not be empty (omit it to match every field)")
		}
		for i, f := range r.Fields {
			if err := ValidGlob(f); err != nil {
				v.errorf(indexPath(keyPath(path, "fields"), i), "%v", err)
			}
		}
	}
	switch proto {
	case ProtocolREST:
		v.httpRule(path, r, false, allow)
		notSQL()
		notMCP()
		notGraphQL()
	case ProtocolWebSocket:
		isGraphQL := r.OperationType != "" || r.OperationName != "" || r.Fields != nil
		if isGraphQL {
			if r.Method != "" || r.Path != "" || r.Query != nil {
				v.errorf(path, "do not combine method, path or query with GraphQL operation fields in one rule")
			}
			graphQLFields(true)
		} else {
			v.httpRule(path, r, true, allow)
		}
		notSQL()
		notMCP()
	case ProtocolGraphQL:
		graphQLFields(true)
		notSQL()
		notMCP()
		notHTTP()
	case ProtocolSQL:
		if r.Command == "" {
			v.errorf(keyPath(path, "command"), "is required on protocol sql")
		}
		notHTTP()
		notMCP()
		notGraphQL()
	case ProtocolJSONRPC:
		switch {
		case r.Method == "":
			v.errorf(keyPath(path, "method"), "is required on protocol json-rpc")
		case r.Method != "*" && hasGlobMeta(r.Method):
			v.errorf(keyPath(path, "method"), "must be an exact method name or * on protocol json-rpc")
		}
		notSQL()
		notMCP()
		notValid("path", r.Path != "")
		notValid("query", r.Query != nil)
		notGraphQL()
	case ProtocolMCP:
		v.mcpRule(path, ep, r, allow)
	}
	v.review(path, proto, r, allow, proto == ProtocolMCP && callsTools(ep, r))
	if r.ExpiresAt != nil && !allow {
		v.errorf(keyPath(path, "expires_at"), "is only valid on allow rules")
	}
	if r.ExpiresAt != nil && r.ExpiresAt.IsZero() {
		v.errorf(keyPath(path, "expires_at"), "must be a time")
	}
}

// httpRule checks method, path and query of a REST or WebSocket rule.
// Only allow rules get the single-`*` warning: deny globs are read the
// wider, OpenShell way too (see MatchDenyGlob).
func (v *validator) httpRule(path string, r *L7Rule, websocket, allow bool) {
	mp := keyPath(path, "method")
	switch {
	case r.Method == "":
		v.errorf(mp, "is required")
	case websocket:
		switch strings.ToUpper(r.Method) {
		case "GET", "WEBSOCKET_TEXT", "*":
		default:
			v.errorf(mp, "must be GET, WEBSOCKET_TEXT or * on protocol websocket")
		}
	case r.Method != "*" && !httpToken.MatchString(r.Method):
		v.errorf(mp, "must be an HTTP method or *")
	}
	pp := keyPath(path, "path")
	switch {
	case r.Path == "":
		v.errorf(pp, "is required")
	case !strings.HasPrefix(r.Path, "/") && !strings.HasPrefix(r.Path, "*"):
		v.errorf(pp, "must start with /")
	default:
		if allow {
			if err := ValidGlob(r.Path); err != nil {
				v.errorf(pp, "%v", err)
			} else {
				v.singleStar(pp, r.Path)
				v.allowBraces(pp, r.Path)
			}
		} else if err := ValidDenyPathGlob(r.Path); err != nil {
			v.errorf(pp, "%v", err)
		}
		v.pathSpelling(pp, r.Path, allow)
	}
	for _, k := range sortedKeys(r.Query) {
		qp := keyPath(keyPath(path, "query"), k)
		if k == "" {
			v.errorf(qp, "query parameter name must not be empty")
		}
		v.queryMatcher(qp, r.Query[k], allow)
	}
}

func (v *validator) matcher(path string, m *Matcher) {
	if m == nil || len(m.Any) == 0 {
		v.errorf(path, "must name at least one glob")
		return
	}
	for i, g := range m.Any {
		p := path
		if len(m.Any) > 1 {
			p = indexPath(keyPath(path, "any"), i)
		}
		if err := ValidGlob(g); err != nil {
			v.errorf(p, "%v", err)
		}
	}
}

// queryMatcher checks a query parameter matcher. As in OpenShell, a glob
// that does not parse (an unclosed `[`, a trailing backslash) is a
// warning, not an error; it fails closed: in an allow rule it matches no
// value, in a deny rule every value (OpenShell's Rego, where the failed
// match is undefined, would let the deny rule lapse).
func (v *validator) queryMatcher(path string, m *Matcher, allow bool) {
	if m == nil || len(m.Any) == 0 {
		v.errorf(path, "must name at least one glob")
		return
	}
	effect := "it matches every value, so this deny rule applies whenever the parameter is present"
	if allow {
		effect = "it matches no value, so this rule allows no request carrying the parameter"
	}
	for i, g := range m.Any {
		p := path
		if len(m.Any) > 1 {
			p = indexPath(keyPath(path, "any"), i)
		}
		if err := ValidQueryGlob(g); err != nil {
			v.warnf(p, "%v: %s", err, effect)
		}
	}
}
