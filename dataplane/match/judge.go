package match

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/portcullis-dev/portcullis/policy"
)

// ---------------------------------------------------------------------------
// 3. Candidates.

// outcome mirrors policy's outcome, with the reason left to format until
// the outcome decides (explain).
type outcome struct {
	e              *endpoint
	allow          bool
	rule           string
	hard           bool
	versionRefused bool
	// definitionRefused mirrors policy's: the rule named pins a definition
	// the tool's does not match.
	definitionRefused bool

	why    whyKind
	reason string // the reason, for the kinds that carry it ready-made
	r      *rule  // the allowing rule, for whyRule
	extra  string // whyRESTNone: nothing; whyMCPNone: the schema failure note
	// review mirrors policy's: above 0, the allow needs a person's review.
	review time.Duration
}

type whyKind uint8

const (
	whyText     whyKind = iota // reason holds the text
	whyL4                      // allowed without L7 inspection
	whyAccess                  // allowed by the REST access preset
	whyRule                    // allowed by a REST rule
	whyRESTNone                // no REST rule matches
	whyMCPRule                 // allowed by an MCP rule
	whyMCPNone                 // no MCP rule matches
)

func (o *outcome) decision(r *policy.Request, paths *canonicalPaths, prefix string) policy.Decision {
	return policy.Decision{Allow: o.allow, Entry: o.e.key, Endpoint: o.e.index, Rule: o.rule, Reason: prefix + o.explain(r, paths), Review: o.review}
}

// explain formats the outcome's reason as policy.Decide words it.
func (o *outcome) explain(r *policy.Request, paths *canonicalPaths) string {
	e := o.e
	switch o.why {
	case whyL4:
		return e.allowedL4
	case whyAccess:
		return e.allowedAccess
	case whyRule:
		return o.r.allowed
	case whyRESTNone:
		p, _ := paths.get(r.Path, e.encodedOK)
		return fmt.Sprintf("%s %s is not allowed by %s: no rule matches", strings.ToUpper(r.HTTPMethod), p, e.name)
	case whyMCPRule:
		return o.r.allowed
	case whyMCPNone:
		return fmt.Sprintf("%s is not allowed by %s: no rule matches%s", describeMCP(r.MCP), e.name, o.extra)
	}
	return o.reason
}

// judge mirrors policy's judgeCandidate: address rules, then the protocol.
func (e *endpoint) judge(r *policy.Request, h *hostView, paths *canonicalPaths, now time.Time) outcome {
	if why, ok := e.addressAllowed(r, h); !ok {
		return outcome{e: e, hard: true, reason: why}
	}
	switch e.protocol {
	case policy.ProtocolL4, policy.ProtocolTCP:
		return outcome{e: e, allow: true, rule: "endpoint", why: whyL4}
	case policy.ProtocolREST:
		return e.judgeREST(r, paths, now)
	case policy.ProtocolMCP:
		return e.judgeMCP(r, paths, now)
	default:
		return outcome{e: e, hard: true,
			reason: fmt.Sprintf("protocol %s is not inspected yet, so %s denies every request", e.protocol, e.name)}
	}
}

// addressAllowed mirrors policy's addressAllowed (allowed_ips, private
// addresses).
func (e *endpoint) addressAllowed(r *policy.Request, h *hostView) (string, bool) {
	addr, ok := destinationAddr(r, h)
	if !ok {
		return "", true
	}
	if len(e.ep.AllowedIPs) > 0 {
		if inPrefixes(e.allowedIPs, addr) {
			return "", true
		}
		return fmt.Sprintf("%s (%s) is outside the allowed_ips of %s", r.Host, addr, e.label), false
	}
	var private bool
	if h.checked && addr == h.literal {
		private = h.literalPrivate // precomputed (hostView)
	} else {
		private = policy.IsPrivate(addr)
	}
	if private {
		return fmt.Sprintf("%s resolves to the private address %s, which needs allowed_ips on %s", r.Host, addr, e.label), false
	}
	return "", true
}

func (e *endpoint) requireL7() outcome {
	return outcome{e: e, hard: true,
		reason: fmt.Sprintf("%s inspects %s requests, and this request was not inspected", e.name, e.protocol)}
}

// ---- REST

// judgeREST mirrors policy's judgeREST: the access preset, then the first
// unexpired allow rule that matches.
func (e *endpoint) judgeREST(r *policy.Request, paths *canonicalPaths, now time.Time) outcome {
	if r.HTTPMethod == "" {
		return e.requireL7()
	}
	p, err := paths.get(r.Path, e.encodedOK)
	if err != nil {
		return outcome{e: e, hard: true, reason: fmt.Sprintf("malformed request path: %v", err)}
	}
	method := strings.ToUpper(r.HTTPMethod)
	switch {
	case e.access == policy.AccessFull:
		return outcome{e: e, allow: true, rule: "access: full", why: whyAccess}
	case e.accessAllow[method]:
		return outcome{e: e, allow: true, rule: e.accessRule, why: whyAccess}
	}
	i := e.restIndex.first(e.allowRules, r, p, now, false)
	if i >= 0 && e.allowRules[i].review > 0 {
		// The first rule needs review: a later one may allow without.
		if j := e.restIndex.first(e.allowRules, r, p, now, true); j >= 0 {
			i = j
		}
	}
	if i >= 0 {
		ar := &e.allowRules[i]
		return outcome{e: e, allow: true, rule: ar.label, why: whyRule, r: ar, review: ar.review}
	}
	return outcome{e: e, why: whyRESTNone}
}

// matchesREST mirrors policy's restRuleMatches: method, path glob (narrow
// for allow rules, policy.MatchDenyPath for deny rules) and query matchers.
func (c *rule) matchesREST(r *policy.Request, p string, allow bool) bool {
	if !c.methodMatches(r.HTTPMethod) {
		return false
	}
	if c.path != nil {
		if allow && !c.path.match(p) || !allow && !c.path.matchDenyPath(p) {
			return false
		}
	}
	return !c.hasQuery || c.queryMatches(r.Query, allow)
}

// methodMatches mirrors policy's methodMatches: a rule on GET also
// matches HEAD.
func (c *rule) methodMatches(method string) bool {
	switch {
	case c.anyMethod || strings.EqualFold(c.method, method):
		return true
	case strings.EqualFold(c.method, "GET") && strings.EqualFold(method, "HEAD"):
		return true
	}
	return false
}

// queryGlob is a compiled query-value glob (policy's matchesValue): each
// `{a,b}` alternative as characters, `*` crossing `/`; ok is false when it
// does not parse.
type queryGlob struct {
	alts [][]token
	ok   bool
}

func compileQueryGlob(pattern string) queryGlob {
	alts, ok := policy.ExpandQueryGlob(pattern)
	if !ok {
		return queryGlob{}
	}
	q := queryGlob{ok: true}
	for _, a := range alts {
		toks, ok := compileChars(a)
		if !ok {
			return queryGlob{}
		}
		q.alts = append(q.alts, toks)
	}
	return q
}

// matches reports whether v matches; a glob that does not parse fails
// closed: no value in an allow rule, every value in a deny rule.
func (q *queryGlob) matches(v string, allow bool) bool {
	if !q.ok {
		return !allow
	}
	for _, toks := range q.alts {
		if matchTokens(toks, v) {
			return true
		}
	}
	return false
}

// queryMatches mirrors policy's queryMatches.
func (c *rule) queryMatches(raw string, allow bool) bool {
	values, err := url.ParseQuery(raw)
	if err != nil {
		return !allow
	}
	for name, globs := range c.query {
		vs := values[name]
		if len(vs) == 0 {
			return false
		}
		matched := 0
		for _, v := range vs {
			for i := range globs {
				if globs[i].matches(v, allow) {
					matched++
					break
				}
			}
		}
		if allow && matched != len(vs) || !allow && matched == 0 {
			return false
		}
	}
	return true
}

func (c *rule) expired(now time.Time) bool {
	return c.expiresAt != nil && !now.Before(*c.expiresAt)
}

// pathIndex narrows the allow rules of a REST endpoint by the literal
// leading segments of their path globs: a rule whose glob starts with the
// literal segments "", "v1", "items" can only match a path whose first
// segments are those, since policy.MatchGlob aligns the segments before a
// `**` one to one. Walking a request path visits every node whose rules
// may match; each node's rules are in rule order.
type pathIndex struct {
	rules []int32
	next  map[string]*pathIndex
}

func buildPathIndex(rules []rule) *pathIndex {
	root := &pathIndex{}
	for i := range rules {
		c := &rules[i]
		if c.nilAllow {
			continue
		}
		node := root
		if c.path != nil && c.path.valid {
			for _, s := range c.path.segs {
				if !s.literal {
					break
				}
				if node.next == nil {
					node.next = map[string]*pathIndex{}
				}
				child := node.next[s.lit]
				if child == nil {
					child = &pathIndex{}
					node.next[s.lit] = child
				}
				node = child
			}
		}
		node.rules = append(node.rules, int32(i))
	}
	return root
}

// first returns the index of the first unexpired allow rule matching r on
// canonical path p (policy's judgeREST loop), or -1; with unreviewed, the
// first such rule that needs no review.
func (x *pathIndex) first(rules []rule, r *policy.Request, p string, now time.Time, unreviewed bool) int {
	best := -1
	node, rest := x, p
	for node != nil {
		for _, n := range node.rules {
			if best >= 0 && int(n) >= best {
				break
			}
			c := &rules[n]
			if unreviewed && c.review > 0 {
				continue
			}
			if !c.expired(now) && c.matchesREST(r, p, true) {
				best = int(n)
				break
			}
		}
		if node.next == nil || rest == "\x00" {
			break
		}
		seg := rest
		if i := strings.IndexByte(rest, '/'); i >= 0 {
			seg, rest = rest[:i], rest[i+1:]
		} else {
			rest = "\x00" // no segment left (a path never holds NUL)
		}
		node = node.next[seg]
	}
	return best
}

// ---- MCP

// judgeMCP mirrors policy's judgeMCP.
func (e *endpoint) judgeMCP(r *policy.Request, paths *canonicalPaths, now time.Time) outcome {
	method := strings.ToUpper(r.HTTPMethod)
	if r.MCP == nil && method != "" && e.mcp != nil {
		p, err := paths.get(r.Path, e.encodedOK)
		if rule, ok := e.mcp.OAuthPath(method, p); ok && err == nil {
			return outcome{e: e, allow: true, rule: rule, reason: "an OAuth path " + rule + " declares on " + e.name}
		}
	}
	switch {
	case method == "":
		return e.requireL7()
	case (method == "GET" || method == "DELETE") && r.MCP == nil:
		return outcome{e: e, allow: true, rule: "endpoint",
			reason: fmt.Sprintf("MCP %s is allowed once the endpoint matches (%s)", method, e.name)}
	case method != "POST":
		return outcome{e: e, reason: fmt.Sprintf("HTTP %s is not allowed on MCP endpoint %s", method, e.name)}
	case r.MCP == nil:
		return outcome{e: e, hard: true, reason: fmt.Sprintf("POST to MCP endpoint %s carries no MCP message", e.name)}
	case r.MCP.Response:
		return outcome{e: e, allow: true, rule: "endpoint",
			reason: fmt.Sprintf("client JSON-RPC response passes on %s", e.name)}
	}
	if why, bad := policy.MalformedMCP(r.MCP, e.strictNames); bad {
		return outcome{e: e, hard: true, reason: why}
	}
	o := e.judgeMCPRules(r.MCP, now)
	if !e.versionListed(r.MCP.ProtocolVersion) {
		o.why, o.reason = whyText, fmt.Sprintf("MCP protocol version %q is not listed in mcp.versions of %s", r.MCP.ProtocolVersion, e.name)
		o.versionRefused, o.allow, o.hard, o.rule, o.review = o.allow, false, true, "mcp.versions", 0
	}
	return o
}

func (e *endpoint) versionListed(version string) bool {
	if version == "" {
		version = policy.DefaultMCPVersion
	}
	return slices.Contains(e.versions, version)
}

// judgeMCPRules mirrors policy's judgeMCPRules. tools/call messages try
// only the rules naming their tool literally and the rules toolIndex could
// not file (globs, no tool), in rule order.
func (e *endpoint) judgeMCPRules(m *policy.MCPMessage, now time.Time) outcome {
	if len(e.allowRules) == 0 && e.allowAll {
		if policy.IsKnownMCPMethod(m.Method) {
			return outcome{e: e, allow: true, rule: "allow_all_known_mcp_methods",
				reason: "allowed by allow_all_known_mcp_methods on " + e.name}
		}
		return outcome{e: e, reason: fmt.Sprintf("%s is not a known MCP method, so allow_all_known_mcp_methods on %s does not allow it", describeMCP(m), e.name)}
	}
	var named []int32
	if m.Method == "tools/call" {
		named = e.toolIndex[m.Tool]
	}
	var failure, failed string // as in policy: the first refusing rule is named
	pinned := false
	var held *rule // the first allowing rule that needs review
	for a, b := 0, 0; a < len(named) || b < len(e.toolOther); {
		// Merge the two ascending lists.
		var n int32
		if b >= len(e.toolOther) || a < len(named) && named[a] < e.toolOther[b] {
			n, a = named[a], a+1
		} else {
			n, b = e.toolOther[b], b+1
		}
		c := &e.allowRules[n]
		if c.expired(now) || !e.mcpRuleMatches(c, m, false) {
			continue
		}
		if why := policy.DefinitionMismatch(c.src, m); why != "" {
			if failed == "" {
				failed, pinned = c.label, true
				failure = "; " + c.label + " names it but " + why
			}
			continue
		}
		if err := c.argumentsValid(m); err != nil {
			if failed == "" {
				failed = c.label
				failure = fmt.Sprintf("; %s names it but its arguments_schema refuses the arguments: %v", c.label, err)
			}
			continue
		}
		if c.review == 0 {
			return outcome{e: e, allow: true, rule: c.label, why: whyMCPRule, r: c}
		}
		if held == nil {
			held = c // allows only if no later rule allows without review
		}
	}
	if held != nil {
		return outcome{e: e, allow: true, rule: held.label, why: whyMCPRule, r: held, review: held.review}
	}
	return outcome{e: e, why: whyMCPNone, extra: failure, rule: failed, definitionRefused: pinned}
}

// buildToolIndex files each allow rule whose tool matcher lists only
// literal names (compared exactly, so a glob without metacharacters under
// strict names, or any name otherwise) under those names. A rule with a
// tool matcher matches only tools/call; the others stay in the other list.
func buildToolIndex(rules []rule, strict bool) (map[string][]int32, []int32) {
	index := map[string][]int32{}
	var other []int32
	for i := range rules {
		c := &rules[i]
		if c.nilAllow {
			continue
		}
		literal := c.hasTool && len(c.tool) > 0
		for j := range c.toolG {
			if strict && !c.toolG[j].isLiteral() {
				literal = false
			}
		}
		if !literal {
			other = append(other, int32(i))
			continue
		}
		for _, name := range c.tool {
			if l := index[name]; len(l) == 0 || l[len(l)-1] != int32(i) {
				index[name] = append(l, int32(i))
			}
		}
	}
	return index, other
}

// mcpRuleMatches mirrors policy's mcpRuleMatches.
func (e *endpoint) mcpRuleMatches(c *rule, m *policy.MCPMessage, deny bool) bool {
	switch {
	case c.methodG != nil:
		if !deny && !c.methodG.match(m.Method) || deny && !c.methodG.matchDeny(m.Method) {
			return false
		}
	case !deny:
		if !e.allowAll || !policy.IsKnownMCPMethod(m.Method) {
			return false
		}
	}
	if c.hasTool && !e.toolMatches(c, m) {
		return false
	}
	if c.prompt != nil && !promptMatches(c, m, deny) {
		return false
	}
	if c.resource != nil && !resourceMatches(c, m, deny) {
		return false
	}
	return true
}

func (e *endpoint) toolMatches(c *rule, m *policy.MCPMessage) bool {
	if m.Method != "tools/call" {
		return false
	}
	for i, g := range c.tool {
		if e.strictNames && c.toolG[i].match(m.Tool) || !e.strictNames && g == m.Tool {
			return true
		}
	}
	return false
}

// promptMatches mirrors policy's promptMatches: narrow globs in allow
// rules, wide in deny rules.
func promptMatches(c *rule, m *policy.MCPMessage, deny bool) bool {
	if m.Method != "prompts/get" {
		return false
	}
	for i := range c.prompt {
		if !deny && c.prompt[i].match(m.Prompt) || deny && c.prompt[i].matchDeny(m.Prompt) {
			return true
		}
	}
	return false
}

// resourceMatches mirrors policy's resourceMatches: policy.MatchResource
// in allow rules, policy.MatchDenyResource in deny rules (a URI that is
// not plain matches every deny glob; a plain one the case-folded wide
// reading, which compilePathGlob compiled as the glob's one fold
// alternative — the validator refuses braces in resource globs).
func resourceMatches(c *rule, m *policy.MCPMessage, deny bool) bool {
	if !policy.IsResourceMethod(m.Method) {
		return false
	}
	plain := policy.PlainResourceURI(m.Resource) == nil
	if deny && !plain {
		return true
	}
	if !plain {
		return false
	}
	for i := range c.resource {
		if !deny && c.resource[i].match(m.Resource) || deny && c.resource[i].matchDenyAlts(m.Resource) {
			return true
		}
	}
	return false
}

// argumentsValid mirrors policy's argumentsValid, with the schema compiled
// once.
func (c *rule) argumentsValid(m *policy.MCPMessage) error {
	if c.src.ArgumentsSchema == nil || m.AnyArguments {
		return nil
	}
	if c.schemaErr != nil {
		return fmt.Errorf("arguments_schema does not compile: %w", c.schemaErr)
	}
	args := m.Arguments
	if len(bytes.TrimSpace(args)) == 0 {
		args = json.RawMessage("{}")
	}
	if c.fast != nil && c.fast.valid(args) {
		return nil // what the library admits too (fastschema.go)
	}
	inst, err := decodeArguments(args)
	if err != nil {
		return fmt.Errorf("arguments are not JSON: %w", err)
	}
	return policy.ValidateArguments(c.schema, inst)
}

func describeMCP(m *policy.MCPMessage) string { return policy.DescribeMCP(m) }

// ruleTool mirrors policy's ruleTool: tool, or its params.name spelling.
func ruleTool(r *policy.L7Rule) *policy.Matcher {
	if r.Tool != nil {
		return r.Tool
	}
	if r.Params != nil {
		return r.Params["name"]
	}
	return nil
}
