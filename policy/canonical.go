package policy

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"net/netip"
	"path"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// The canonical form is the one stored, hashed and pushed: two documents
// that mean the same have the same canonical form. It fills defaults
// (network policy and middleware names from their keys, enforce on L7
// endpoints, best_effort Landlock, the mcp/json_rpc/graphql body limits and
// MCP options, a rate_limit's burst, a review's timeout), drops a review
// that is not required, normalises ports (one port → port, several → sorted ports),
// hosts (lower case, no trailing dot), filesystem paths (cleaned), REST
// methods (upper case), tool matchers (params.name folded into tool), and
// sorts and de-duplicates every list whose order means nothing. An
// endpoint's rules and deny_rules are not such lists: they keep the
// document's order, so that rules[i] names the same rule in the user's
// file, the stored version and every message about it. Validation
// comes first: the canonical form of an invalid policy is unspecified, but
// computing it never panics.

// Clone returns a deep copy of p.
func (p *Policy) Clone() *Policy {
	if p == nil {
		return nil
	}
	out := new(Policy)
	deepCopy(reflect.ValueOf(out).Elem(), reflect.ValueOf(p).Elem())
	return out
}

// deepCopy copies src into the settable dst of the same type, sharing no
// memory.
func deepCopy(dst, src reflect.Value) {
	switch src.Kind() {
	case reflect.Pointer:
		if src.IsNil() {
			return
		}
		e := reflect.New(src.Type().Elem())
		deepCopy(e.Elem(), src.Elem())
		dst.Set(e)
	case reflect.Interface:
		if src.IsNil() {
			return
		}
		e := reflect.New(src.Elem().Type()).Elem()
		deepCopy(e, src.Elem())
		dst.Set(e)
	case reflect.Slice:
		if src.IsNil() {
			return
		}
		s := reflect.MakeSlice(src.Type(), src.Len(), src.Len())
		for i := 0; i < src.Len(); i++ {
			deepCopy(s.Index(i), src.Index(i))
		}
		dst.Set(s)
	case reflect.Map:
		if src.IsNil() {
			return
		}
		m := reflect.MakeMapWithSize(src.Type(), src.Len())
		iter := src.MapRange()
		for iter.Next() {
			e := reflect.New(src.Type().Elem()).Elem()
			deepCopy(e, iter.Value())
			m.SetMapIndex(iter.Key(), e)
		}
		dst.Set(m)
	case reflect.Struct:
		t := src.Type()
		for i := 0; i < t.NumField(); i++ {
			if !t.Field(i).IsExported() {
				// time.Time and friends: values without shared state.
				dst.Set(src)
				return
			}
		}
		for i := 0; i < t.NumField(); i++ {
			deepCopy(dst.Field(i), src.Field(i))
		}
	default:
		dst.Set(src)
	}
}

// Canonical returns a deep copy of p in canonical form.
func (p *Policy) Canonical() *Policy {
	c := p.Clone()
	if c == nil {
		return nil
	}
	if c.FilesystemPolicy != nil {
		fs := c.FilesystemPolicy
		fs.ReadOnly = canonicalPaths(fs.ReadOnly)
		fs.ReadWrite = canonicalPaths(fs.ReadWrite)
	}
	if c.Landlock != nil && c.Landlock.Compatibility == "" {
		c.Landlock.Compatibility = "best_effort"
	}
	if c.Process != nil {
		c.Process.RunAsUser = canonicalID(c.Process.RunAsUser)
		c.Process.RunAsGroup = canonicalID(c.Process.RunAsGroup)
	}
	for key, np := range c.NetworkPolicies {
		if np == nil {
			continue
		}
		if np.Name == "" {
			np.Name = key
		}
		np.Endpoints = canonicalEndpoints(np.Endpoints)
		np.Binaries = canonicalBinaries(np.Binaries)
	}
	for key, m := range c.NetworkMiddlewares {
		if m == nil {
			continue
		}
		if m.Name == "" {
			m.Name = key
		}
		if m.OnError == "" {
			m.OnError = "fail_closed"
		}
		m.Config = canonicalObject(m.Config)
		m.Endpoints.Include = canonicalHosts(m.Endpoints.Include)
		if m.Endpoints.Include == nil {
			m.Endpoints.Include = []string{}
		}
		m.Endpoints.Exclude = canonicalHosts(m.Endpoints.Exclude)
	}
	return c
}

// CanonicalJSON returns the compact JSON of p.Canonical(): struct fields in
// declaration order, map keys sorted, no HTML escaping, no trailing newline.
// It is what Hash digests.
func (p *Policy) CanonicalJSON() []byte {
	return marshalJSON(p.Canonical(), "")
}

// Hash returns the lower-case hex SHA-256 of p.CanonicalJSON().
func (p *Policy) Hash() string {
	sum := sha256.Sum256(p.CanonicalJSON())
	return hex.EncodeToString(sum[:])
}

// marshalJSON encodes v without HTML escaping. Canonical values contain
// only JSON-representable data, so it does not fail; if a policy built in
// Go smuggles in something that is not, the error text is encoded in its
// place so that the hash still differs from every valid policy's.
func marshalJSON(v any, indent string) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if indent != "" {
		enc.SetIndent("", indent)
	}
	if err := enc.Encode(v); err != nil {
		b, _ := json.Marshal(map[string]string{"unencodable_policy": err.Error()})
		return b
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

// sortedUnique returns the sorted distinct strings of s, nil for none.
func sortedUnique(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	out := slices.Clone(s)
	sort.Strings(out)
	return slices.Compact(out)
}

func canonicalPaths(ps []string) []string {
	out := make([]string, 0, len(ps))
	for _, p := range ps {
		if strings.HasPrefix(p, "/") {
			p = path.Clean(p)
		}
		out = append(out, p)
	}
	return sortedUnique(out)
}

// canonicalID writes a numeric process id without leading zeros.
func canonicalID(id string) string {
	if n, err := strconv.ParseUint(id, 10, 32); err == nil {
		return strconv.FormatUint(n, 10)
	}
	return id
}

// canonicalHost lower-cases a host, drops a trailing dot and brackets, and
// writes an IP address in its standard form.
func canonicalHost(h string) string {
	h = NormalizeHost(h)
	if strings.HasPrefix(h, "[") && strings.HasSuffix(h, "]") {
		h = h[1 : len(h)-1]
	}
	if a, err := netip.ParseAddr(h); err == nil {
		return a.String()
	}
	return h
}

func canonicalHosts(hs []string) []string {
	out := make([]string, len(hs))
	for i, h := range hs {
		out[i] = canonicalHost(h)
	}
	return sortedUnique(out)
}

func canonicalBinaries(bs []Binary) []Binary {
	out := make([]Binary, 0, len(bs))
	seen := map[string]bool{}
	for _, b := range bs {
		if seen[b.Path] {
			continue
		}
		seen[b.Path] = true
		// harness is deprecated and ignored: it does not change the meaning.
		out = append(out, Binary{Path: b.Path})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

// sortByJSON sorts items by their canonical JSON and drops exact duplicates.
func sortByJSON[T any](items []T) []T {
	type keyed struct {
		key  string
		item T
	}
	ks := make([]keyed, len(items))
	for i, it := range items {
		ks[i] = keyed{string(marshalJSON(it, "")), it}
	}
	sort.SliceStable(ks, func(i, j int) bool { return ks[i].key < ks[j].key })
	out := make([]T, 0, len(ks))
	for i, k := range ks {
		if i > 0 && k.key == ks[i-1].key {
			continue
		}
		out = append(out, k.item)
	}
	return out
}

func canonicalEndpoints(eps []*Endpoint) []*Endpoint {
	out := make([]*Endpoint, 0, len(eps))
	for _, ep := range eps {
		if ep == nil {
			continue
		}
		canonicalEndpoint(ep)
		out = append(out, ep)
	}
	return sortByJSON(out)
}

func canonicalEndpoint(ep *Endpoint) {
	ep.Host = canonicalHost(ep.Host)
	ports := ep.Ports
	if len(ports) == 0 && ep.Port != 0 {
		ports = []int{ep.Port}
	}
	ports = slices.Clone(ports)
	slices.Sort(ports)
	ports = slices.Compact(ports)
	ep.Port, ep.Ports = 0, nil
	if len(ports) == 1 {
		ep.Port = ports[0]
	} else if len(ports) > 1 {
		ep.Ports = ports
	}
	if ep.TLS == "terminate" || ep.TLS == "passthrough" {
		ep.TLS = "" // deprecated no-ops
	}
	if isL7(ep.Protocol) && ep.Enforcement == "" {
		ep.Enforcement = EnforcementEnforce
	}
	allowAll := ep.Protocol == ProtocolMCP && allowAllKnown(ep)

	// Rules and deny rules keep the order and the positions of the
	// document: a rule's index is how every message names it (rules[4] is
	// the fifth entry of the user's file, in a denial, a finding or a
	// prover report), and the first allow rule that matches is the one
	// that allows a call (its rate_limit is the bucket charged). An entry
	// without allow allows nothing but keeps its place.
	for _, r := range ep.Rules {
		if r.Allow != nil {
			canonicalRule(r.Allow, ep.Protocol, allowAll)
		}
	}
	if ep.DenyRules != nil {
		// A nil entry is invalid (validation refuses it), so dropping it
		// moves no valid rule.
		deny := make([]*L7Rule, 0, len(ep.DenyRules))
		for _, r := range ep.DenyRules {
			if r != nil {
				canonicalRule(r, ep.Protocol, allowAll)
				deny = append(deny, r)
			}
		}
		ep.DenyRules = deny
	}

	ips := make([]string, 0, len(ep.AllowedIPs))
	for _, s := range ep.AllowedIPs {
		if p, err := parseAllowedIP(s); err == nil {
			p = p.Masked()
			if p.Bits() == p.Addr().BitLen() {
				s = p.Addr().String()
			} else {
				s = p.String()
			}
		}
		ips = append(ips, s)
	}
	ep.AllowedIPs = sortedUnique(ips)

	for _, q := range ep.GraphQLPersistedQueries {
		if q != nil {
			q.Fields = sortedUnique(q.Fields)
		}
	}
	switch ep.Protocol {
	case ProtocolMCP:
		if ep.MCP == nil {
			ep.MCP = &MCPOptions{}
		}
		if ep.MCP.StrictToolNames == nil {
			t := true
			ep.MCP.StrictToolNames = &t
		}
		if ep.MCP.MaxBodyBytes == 0 {
			ep.MCP.MaxBodyBytes = DefaultMaxBodyBytes
		}
		if o := ep.MCP.OAuth; o != nil && !o.ResourceMetadata && !o.AuthorizationServer {
			ep.MCP.OAuth = nil // declares nothing
		} else if o != nil {
			o.ResourceMetadataPaths = sortedUnique(o.ResourceMetadataPaths)
			o.IssuerPaths = sortedUnique(o.IssuerPaths)
		}
		if ep.MCP.MaxResponseBytes == DefaultMaxResponseBytes {
			ep.MCP.MaxResponseBytes = 0 // the default, spelled or not, hashes as one document
		}
		if ep.MCP.FiltersToolsList() {
			// The default, spelled or not, hashes as one document.
			ep.MCP.FilterToolsList = nil
		}
		ep.MCP.Versions = sortedUnique(ep.MCP.Versions)
		if len(ep.MCP.Versions) == 0 {
			ep.MCP.Versions = []string{DefaultMCPVersion}
		}
	case ProtocolJSONRPC:
		if ep.JSONRPC == nil {
			ep.JSONRPC = &JSONRPCOptions{}
		}
		if ep.JSONRPC.MaxBodyBytes == 0 {
			ep.JSONRPC.MaxBodyBytes = DefaultMaxBodyBytes
		}
	case ProtocolGraphQL:
		if ep.GraphQLMaxBodyBytes == 0 {
			ep.GraphQLMaxBodyBytes = DefaultMaxBodyBytes
		}
	}
}

func canonicalMatcher(m *Matcher) *Matcher {
	if m == nil {
		return nil
	}
	globs := sortedUnique(m.Any)
	if globs == nil {
		globs = []string{}
	}
	return &Matcher{Any: globs}
}

func canonicalRule(r *L7Rule, protocol string, allowAll bool) {
	switch protocol {
	case ProtocolREST, ProtocolWebSocket:
		r.Method = strings.ToUpper(r.Method)
	}
	for k, m := range r.Query {
		r.Query[k] = canonicalMatcher(m)
	}
	r.Fields = sortedUnique(r.Fields)
	if protocol == ProtocolMCP && r.Tool == nil && r.Params != nil && r.Params["name"] != nil && len(r.Params) == 1 {
		// params.name is the lower-level spelling of tool.
		r.Tool, r.Params = r.Params["name"], nil
	}
	r.Tool = canonicalMatcher(r.Tool)
	r.Prompt = canonicalMatcher(r.Prompt)
	r.Resource = canonicalMatcher(r.Resource)
	for k, m := range r.Params {
		r.Params[k] = canonicalMatcher(m)
	}
	if protocol == ProtocolMCP && allowAll && r.Method == "" && r.Tool != nil {
		// OpenShell normalises a tool selector without method to tools/call.
		r.Method = "tools/call"
	}
	r.ArgumentsSchema = canonicalObject(r.ArgumentsSchema)
	if r.RateLimit != nil && r.RateLimit.Burst == 0 {
		r.RateLimit.Burst = r.RateLimit.RequestsPerMinute
	}
	canonicalReview(r)
	if r.ExpiresAt != nil {
		t := r.ExpiresAt.UTC()
		r.ExpiresAt = &t
	}
}

// canonicalReview writes a rule's review one way: a review that is not
// required is none (dropped), and a required one always carries its
// timeout, the default filled in and spelled by FormatReviewTimeout, so
// "120s", "2m" and no timeout hash alike. A timeout that does not parse
// is kept as written (validation refuses it).
func canonicalReview(r *L7Rule) {
	switch {
	case r.Review == nil:
	case !r.Review.Required:
		r.Review = nil
	default:
		if d, err := ReviewTimeout(r.Review.Timeout); err == nil {
			r.Review.Timeout = FormatReviewTimeout(d)
		}
	}
}

// canonicalObject rewrites a free-form object into the JSON data model
// (map[string]any, []any, string, bool, int64, float64, nil), so that a
// value built in Go and the same value parsed from a document encode alike.
func canonicalObject(m map[string]any) map[string]any {
	if m == nil {
		return nil
	}
	out, _ := canonicalAny(m, 0).(map[string]any)
	return out
}

func canonicalAny(x any, depth int) any {
	if depth > maxNesting {
		return nil
	}
	switch t := x.(type) {
	case nil, string, bool, int64:
		return t
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, v := range t {
			out[k] = canonicalAny(v, depth+1)
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, v := range t {
			out[i] = canonicalAny(v, depth+1)
		}
		return out
	case float64:
		if math.IsNaN(t) || math.IsInf(t, 0) {
			return nil
		}
		if t == math.Trunc(t) && math.Abs(t) < 1<<53 {
			return int64(t)
		}
		return t
	case float32:
		return canonicalAny(float64(t), depth)
	case int:
		return int64(t)
	case int8, int16, int32, uint, uint8, uint16, uint32, uint64, json.Number:
		var f json.Number
		if n, ok := t.(json.Number); ok {
			f = n
		} else {
			f = json.Number(fmt.Sprint(t))
		}
		if i, err := f.Int64(); err == nil {
			return i
		}
		if v, err := f.Float64(); err == nil {
			return canonicalAny(v, depth)
		}
		return string(f)
	}
	// Anything else (a struct, a typed map) goes through its JSON form.
	b, err := json.Marshal(x)
	if err != nil {
		return nil
	}
	var v any
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if dec.Decode(&v) != nil {
		return nil
	}
	return canonicalAny(v, depth)
}
