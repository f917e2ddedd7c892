package advisor

import (
	"path"
	"slices"
	"strings"

	"golang.org/x/net/publicsuffix"

	"github.com/portcullis-dev/portcullis/policy"
)

// The narrowness allow-list of DESIGN.md ("Proposal files"), part by
// part: the binaries, endpoints, hosts, paths, methods and rules an
// operation may add. Apply's operations (apply.go) call these checks.

func hasMeta(s string) bool { return strings.ContainsAny(s, "*?[\\") }

// binaryPath accepts exactly one named binary: absolute, clean, no glob.
func (r refuser) binaryPath(fp, p string) error {
	switch {
	case p == "":
		return r.at(fp, RuleBinary, "is required")
	case hasMeta(p):
		return r.at(fp, RuleBinary, "%q is a glob: name exactly one binary", p)
	case !strings.HasPrefix(p, "/") || path.Clean(p) != p || p == "/":
		return r.at(fp, RuleBinary, "%q must be a clean absolute path of a binary", p)
	}
	return nil
}

// newEndpoint checks an endpoint of a new entry.
func (r refuser) newEndpoint(fp string, e *policy.Endpoint) error {
	if e == nil {
		return r.at(fp, RuleInvalidPolicy, "must be an endpoint mapping")
	}
	r.keep(r.host(keyPath(fp, "host"), e.Host))
	ports := policy.EndpointPorts(e)
	if len(ports) == 0 {
		r.keep(r.at(keyPath(fp, "port"), RulePort, "an explicit port is required"))
	}
	for _, p := range ports {
		if p < 1 || p > 65535 {
			r.keep(r.at(keyPath(fp, "port"), RulePort, "%d is not a valid port", p))
			break
		}
		if policy.DeniedPort(p) {
			r.keep(r.at(keyPath(fp, "port"), RulePort, "%d is a cluster control-plane port and always denied", p))
			break
		}
	}
	r.forbiddenEndpointFields(fp, e)
	if e.Path != "" {
		r.keep(r.pathGlob(keyPath(fp, "path"), e.Path))
	}
	switch e.Protocol {
	case policy.ProtocolL4:
		if len(e.Rules) > 0 || len(e.DenyRules) > 0 {
			return r.at(keyPath(fp, "rules"), RuleProtocol, "an L4 endpoint (no protocol) has no rules; use protocol rest or mcp")
		}
		return nil
	case policy.ProtocolREST, policy.ProtocolMCP:
	default:
		return r.at(keyPath(fp, "protocol"), RuleProtocol, "a proposal may add rest, mcp or L4 (no protocol) endpoints, not %q", e.Protocol)
	}
	if len(e.Rules) == 0 {
		return r.at(keyPath(fp, "rules"), RuleEmptyAllow, "an %s endpoint needs allow rules naming exactly what it allows", e.Protocol)
	}
	if len(e.Rules) > MaxRulesPerOperation {
		return r.at(keyPath(fp, "rules"), RuleInvalidPolicy, "has %d rules; the limit is %d", len(e.Rules), MaxRulesPerOperation)
	}
	for i, rule := range e.Rules {
		if err := r.keep(r.allowRule(indexPath(keyPath(fp, "rules"), i), e.Protocol, rule)); err != nil {
			return err
		}
	}
	return nil
}

// forbiddenEndpointFields refuses every endpoint option a proposal may
// not set, each in its own refusal.
func (r refuser) forbiddenEndpointFields(fp string, e *policy.Endpoint) {
	forbid := []struct {
		field string
		set   bool
	}{
		{"access", e.Access != ""},
		{"tls", e.TLS != ""},
		{"enforcement", e.Enforcement != "" && e.Enforcement != policy.EnforcementEnforce},
		{"allowed_ips", len(e.AllowedIPs) > 0},
		{"allow_encoded_slash", e.AllowEncodedSlash},
		{"websocket_credential_rewrite", e.WebsocketCredentialRewrite},
		{"request_body_credential_rewrite", e.RequestBodyCredentialRewrite},
		{"allow_uninspected_credentials", e.AllowUninspectedCredentials},
		{"credential_signing", e.CredentialSigning != ""},
		{"signing_service", e.SigningService != ""},
		{"signing_region", e.SigningRegion != ""},
		{"credential_binding", e.CredentialBinding != nil},
		{"persisted_queries", e.PersistedQueries != ""},
		{"graphql_persisted_queries", e.GraphQLPersistedQueries != nil},
		{"graphql_max_body_bytes", e.GraphQLMaxBodyBytes != 0},
		{"json_rpc", e.JSONRPC != nil},
		{"mcp", e.MCP != nil},
	}
	for _, f := range forbid {
		switch {
		case !f.set:
		case slices.Contains(credentialFields, f.field):
			r.keep(r.at(keyPath(fp, f.field), RuleForbiddenField, "a proposal may not set %s: it never adds or widens a credential binding; credentials are an operator's to bind (attach a provider, then bind it in the policy)", f.field))
		default:
			r.keep(r.at(keyPath(fp, f.field), RuleForbiddenField, "a proposal may not set %s; an operator must", f.field))
		}
	}
}

// host accepts exact hosts and one `*` label below a registrable domain;
// never metadata, loopback, private or otherwise always-denied addresses.
func (r refuser) host(fp, h string) error {
	if strings.TrimSpace(h) == "" {
		return r.at(fp, RuleInvalidHost, "is required")
	}
	if policy.IsMetadataHost(h) {
		return r.at(fp, RuleCloudMetadata, "%q is a cloud metadata address, which no policy may open", h)
	}
	if policy.IsLoopbackName(h) {
		return r.at(fp, RulePrivateAddress, "%q is loopback", h)
	}
	if a, ok := policy.ParseHostIP(h); ok {
		if why, denied := policy.AlwaysDenied(a, false); denied {
			return r.at(fp, RulePrivateAddress, "%q is always denied: %s", h, why)
		}
		if policy.IsPrivate(a) {
			return r.at(fp, RulePrivateAddress, "%q is a private address; only an operator can open private ranges", h)
		}
	}
	if err := policy.ValidHostPattern(h); err != nil {
		return r.at(fp, RuleInvalidHost, "%v", err)
	}
	n := policy.NormalizeHost(h)
	if !strings.Contains(n, "*") {
		return nil
	}
	first, rest, _ := strings.Cut(n, ".")
	if first != "*" || strings.Contains(rest, "*") {
		return r.at(fp, RuleHostWildcard, "%q: the only host glob a proposal may use is one whole `*` label below a registrable domain (*.example.com)", h)
	}
	if suffix, _ := publicsuffix.PublicSuffix(rest); suffix == rest {
		return r.at(fp, RulePublicSuffix, "%q: %s is a public suffix; a wildcard under it reaches every tenant's domain", h, rest)
	}
	if _, err := publicsuffix.EffectiveTLDPlusOne(rest); err != nil {
		return r.at(fp, RulePublicSuffix, "%q: %s is not below a registrable domain", h, rest)
	}
	return nil
}

// pathGlob accepts a path whose globs stay within one segment, or a
// fixed prefix followed by a `/**` tail.
func (r refuser) pathGlob(fp, p string) error {
	if !strings.HasPrefix(p, "/") {
		return r.at(fp, RulePath, "%q must start with /", p)
	}
	if strings.ContainsAny(p, "?#") {
		// /repos?token=secret is a query string, and would be stored (and
		// shown to every reviewer) as a glob whose `?` matches any byte.
		// The message quotes only what comes before: a query string often
		// carries a secret, and refusals are logged and shown.
		return r.at(fp, RuleQueryInPath, "%q is followed by ? or #: a path never carries a query string or fragment (use query matchers)", p[:strings.IndexAny(p, "?#")])
	}
	if err := policy.ValidGlob(p); err != nil {
		return r.at(fp, RulePath, "%v", err)
	}
	segs := strings.Split(p[1:], "/")
	if last := len(segs) - 1; segs[last] == "**" {
		for _, s := range segs[:last] {
			if s == "" || policy.HasWildcard(s) {
				return r.at(fp, RulePath, "%q: a /** tail needs a fixed, non-empty prefix before it", p)
			}
		}
		if last == 0 {
			return r.at(fp, RulePath, "%q allows every path: a /** tail needs a fixed prefix", p)
		}
		return nil
	}
	globbed := 0
	for _, s := range segs {
		if s == "**" {
			return r.at(fp, RulePath, "%q: ** may only be the last segment, below a fixed prefix", p)
		}
		if policy.HasWildcard(s) {
			globbed++
		}
	}
	if globbed > 1 {
		return r.at(fp, RulePath, "%q: globs must stay within one path segment", p)
	}
	return nil
}

// namedMatcher applies the narrowness rules to an MCP rule's prompt and
// resource: prompts/get must name its prompts, and the resources methods
// their URIs, exactly (globs escaped); a resource must be a plain URI
// (policy.PlainResourceURI), which is all a resource rule can allow.
func (r refuser) namedMatcher(ap string, a *policy.L7Rule) error {
	type named struct {
		field, rule, what string
		m                 *policy.Matcher
		needed            bool
	}
	for _, n := range []named{
		{"prompt", RulePrompt, "prompt", a.Prompt, a.Method == "prompts/get"},
		{"resource", RuleResource, "resource URI", a.Resource, policy.IsResourceMethod(a.Method)},
	} {
		fp := keyPath(ap, n.field)
		switch {
		case !n.needed && n.m != nil:
			return r.at(fp, n.rule, "%s does not apply to method %q", n.field, a.Method)
		case !n.needed:
			continue
		case n.m == nil || len(n.m.Any) == 0:
			return r.at(fp, n.rule, "%s needs the %s named", a.Method, n.what)
		case len(n.m.Any) > MaxRulesPerOperation:
			return r.at(fp, n.rule, "names more than %d %ss", MaxRulesPerOperation, n.field)
		}
		for i, g := range n.m.Any {
			p := fp
			if len(n.m.Any) > 1 {
				p = indexPath(keyPath(fp, "any"), i)
			}
			if g == "" || policy.HasWildcard(g) {
				return r.at(p, n.rule, "%q: name a %s exactly (escape *, ?, [ and \\ with \\)", g, n.what)
			}
			if n.field == "resource" {
				if err := policy.PlainResourceURI(policy.UnescapeGlob(g)); err != nil {
					return r.at(p, n.rule, "%q is not a plain URI, so no resource rule can allow it: %v", g, err)
				}
			}
		}
	}
	return nil
}

// httpMethod accepts one explicit HTTP method token.
func (r refuser) httpMethod(fp, m string) error {
	if m == "" {
		return r.at(fp, RuleMethod, "an explicit method is required")
	}
	if m == "*" || hasMeta(m) {
		return r.at(fp, RuleMethod, "%q: name one method explicitly", m)
	}
	if len(m) > 32 {
		return r.at(fp, RuleMethod, "%q is not an HTTP method", m)
	}
	for i := 0; i < len(m); i++ {
		if c := m[i]; !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z') {
			return r.at(fp, RuleMethod, "%q is not an HTTP method", m)
		}
	}
	return nil
}

// allowRule checks one allow rule for an endpoint of the given protocol.
func (r refuser) allowRule(fp, protocol string, rule policy.Rule) error {
	a := rule.Allow
	ap := keyPath(fp, "allow")
	if a == nil {
		return r.at(ap, RuleEmptyAllow, "a rule without allow allows nothing")
	}
	if a.Method == "" && a.Path == "" && a.Tool == nil && a.Params == nil && a.Query == nil && a.Prompt == nil && a.Resource == nil &&
		a.Command == "" && a.OperationType == "" && a.OperationName == "" && a.Fields == nil {
		return r.at(ap, RuleEmptyAllow, "allow: {} would allow everything on the endpoint")
	}
	if a.Review != nil {
		// Whether a call waits for a person is the operator's to say. A
		// rule without review beside a reviewed one is a proposal like
		// any other: the prover reports the calls it releases from
		// review (review_removed), and the approval rules decide.
		r.keep(r.at(keyPath(ap, "review"), RuleForbiddenField, "a proposal may not set review: whether calls wait for a person's approval is an operator's annotation (omit review; an operator may add it)"))
	}
	for _, f := range []struct {
		name string
		set  bool
	}{
		{"command", a.Command != ""},
		{"operation_type", a.OperationType != ""},
		{"operation_name", a.OperationName != ""},
		{"fields", a.Fields != nil},
		{"params", a.Params != nil},
	} {
		if f.set {
			r.keep(r.at(keyPath(ap, f.name), RuleForbiddenField, "a proposal may not set %s on a %s rule", f.name, protocol))
		}
	}
	switch protocol {
	case policy.ProtocolREST:
		// Method, path and the MCP-only fields are refused each on its
		// own, so one answer names them all.
		r.keep(r.httpMethod(keyPath(ap, "method"), a.Method))
		if a.Path == "" {
			r.keep(r.at(keyPath(ap, "path"), RulePath, "an explicit path is required"))
		} else {
			r.keep(r.pathGlob(keyPath(ap, "path"), a.Path))
		}
		if a.Tool != nil || a.ArgumentsSchema != nil || a.Prompt != nil || a.Resource != nil {
			return r.at(keyPath(ap, "tool"), RuleForbiddenField, "tool, prompt, resource and arguments_schema apply to mcp endpoints only")
		}
	case policy.ProtocolMCP:
		mp := keyPath(ap, "method")
		switch {
		case a.Method == "":
			return r.at(mp, RuleMethod, "an explicit MCP method is required")
		case hasMeta(a.Method) || len(a.Method) > 128:
			return r.at(mp, RuleMethod, "%q: name one MCP method exactly", a.Method)
		}
		if a.Path != "" || a.Query != nil {
			r.keep(r.at(keyPath(ap, "path"), RuleForbiddenField, "path and query do not apply to mcp rules"))
		}
		tp := keyPath(ap, "tool")
		if a.Method == "tools/call" {
			if a.Tool == nil || len(a.Tool.Any) == 0 {
				return r.at(tp, RuleTool, "tools/call needs the tool named")
			}
			if len(a.Tool.Any) > MaxRulesPerOperation {
				return r.at(tp, RuleTool, "names more than %d tools", MaxRulesPerOperation)
			}
			for i, t := range a.Tool.Any {
				if hasMeta(t) || !policy.ValidToolName(t) {
					p := tp
					if len(a.Tool.Any) > 1 {
						p = indexPath(keyPath(tp, "any"), i)
					}
					return r.at(p, RuleTool, "%q: name a tool exactly (^[A-Za-z0-9_.-]{1,128}$, no globs)", t)
				}
			}
			if err := r.checkSchemaRule(fp, nil, a); err != nil {
				return err
			}
		} else if a.Tool != nil || a.ArgumentsSchema != nil {
			return r.at(tp, RuleTool, "tool and arguments_schema apply to tools/call only")
		}
		if err := r.namedMatcher(ap, a); err != nil {
			return err
		}
	default:
		return r.at(fp, RuleProtocol, "a proposal may add rules to rest and mcp endpoints only, not %q", protocol)
	}
	return nil
}
