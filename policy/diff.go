package policy

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"unicode/utf8"
)

// Change is one structural difference between two policies.
type Change struct {
	Kind    string // "added" | "removed" | "changed"
	Path    string // where, e.g. network_policies.orders.endpoints[orders.example.com:443/mcp].rules
	Summary string // one line for people, e.g. "added tool lookup_order (tools/call)"
	// Before and After are compact JSON of the item ("" when absent).
	Before, After string
}

// Change kinds.
const (
	ChangeAdded   = "added"
	ChangeRemoved = "removed"
	ChangeChanged = "changed"
)

// Diff returns the structural differences from a to b, both taken in
// canonical form (a nil policy is empty). Network policy entries are
// matched by key, endpoints by host:ports+path (not by index), binaries by
// path, and rules by what they name: a tools/call rule is split into one
// item per tool, so an added tool reads "added tool lookup_order
// (tools/call)" (and prompts/get and resources rules per prompt and
// resource: "added resource file:///docs/** (resources/read)"); a rule whose identity (method, path, tool, …) is kept but
// whose details changed (expires_at, arguments_schema, rate_limit, review,
// query) is "changed", with a rate_limit, definition or review change
// spelled out in the summary ("changed tool refund (tools/call): review
// added (timeout 2m)").
// Static sections, endpoint options and middlewares are reported as whole
// values with Before and After.
//
// The order is deterministic: version, static sections, network policies
// by key (name, binaries, endpoints by identity: options, rules, deny
// rules), then middlewares by key. Diff says what changed, not what access
// it adds; that is the prover's job.
func Diff(a, b *Policy) []Change {
	a, b = canonicalOrEmpty(a), canonicalOrEmpty(b)
	var d differ
	if a.Version != b.Version {
		d.add(ChangeChanged, "version", fmt.Sprintf("version changed from %d to %d", a.Version, b.Version), a.Version, b.Version)
	}
	d.static("filesystem_policy", a.FilesystemPolicy, b.FilesystemPolicy)
	d.static("landlock", a.Landlock, b.Landlock)
	d.static("process", a.Process, b.Process)
	d.entries(a.NetworkPolicies, b.NetworkPolicies)
	d.middlewares(a.NetworkMiddlewares, b.NetworkMiddlewares)
	return d.changes
}

func canonicalOrEmpty(p *Policy) *Policy {
	if p == nil {
		return &Policy{}
	}
	return p.Canonical()
}

type differ struct{ changes []Change }

// add records a change; before and after are encoded as compact JSON, a
// nil pointer or missing value as "".
func (d *differ) add(kind, path, summary string, before, after any) {
	d.changes = append(d.changes, Change{Kind: kind, Path: path, Summary: summary, Before: toJSON(before), After: toJSON(after)})
}

// toJSON encodes v compactly ("" for nil). Policy values are plain data, so
// encoding does not fail; if it did, the error text is shown instead.
func toJSON(v any) string {
	if v == nil {
		return ""
	}
	if raw, ok := v.(json.RawMessage); ok {
		return string(raw)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("<%v>", err)
	}
	if s := string(b); s != "null" {
		return s
	}
	return ""
}

// static reports a static section that differs as one "changed" change.
func (d *differ) static(name string, a, b any) {
	before, after := toJSON(a), toJSON(b)
	if before == after {
		return
	}
	summary := name + " changed"
	switch {
	case before == "":
		summary = name + " added"
	case after == "":
		summary = name + " removed"
	}
	d.changes = append(d.changes, Change{Kind: ChangeChanged, Path: name, Summary: summary + " (static: fixed by a sandbox's first version)", Before: before, After: after})
}

// unionKeys returns the union of the maps' keys in order.
func unionKeys[V any](ms ...map[string]V) []string {
	seen := map[string]bool{}
	var keys []string
	for _, m := range ms {
		for k := range m {
			if !seen[k] {
				seen[k] = true
				keys = append(keys, k)
			}
		}
	}
	sort.Strings(keys)
	return keys
}

// keyed compares two maps key by key, in key order: a key only in b is
// added and one only in a removed, each summarised by "added " or
// "removed " and what name says of it; same compares the values of a key
// both have. at is a key's path.
func keyed[V any](d *differ, a, b map[string]*V, at func(key string) string,
	name func(key string, v *V) string, same func(path, key string, x, y *V)) {
	for _, key := range unionKeys(a, b) {
		path := at(key)
		x, y := a[key], b[key]
		switch {
		case x == nil && y == nil:
		case x == nil:
			d.add(ChangeAdded, path, "added "+name(key, y), nil, y)
		case y == nil:
			d.add(ChangeRemoved, path, "removed "+name(key, x), x, nil)
		default:
			same(path, key, x, y)
		}
	}
}

// ---- network_policies

func (d *differ) entries(a, b map[string]*NetworkPolicy) {
	keyed(d, a, b, func(key string) string { return "network_policies." + key },
		func(key string, e *NetworkPolicy) string { return "network policy " + key + ": " + entrySummary(e) },
		func(path, _ string, x, y *NetworkPolicy) { d.entry(path, x, y) })
}

// entrySummary lists an entry's endpoints and binaries.
func entrySummary(e *NetworkPolicy) string {
	var eps []string
	for _, ep := range e.Endpoints {
		if ep != nil {
			eps = append(eps, EndpointLabel(ep)+" ("+protocolName(ep.Protocol)+")")
		}
	}
	bins := "any binary"
	if len(e.Binaries) > 0 {
		var names []string
		for _, b := range e.Binaries {
			names = append(names, b.Path)
		}
		bins = "binaries " + strings.Join(names, ", ")
	}
	return "endpoints " + strings.Join(eps, ", ") + "; " + bins
}

func protocolName(p string) string {
	if p == ProtocolL4 {
		return "L4"
	}
	return p
}

func (d *differ) entry(path string, a, b *NetworkPolicy) {
	if a.Name != b.Name {
		d.add(ChangeChanged, path+".name", fmt.Sprintf("name changed from %q to %q", a.Name, b.Name), a.Name, b.Name)
	}
	d.binaries(path+".binaries", a.Binaries, b.Binaries)
	keyed(d, endpointsByID(a.Endpoints), endpointsByID(b.Endpoints),
		func(id string) string { return fmt.Sprintf("%s.endpoints[%s]", path, id) },
		func(id string, ep *Endpoint) string {
			return fmt.Sprintf("endpoint %s (%s)", id, protocolName(ep.Protocol))
		},
		func(path, _ string, x, y *Endpoint) { d.endpoint(path, x, y) })
}

// binaries compares binary lists by path; a change of the deprecated
// harness flag is "changed".
func (d *differ) binaries(path string, a, b []Binary) {
	ba, bb := map[string]Binary{}, map[string]Binary{}
	for _, x := range a {
		ba[x.Path] = x
	}
	for _, x := range b {
		bb[x.Path] = x
	}
	if len(a) == 0 && len(b) > 0 {
		d.add(ChangeChanged, path, "binaries narrowed from any binary to the listed ones", a, b)
	}
	for _, p := range unionKeys(ba, bb) {
		x, inA := ba[p]
		y, inB := bb[p]
		switch {
		case !inA:
			d.add(ChangeAdded, path, "added binary "+p, nil, y)
		case !inB:
			d.add(ChangeRemoved, path, "removed binary "+p, x, nil)
		case toJSON(x) != toJSON(y):
			d.add(ChangeChanged, path, "changed binary "+p, x, y)
		}
	}
	if len(a) > 0 && len(b) == 0 {
		d.add(ChangeChanged, path, "binaries widened to any binary", a, b)
	}
}

// endpointsByID keys endpoints by host:ports+path; a repeated identity
// gets a "#2", "#3", … suffix in document order.
func endpointsByID(eps []*Endpoint) map[string]*Endpoint {
	out := map[string]*Endpoint{}
	for _, ep := range eps {
		if ep == nil {
			continue
		}
		id := EndpointLabel(ep)
		for n := 2; out[id] != nil; n++ {
			id = fmt.Sprintf("%s#%d", EndpointLabel(ep), n)
		}
		out[id] = ep
	}
	return out
}

// endpoint compares two endpoints with the same identity: every option
// as a whole value, then rules and deny rules item by item.
func (d *differ) endpoint(path string, a, b *Endpoint) {
	fa, fb := endpointOptions(a), endpointOptions(b)
	for _, name := range unionKeys(fa, fb) {
		x, y := fa[name], fb[name]
		if string(x) == string(y) {
			continue
		}
		d.add(ChangeChanged, path+"."+name, optionSummary(name, x, y), x, y)
	}
	d.rules(path+".rules", allowRules(a.Rules), allowRules(b.Rules), "")
	d.rules(path+".deny_rules", a.DenyRules, b.DenyRules, "deny ")
}

// endpointOptions returns an endpoint's fields, as JSON, other than its
// identity (host, port, ports, path) and its rules.
func endpointOptions(ep *Endpoint) map[string]json.RawMessage {
	var fields map[string]json.RawMessage
	raw, _ := json.Marshal(ep)
	_ = json.Unmarshal(raw, &fields)
	for _, k := range []string{"host", "port", "ports", "path", "rules", "deny_rules"} {
		delete(fields, k)
	}
	return fields
}

// optionSummary reads "enforcement changed from audit to enforce" for
// scalar values and "mcp changed" for the others.
func optionSummary(name string, before, after json.RawMessage) string {
	show := func(v json.RawMessage) (string, bool) {
		if len(v) == 0 {
			return "unset", true
		}
		var s any
		if json.Unmarshal(v, &s) != nil {
			return "", false
		}
		switch s.(type) {
		case string, float64, bool:
			return string(v), true
		}
		return "", false
	}
	x, okx := show(before)
	y, oky := show(after)
	if okx && oky {
		return fmt.Sprintf("%s changed from %s to %s", name, x, y)
	}
	return name + " changed"
}

func allowRules(rules []Rule) []*L7Rule {
	var out []*L7Rule
	for _, r := range rules {
		out = append(out, r.Allow)
	}
	return out
}

// ruleItem is one comparable unit of a rule list: a whole rule, or one tool
// of a tools/call rule, one prompt of a prompts/get rule, one resource glob
// of a resources rule.
type ruleItem struct {
	identity string // what the rule names: "tool lookup_order (tools/call)", "GET /v1/*"
	full     string // the item's complete JSON
	value    any    // what Before/After show
}

// ruleItems splits rules into items. A rule with a tool matcher yields one
// item per tool glob, carrying the rest of the rule (arguments_schema,
// expires_at) in its full form; so does a rule with a prompt or resource
// matcher, per prompt or resource glob.
func ruleItems(rules []*L7Rule) []ruleItem {
	var items []ruleItem
	for _, r := range rules {
		if r == nil {
			items = append(items, ruleItem{identity: "rule without allow", full: "null"})
			continue
		}
		tool := r.Tool
		if tool == nil {
			tool = r.Params["name"]
		}
		switch {
		case tool != nil && len(tool.Any) > 0:
			for _, g := range tool.Any {
				one := *r
				one.Tool, one.Params = &Matcher{Any: []string{g}}, nil
				method := r.Method
				if method == "" {
					method = "tools/call"
				}
				items = append(items, ruleItem{identity: fmt.Sprintf("tool %s (%s)", g, method), full: toJSON(one), value: one})
			}
		case r.Prompt != nil && len(r.Prompt.Any) > 0:
			for _, g := range r.Prompt.Any {
				one := *r
				one.Prompt = &Matcher{Any: []string{g}}
				items = append(items, ruleItem{identity: fmt.Sprintf("prompt %s (%s)", g, r.Method), full: toJSON(one), value: one})
			}
		case r.Resource != nil && len(r.Resource.Any) > 0:
			for _, g := range r.Resource.Any {
				one := *r
				one.Resource = &Matcher{Any: []string{g}}
				items = append(items, ruleItem{identity: fmt.Sprintf("resource %s (%s)", g, r.Method), full: toJSON(one), value: one})
			}
		default:
			items = append(items, ruleItem{identity: "rule " + ruleLabel(r), full: toJSON(r), value: r})
		}
	}
	sort.SliceStable(items, func(i, j int) bool {
		if items[i].identity != items[j].identity {
			return items[i].identity < items[j].identity
		}
		return items[i].full < items[j].full
	})
	return items
}

// ruleLabel names a non-tool rule by its matching fields.
func ruleLabel(r *L7Rule) string {
	var parts []string
	for _, s := range []string{r.Method, r.Path, r.Command, r.OperationType, r.OperationName} {
		if s != "" {
			parts = append(parts, s)
		}
	}
	if len(r.Fields) > 0 {
		parts = append(parts, "fields "+strings.Join(r.Fields, ","))
	}
	if len(r.Query) > 0 {
		var qs []string
		for _, k := range unionKeys(r.Query) {
			if m := r.Query[k]; m != nil {
				qs = append(qs, k+"="+strings.Join(m.Any, "|"))
			}
		}
		parts = append(parts, "query "+strings.Join(qs, "&"))
	}
	if len(parts) == 0 {
		return "{}"
	}
	return strings.Join(parts, " ")
}

// rules diffs two rule lists: identical items cancel; items left with the
// same identity pair up as "changed"; the rest are added or removed.
func (d *differ) rules(path string, a, b []*L7Rule, deny string) {
	ia, ib := ruleItems(a), ruleItems(b)
	ia, ib = cancelEqual(ia, ib)
	used := make([]bool, len(ib))
	for _, x := range ia {
		j := -1
		for k, y := range ib {
			if !used[k] && y.identity == x.identity {
				j = k
				break
			}
		}
		if j < 0 {
			d.add(ChangeRemoved, path, "removed "+deny+x.identity+detailSuffix(x), x.value, nil)
			continue
		}
		used[j] = true
		d.add(ChangeChanged, path, "changed "+deny+x.identity+rateLimitChange(x, ib[j])+definitionChange(x, ib[j])+reviewChange(x, ib[j]), x.value, ib[j].value)
	}
	for k, y := range ib {
		if !used[k] {
			d.add(ChangeAdded, path, "added "+deny+y.identity+detailSuffix(y), nil, y.value)
		}
	}
}

// detailSuffix mentions the parts of a rule its identity leaves out.
func detailSuffix(it ruleItem) string {
	r := itemRule(it)
	if r == nil {
		return ""
	}
	var extra []string
	if r.ArgumentsSchema != nil {
		extra = append(extra, "with arguments_schema "+schemaSummary(r.ArgumentsSchema))
	}
	if r.ExpiresAt != nil {
		extra = append(extra, "until "+r.ExpiresAt.UTC().Format("2006-01-02T15:04:05Z07:00"))
	}
	if r.RateLimit != nil {
		extra = append(extra, "with rate_limit "+describeRateLimit(r.RateLimit))
	}
	if r.Definition != "" {
		extra = append(extra, "pinned to "+r.Definition)
	}
	if wait, ok := r.Reviewed(); ok {
		extra = append(extra, "with review (timeout "+FormatReviewTimeout(wait)+")")
	}
	if len(extra) == 0 {
		return ""
	}
	return " " + strings.Join(extra, ", ")
}

// itemRule returns the rule an item stands for (nil for none).
func itemRule(it ruleItem) *L7Rule {
	switch v := it.value.(type) {
	case *L7Rule:
		return v
	case L7Rule:
		return &v
	}
	return nil
}

// rateLimitChange says how a changed rule's rate_limit changed, "" when
// it did not: ": rate_limit 10/min, burst 3 → none".
func rateLimitChange(before, after ruleItem) string {
	var a, b *RateLimit
	if r := itemRule(before); r != nil {
		a = r.RateLimit
	}
	if r := itemRule(after); r != nil {
		b = r.RateLimit
	}
	if a == nil && b == nil || a != nil && b != nil && *a == *b {
		return ""
	}
	return ": rate_limit " + describeRateLimit(a) + " → " + describeRateLimit(b)
}

// definitionChange says how a changed rule's pinned definition changed,
// "" when it did not: ": definition sha256:ab… → sha256:cd…".
func definitionChange(before, after ruleItem) string {
	var a, b string
	if r := itemRule(before); r != nil {
		a = r.Definition
	}
	if r := itemRule(after); r != nil {
		b = r.Definition
	}
	if a == b {
		return ""
	}
	return ": definition " + describeDefinition(a) + " → " + describeDefinition(b)
}

// reviewChange says how a changed rule's review changed, "" when it did
// not: ": review added (timeout 2m)", ": review removed",
// ": review timeout 2m → 5m".
func reviewChange(before, after ruleItem) string {
	a, reviewedA := itemRule(before).Reviewed()
	b, reviewedB := itemRule(after).Reviewed()
	switch {
	case !reviewedA && reviewedB:
		return ": review added (timeout " + FormatReviewTimeout(b) + ")"
	case reviewedA && !reviewedB:
		return ": review removed"
	case a != b:
		return ": review timeout " + FormatReviewTimeout(a) + " → " + FormatReviewTimeout(b)
	}
	return ""
}

func describeDefinition(d string) string {
	if d == "" {
		return "unpinned"
	}
	return d
}

// describeRateLimit reads "10/min, burst 3", or "none".
func describeRateLimit(rl *RateLimit) string {
	if rl == nil {
		return "none"
	}
	return fmt.Sprintf("%d/min, burst %d", rl.RequestsPerMinute, rl.Burst)
}

// cancelEqual removes items present, with identical content, on both sides
// (as multisets).
func cancelEqual(a, b []ruleItem) ([]ruleItem, []ruleItem) {
	used := make([]bool, len(b))
	var restA []ruleItem
	for _, x := range a {
		found := false
		for k, y := range b {
			if !used[k] && y.full == x.full && y.identity == x.identity {
				used[k], found = true, true
				break
			}
		}
		if !found {
			restA = append(restA, x)
		}
	}
	var restB []ruleItem
	for k, y := range b {
		if !used[k] {
			restB = append(restB, y)
		}
	}
	return restA, restB
}

// ---- network_middlewares

func (d *differ) middlewares(a, b map[string]*Middleware) {
	keyed(d, a, b, func(key string) string { return "network_middlewares." + key },
		func(key string, m *Middleware) string { return fmt.Sprintf("middleware %s (%s)", key, m.Middleware) },
		func(path, key string, x, y *Middleware) {
			if toJSON(x) != toJSON(y) {
				d.add(ChangeChanged, path, "changed middleware "+key, x, y)
			}
		})
}

// schemaSummary is an arguments_schema as compact JSON for a change's
// summary, cut to 160 bytes: the reviewer sees what the tool admits.
func schemaSummary(schema map[string]any) string {
	s := toJSON(schema)
	if len(s) <= 160 {
		return s
	}
	cut := 160
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
