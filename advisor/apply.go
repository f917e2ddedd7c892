package advisor

import (
	"errors"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/net/publicsuffix"

	"github.com/portcullis-dev/portcullis/policy"
)

// Refusal rules: the Rule of a RefusalError, stable strings the gateway
// and CLI can show and tests can match.
const (
	RuleHostWildcard      = "host_wildcard"          // a host glob other than one `*` label below a registrable domain
	RulePublicSuffix      = "public_suffix_wildcard" // a wildcard directly under a public suffix (*.github.io)
	RuleCloudMetadata     = "cloud_metadata"         // a metadata address or name in any spelling
	RulePrivateAddress    = "private_address"        // loopback, link-local, private or otherwise always-denied addresses
	RuleInvalidHost       = "invalid_host"
	RulePort              = "port"             // a missing or control-plane port
	RuleProtocol          = "protocol"         // a protocol the advisor cannot grant narrowly
	RuleBinary            = "binary"           // not exactly one named, clean, absolute binary
	RuleEmptyAllow        = "empty_allow"      // allow: {} or a rule without allow
	RuleMethod            = "method"           // a missing, `*` or glob method
	RulePath              = "path"             // a path glob wider than one segment or a /** tail below a fixed prefix
	RuleQueryInPath       = "query_in_path"    // a `?` or `#` in a proposed path: a query string or fragment is not part of a path
	RuleTool              = "tool"             // a missing or glob tool name
	RulePrompt            = "prompt"           // a missing or glob prompt name
	RuleResource          = "resource"         // a missing, glob or not plain resource URI
	RuleForbiddenField    = "forbidden_field"  // access, tls, enforcement, allowed_ips, credentials, mcp options, …
	RuleUnknownTarget     = "unknown_target"   // the named entry or endpoint does not exist
	RuleAmbiguousTarget   = "ambiguous_target" // several endpoints match: name the path
	RuleEntryExists       = "entry_exists"
	RuleEndpointsMismatch = "endpoints_mismatch" // add_binary does not list exactly the entry's endpoints
	RuleChangesNothing    = "changes_nothing"
	RuleInvalidPolicy     = "invalid_policy"   // the resulting policy does not validate
	RuleNotOffered        = "not_offered"      // a denial the advisor does not offer (version probes)
	RuleTooComplex        = "too_complex"      // globs beyond the intake bounds, or a proof beyond the prover's budget
	RuleArgumentsSchema   = "arguments_schema" // a schema that admits any arguments, or a rule dropping a tool's schema
	RuleArguments         = "arguments"        // a denial by an arguments_schema without (or with other) denied arguments
	RuleDefinition        = "definition"       // a repin's fingerprints, or a definition denial with no definition to pin (repin.go)
)

// RefusalError is why a proposal (or one of its operations) is refused.
// The gateway maps it to InvalidArgument with Op, Field and Rule as
// details.
//
// Apply and Evaluate check every operation and every rule of a proposal
// before answering, so one answer names every narrowness violation: the
// first is the error itself, the others are in Also, in the order of the
// proposal (each with its own field path). A sandbox fixes them all in
// one try.
type RefusalError struct {
	Op     int    // index in operations; -1 for the proposal as a whole
	Field  string // field path, e.g. operations[1].add_allow_rules.rules[0].allow.tool
	Rule   string // one of the Rule… constants
	Reason string // human-readable
	// Also lists the other violations found in the same proposal, in
	// order (their own Also is empty).
	Also []*RefusalError
}

func (e *RefusalError) Error() string {
	if len(e.Also) == 0 {
		return e.one()
	}
	parts := make([]string, 0, len(e.Also)+1)
	for _, r := range e.All() {
		parts = append(parts, r.one())
	}
	return fmt.Sprintf("%d refusals: %s", len(parts), strings.Join(parts, "; "))
}

func (e *RefusalError) one() string {
	where := e.Field
	if where == "" && e.Op >= 0 {
		where = indexPath("operations", e.Op)
	}
	if where == "" {
		return fmt.Sprintf("refused (%s): %s", e.Rule, e.Reason)
	}
	return fmt.Sprintf("%s: refused (%s): %s", where, e.Rule, e.Reason)
}

// All returns e and the refusals in e.Also, in order, each without Also.
func (e *RefusalError) All() []*RefusalError {
	first := *e
	first.Also = nil
	return append([]*RefusalError{&first}, e.Also...)
}

// refusals gathers the violations of one proposal.
type refusals struct{ list []*RefusalError }

// add records err when it is a refusal (with its own Also flattened) and
// returns any other error.
func (rs *refusals) add(err error) error {
	if err == nil {
		return nil
	}
	r, ok := AsRefusal(err)
	if !ok {
		return err
	}
	for _, x := range r.All() {
		if !slices.ContainsFunc(rs.list, func(y *RefusalError) bool {
			return x.Op == y.Op && x.Field == y.Field && x.Rule == y.Rule && x.Reason == y.Reason
		}) {
			rs.list = append(rs.list, x)
		}
	}
	return nil
}

// err returns the gathered refusals as one *RefusalError, nil for none.
func (rs *refusals) err() error {
	if len(rs.list) == 0 {
		return nil
	}
	first := *rs.list[0]
	first.Also = rs.list[1:]
	return &first
}

// AsRefusal returns err as a *RefusalError, if it is one.
func AsRefusal(err error) (*RefusalError, bool) {
	var r *RefusalError
	ok := errors.As(err, &r)
	return r, ok
}

// refuser checks one operation. A check that cannot go on (no such
// target) returns its refusal; checks of independent parts (each
// endpoint, each rule) record theirs in found and go on, so that one
// answer names them all.
type refuser struct {
	op    int
	found *refusals
}

func (r refuser) at(field, rule, format string, args ...any) *RefusalError {
	return &RefusalError{Op: r.op, Field: field, Rule: rule, Reason: fmt.Sprintf(format, args...)}
}

// keep records err (a refusal of one independent part) and returns any
// error that is not a refusal.
func (r refuser) keep(err error) error {
	return r.found.add(err)
}

// Apply applies p's operations to base, checking each against the
// narrowness allow-list of DESIGN.md ("Proposal files"). Refusals are
// returned as one *RefusalError naming the operation, the field and the
// rule of the first, and every other in its Also. The result is in
// canonical form and validates. Apply does not prove; see Evaluate for
// the "changes nothing" check.
func Apply(base *policy.Policy, p *Proposal) (*policy.Policy, error) {
	_, result, err := applySteps(base, p)
	return result, err
}

// applySteps applies the operations one by one and returns the policy
// after each (steps[i] is the policy after operations[i]).
func applySteps(base *policy.Policy, p *Proposal) ([]*policy.Policy, *policy.Policy, error) {
	if p == nil {
		return nil, nil, &RefusalError{Op: -1, Rule: RuleInvalidPolicy, Reason: "no proposal"}
	}
	if len(p.Operations) == 0 {
		return nil, nil, &RefusalError{Op: -1, Field: "operations", Rule: RuleInvalidPolicy, Reason: "no operations"}
	}
	cur := base.Canonical()
	if cur == nil {
		cur = &policy.Policy{Version: 1}
	}
	steps := make([]*policy.Policy, 0, len(p.Operations))
	var found refusals
	for i, op := range p.Operations {
		next := cur.Clone()
		if next.NetworkPolicies == nil {
			next.NetworkPolicies = map[string]*policy.NetworkPolicy{}
		}
		before := len(found.list)
		r := refuser{op: i, found: &found}
		fp := keyPath(indexPath("operations", i), op.Kind())
		var err error
		switch {
		case op.AddRule != nil:
			err = r.addRule(next, fp, op.AddRule)
		case op.AddAllowRules != nil:
			err = r.addAllowRules(next, fp, op.AddAllowRules)
		case op.AddBinary != nil:
			err = r.addBinary(next, fp, op.AddBinary)
		case op.AddDenyRules != nil:
			err = r.addDenyRules(next, fp, op.AddDenyRules)
		case op.Repin != nil:
			err = r.repin(next, fp, op.Repin)
		default:
			err = r.at(indexPath("operations", i), RuleInvalidPolicy, "must hold exactly one of add_rule, add_allow_rules, add_binary, add_deny_rules, repin")
		}
		stopped := err != nil
		if err := found.add(err); err != nil {
			return nil, nil, err
		}
		switch {
		case len(found.list) > before && !stopped:
			// Refused in parts but applied: later operations may
			// name what it added (an add_rule's entry), so they are
			// checked against it. The result is never returned.
			cur = next.Canonical()
			continue
		case len(found.list) > 0:
			// This operation or an earlier one is refused: the
			// resulting policy is not returned, and its validity
			// would only repeat the refusals.
			continue
		}
		next = next.Canonical()
		if _, verr := policy.Validate(next); verr != nil {
			return nil, nil, r.invalid(fp, verr)
		}
		steps = append(steps, next)
		cur = next
	}
	if err := found.err(); err != nil {
		return nil, nil, err
	}
	// The result must survive its own encoding: what is stored is what
	// was checked.
	again, _, err := policy.Parse(cur.CanonicalJSON())
	if err != nil || again.Hash() != cur.Hash() {
		return nil, nil, &RefusalError{Op: -1, Rule: RuleInvalidPolicy, Reason: fmt.Sprintf("the resulting policy does not round-trip: %v", err)}
	}
	return steps, cur, nil
}

// invalid turns a validation failure of the resulting policy into a
// refusal of the operation that caused it.
func (r refuser) invalid(field string, err error) error {
	var ve *policy.ValidationError
	if errors.As(err, &ve) && len(ve.Problems) > 0 {
		pr := ve.Problems[0]
		rule := RuleInvalidPolicy
		if pr.Code == policy.CodeCloudMetadata {
			rule = RuleCloudMetadata
		}
		return r.at(field, rule, "the resulting policy is invalid: %s", err)
	}
	return r.at(field, RuleInvalidPolicy, "the resulting policy is invalid: %v", err)
}

// validName reports whether name is 1-MaxNameLen letters, digits, '_',
// '-' or '.': the alphabet of MCP tool names, which policy.ValidToolName
// already checks (its own bound, 128, is looser than MaxNameLen).
func validName(name string) bool {
	return name != "" && len(name) <= MaxNameLen && policy.ValidToolName(name)
}

func (r refuser) addRule(pol *policy.Policy, fp string, op *AddRule) error {
	if !validName(op.Name) {
		return r.at(keyPath(fp, "name"), RuleInvalidPolicy, "must be 1-%d letters, digits, '_', '-' or '.'", MaxNameLen)
	}
	if _, exists := pol.NetworkPolicies[op.Name]; exists {
		return r.at(keyPath(fp, "name"), RuleEntryExists, "network_policies.%s already exists: extend it with add_allow_rules or add_binary", op.Name)
	}
	entry := op.Rule
	rp := keyPath(fp, "rule")
	if entry == nil {
		return r.at(rp, RuleInvalidPolicy, "is required")
	}
	if entry.Name != "" && entry.Name != op.Name {
		return r.at(keyPath(rp, "name"), RuleInvalidPolicy, "must be omitted or equal to %q", op.Name)
	}
	bp := keyPath(rp, "binaries")
	var bins []policy.Binary
	if len(entry.Binaries) != 1 {
		r.keep(r.at(bp, RuleBinary, "a new entry names exactly one binary (an empty list means any binary), not %d", len(entry.Binaries)))
	} else {
		r.keep(r.binaryPath(keyPath(indexPath(bp, 0), "path"), entry.Binaries[0].Path))
		bins = []policy.Binary{{Path: entry.Binaries[0].Path}}
	}
	ep := keyPath(rp, "endpoints")
	switch {
	case len(entry.Endpoints) == 0:
		r.keep(r.at(ep, RuleInvalidPolicy, "a new entry needs at least one endpoint"))
	case len(entry.Endpoints) > MaxEndpointsPerEntry:
		r.keep(r.at(ep, RuleInvalidPolicy, "has %d endpoints; the limit is %d", len(entry.Endpoints), MaxEndpointsPerEntry))
	default:
		for i, e := range entry.Endpoints {
			before := len(r.found.list)
			if err := r.keep(r.newEndpoint(indexPath(ep, i), e)); err != nil {
				return err
			}
			if len(r.found.list) > before {
				continue // the guard check would only repeat what is refused
			}
			if err := r.keep(r.guardsKept(pol, indexPath(ep, i), e)); err != nil {
				return err
			}
		}
	}
	// Added even when refused in parts, so that later operations naming
	// the entry are checked too; a refused proposal's result is dropped.
	c := policy.NetworkPolicy{Name: op.Name, Endpoints: entry.Endpoints, Binaries: bins}
	pol.NetworkPolicies[op.Name] = clonePolicyEntry(&c)
	return nil
}

// guardsKept refuses a new entry's MCP endpoint whose tools/call rules
// would drop the arguments_schema guard of an existing endpoint on the
// same destination: the same host (or an existing wildcard covering it),
// a shared port and the same path scope (or one of the two scopes
// covering the other, or either without one). A rule there without a
// schema for a guarded tool admits any arguments — and, in an entry that
// sorts first, passes the guard rule's rate_limit and pin by too — just
// as add_allow_rules on the existing endpoint would, which
// checkSchemaRule refuses; so is this.
func (r refuser) guardsKept(pol *policy.Policy, fp string, e *policy.Endpoint) error {
	if e == nil || e.Protocol != policy.ProtocolMCP {
		return nil
	}
	keys := make([]string, 0, len(pol.NetworkPolicies))
	for k := range pol.NetworkPolicies {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	host := canonicalHost(e.Host)
	ports := policy.EndpointPorts(e)
	for _, k := range keys {
		entry := pol.NetworkPolicies[k]
		if entry == nil {
			continue
		}
		for _, x := range entry.Endpoints {
			if x == nil || x.Protocol != policy.ProtocolMCP {
				continue
			}
			if canonicalHost(x.Host) != host && !policy.MatchHost(x.Host, host) {
				continue
			}
			if !slices.ContainsFunc(policy.EndpointPorts(x), func(p int) bool { return slices.Contains(ports, p) }) {
				continue
			}
			if x.Path != "" && e.Path != "" && x.Path != e.Path && !policy.MatchGlob(x.Path, e.Path) && !policy.MatchGlob(e.Path, x.Path) {
				continue
			}
			for i, rule := range e.Rules {
				rp := indexPath(keyPath(fp, "rules"), i)
				if err := r.checkSchemaRuleAt(rp, x, "network_policies."+k+" "+policy.EndpointLabel(x)+" ", rule.Allow); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// clonePolicyEntry deep-copies an entry so the result shares nothing with
// the proposal.
func clonePolicyEntry(e *policy.NetworkPolicy) *policy.NetworkPolicy {
	tmp := (&policy.Policy{Version: 1, NetworkPolicies: map[string]*policy.NetworkPolicy{"x": e}}).Clone()
	return tmp.NetworkPolicies["x"]
}

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
		if f.set {
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
			if s == "" || hasUnescapedMeta(s) {
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
		if hasUnescapedMeta(s) {
			globbed++
		}
	}
	if globbed > 1 {
		return r.at(fp, RulePath, "%q: globs must stay within one path segment", p)
	}
	return nil
}

// hasUnescapedMeta reports a glob character that is not escaped by `\`.
func hasUnescapedMeta(s string) bool {
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '*', '?', '[':
			return true
		}
	}
	return false
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
			if g == "" || hasUnescapedMeta(g) {
				return r.at(p, n.rule, "%q: name a %s exactly (escape *, ?, [ and \\ with \\)", g, n.what)
			}
			if n.field == "resource" {
				if err := policy.PlainResourceURI(unescapeGlob(g)); err != nil {
					return r.at(p, n.rule, "%q is not a plain URI, so no resource rule can allow it: %v", g, err)
				}
			}
		}
	}
	return nil
}

// unescapeGlob is the string an exact (escaped) glob matches.
func unescapeGlob(g string) string {
	var b strings.Builder
	for i := 0; i < len(g); i++ {
		if g[i] == '\\' && i+1 < len(g) {
			i++
		}
		b.WriteByte(g[i])
	}
	return b.String()
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

// target finds the endpoint an operation names in an existing entry: host
// (any case, trailing dot), port, and path scope — required when several
// endpoints of the entry share the host and port.
func (r refuser) target(pol *policy.Policy, fp, key, host string, port int, scope string) (*policy.Endpoint, error) {
	entry := pol.NetworkPolicies[key]
	if entry == nil {
		return nil, r.at(keyPath(fp, "policy"), RuleUnknownTarget, "network_policies has no entry %q", key)
	}
	want := canonicalHost(host)
	var matches []*policy.Endpoint
	for _, e := range entry.Endpoints {
		if e != nil && canonicalHost(e.Host) == want && slices.Contains(policy.EndpointPorts(e), port) {
			matches = append(matches, e)
		}
	}
	if len(matches) == 0 {
		return nil, r.at(keyPath(fp, "host"), RuleUnknownTarget, "network_policies.%s has no endpoint %s:%d", key, host, port)
	}
	if scope != "" {
		for _, e := range matches {
			if e.Path == scope {
				return e, nil
			}
		}
		return nil, r.at(keyPath(fp, "path"), RuleUnknownTarget, "network_policies.%s has no endpoint %s:%d with path %q", key, host, port, scope)
	}
	if len(matches) > 1 {
		return nil, r.at(keyPath(fp, "path"), RuleAmbiguousTarget, "network_policies.%s splits %s:%d by path: name the endpoint's path", key, host, port)
	}
	return matches[0], nil
}

func canonicalHost(h string) string {
	h = policy.NormalizeHost(h)
	h = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
	if a, ok := policy.ParseHostIP(h); ok {
		return a.String()
	}
	return h
}

func (r refuser) addAllowRules(pol *policy.Policy, fp string, op *AddAllowRules) error {
	ep, err := r.target(pol, fp, op.Policy, op.Host, op.Port, op.Path)
	if err != nil {
		return err
	}
	switch {
	case ep.Protocol != policy.ProtocolREST && ep.Protocol != policy.ProtocolMCP:
		return r.at(keyPath(fp, "host"), RuleProtocol, "the endpoint's protocol is %q: a proposal may add rules to rest and mcp endpoints only", ep.Protocol)
	case ep.Access != "":
		return r.at(keyPath(fp, "rules"), RuleForbiddenField, "the endpoint uses access: %s, which excludes rules; an operator must change it", ep.Access)
	}
	for i, rule := range op.Rules {
		rp := indexPath(keyPath(fp, "rules"), i)
		before := len(r.found.list)
		if err := r.keep(r.allowRule(rp, ep.Protocol, rule)); err != nil {
			return err
		}
		if len(r.found.list) > before {
			continue // the schema check would only repeat what is refused
		}
		if err := r.keep(r.checkSchemaRule(rp, ep, rule.Allow)); err != nil {
			return err
		}
	}
	added := clonePolicyEntry(&policy.NetworkPolicy{Endpoints: []*policy.Endpoint{{Rules: op.Rules}}}).Endpoints[0].Rules
	ep.Rules = append(ep.Rules, added...)
	return nil
}

func (r refuser) addDenyRules(pol *policy.Policy, fp string, op *AddDenyRules) error {
	ep, err := r.target(pol, fp, op.Policy, op.Host, op.Port, op.Path)
	if err != nil {
		return err
	}
	for i, rule := range op.Rules {
		if rule == nil {
			r.keep(r.at(indexPath(keyPath(fp, "rules"), i), RuleInvalidPolicy, "must be a rule mapping"))
		} else if rule.ExpiresAt != nil {
			r.keep(r.at(keyPath(indexPath(keyPath(fp, "rules"), i), "expires_at"), RuleForbiddenField, "deny rules do not expire"))
		}
	}
	added := clonePolicyEntry(&policy.NetworkPolicy{Endpoints: []*policy.Endpoint{{DenyRules: op.Rules}}}).Endpoints[0].DenyRules
	ep.DenyRules = append(ep.DenyRules, added...)
	return nil
}

func (r refuser) addBinary(pol *policy.Policy, fp string, op *AddBinary) error {
	entry := pol.NetworkPolicies[op.Policy]
	if entry == nil {
		return r.at(keyPath(fp, "policy"), RuleUnknownTarget, "network_policies has no entry %q", op.Policy)
	}
	if err := r.binaryPath(keyPath(fp, "path"), op.Path); err != nil {
		return err
	}
	if len(entry.Binaries) == 0 {
		return r.at(keyPath(fp, "policy"), RuleBinary, "network_policies.%s already allows any binary; naming one would narrow it, which only an operator may do", op.Policy)
	}
	for _, b := range entry.Binaries {
		if b.Path == op.Path {
			return r.at(keyPath(fp, "path"), RuleChangesNothing, "%s is already listed in network_policies.%s", op.Path, op.Policy)
		}
	}
	want := map[string]bool{}
	for _, e := range entry.Endpoints {
		if e != nil {
			want[normalizeLabel(policy.EndpointLabel(e))] = true
		}
	}
	got := map[string]bool{}
	mismatch := false
	for i, s := range op.Endpoints {
		l := normalizeLabel(s)
		if !want[l] {
			r.keep(r.at(indexPath(keyPath(fp, "endpoints"), i), RuleEndpointsMismatch, "network_policies.%s grants no endpoint %q; it grants %s", op.Policy, s, labels(entry)))
			mismatch = true
			continue
		}
		got[l] = true
	}
	if !mismatch && len(got) != len(want) {
		return r.at(keyPath(fp, "endpoints"), RuleEndpointsMismatch, "must list every endpoint network_policies.%s grants: %s", op.Policy, labels(entry))
	}
	entry.Binaries = append(entry.Binaries, policy.Binary{Path: op.Path})
	return nil
}

func labels(entry *policy.NetworkPolicy) string {
	var out []string
	for _, e := range entry.Endpoints {
		if e != nil {
			out = append(out, strconv.Quote(policy.EndpointLabel(e)))
		}
	}
	slices.Sort(out)
	return strings.Join(out, ", ")
}

// normalizeLabel folds the host part of "host:ports/path" (case, trailing
// dot, IP spelling) and sorts the ports.
func normalizeLabel(s string) string {
	hostPorts, scope := s, ""
	if i := strings.Index(s, "/"); i >= 0 {
		hostPorts, scope = s[:i], s[i:]
	}
	i := strings.LastIndex(hostPorts, ":")
	if i < 0 {
		return s
	}
	host, ports := hostPorts[:i], strings.Split(hostPorts[i+1:], ",")
	slices.Sort(ports)
	return canonicalHost(host) + ":" + strings.Join(ports, ",") + scope
}
