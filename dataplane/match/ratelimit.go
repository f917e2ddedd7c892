package match

import (
	"encoding/json"

	"github.com/portcullis-dev/portcullis/policy"
)

// Limit is the rate_limit of one allow rule, as the proxy's token buckets
// need it. Decide never looks at it: a decision is stateless, and the
// proxy takes a token for each call the decision allows
// (dataplane/ratelimit's Buckets).
type Limit struct {
	// Key names the rule's bucket across policy versions: the entry, the
	// endpoint's label and the rule's content (rate_limit included)
	// except its arguments_schema. A reload keeps the bucket of every
	// rule whose key is unchanged, wherever the rule moved in its list;
	// rules that differ only in the arguments they admit share one bucket,
	// so a rule added to admit more arguments of a limited tool (as a
	// schema denial's proposal is) adds no allowance of its own.
	Key               string
	Entry             string // network_policies key
	Endpoint          string // "network_policies.KEY (host:ports/path)", as in reasons
	Rule              string // "rules[3]"
	RequestsPerMinute int
	Burst             int
	// Audit: the endpoint has enforcement: audit, so a call over the limit
	// is forwarded and recorded as audit rather than refused.
	Audit bool
}

// limitRef is where a decision's allowing rule sits.
type limitRef struct {
	entry    string
	endpoint int
	rule     string
}

// compileLimits files the rate limits of e's allow rules under m.limits.
func (m *Matcher) compileLimits(e *endpoint) {
	for i := range e.allowRules {
		c := &e.allowRules[i]
		if c.nilAllow || c.src.RateLimit == nil {
			continue
		}
		rl := *c.src.RateLimit
		if rl.Burst == 0 {
			rl.Burst = rl.RequestsPerMinute // the canonical default
		}
		content := *c.src
		content.RateLimit = &rl
		content.ArgumentsSchema = nil
		raw, _ := json.Marshal(&content) // plain data: it does not fail
		if m.limits == nil {
			m.limits = map[limitRef]*Limit{}
		}
		m.limits[limitRef{e.key, e.index, c.label}] = &Limit{
			Key:   e.key + "\x00" + e.label + "\x00" + string(raw),
			Entry: e.key, Endpoint: e.name, Rule: c.label,
			RequestsPerMinute: rl.RequestsPerMinute, Burst: rl.Burst,
			Audit: e.audit,
		}
	}
}

// RateLimit returns the rate limit of the allow rule that made decision d
// (nil when d is not an allow by a rule with a rate_limit; an audited
// denial, which may name the rule whose arguments_schema refused, is not).
func (m *Matcher) RateLimit(d *policy.Decision) *Limit {
	if m == nil || len(m.limits) == 0 || !d.Allow || d.Audit {
		return nil
	}
	return m.limits[limitRef{d.Entry, d.Endpoint, d.Rule}]
}

// LimitKeys returns the keys of every rate limit of the policy: the
// buckets the proxy keeps across a reload.
func (m *Matcher) LimitKeys() map[string]bool {
	keys := map[string]bool{}
	if m != nil {
		for _, l := range m.limits {
			keys[l.Key] = true
		}
	}
	return keys
}
