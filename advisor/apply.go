package advisor

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/portcullis-dev/portcullis/policy"
)

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

// target finds the endpoint ref names in an existing entry: host (any
// case, trailing dot), port, and path scope — required when several
// endpoints of the entry share the host and port.
func (r refuser) target(pol *policy.Policy, fp string, ref EndpointRef) (*policy.Endpoint, error) {
	key, host, port, scope := ref.Policy, ref.Host, ref.Port, ref.Path
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
	ep, err := r.target(pol, fp, op.EndpointRef)
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
	ep, err := r.target(pol, fp, op.EndpointRef)
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
