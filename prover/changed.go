package prover

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/portcullis-dev/portcullis/policy"
)

// Which endpoints changed: a proof looks only at the destinations of
// (entry binaries, endpoint) pairs that one policy has and the other has
// not.

// ref is one endpoint of a policy with its entry.
type ref struct {
	key   string
	entry *policy.NetworkPolicy
	index int
	ep    *policy.Endpoint
	// changed: no equal (entry binaries, endpoint) pair in the other policy.
	changed bool
}

// refsOf lists the endpoints of p in no particular order (sorting every
// key of a large policy was a good part of a proof): where the order shows
// (groups, sub-policies) the few refs concerned are put in document order
// by sortRefs.
func refsOf(p *policy.Policy) []ref {
	if p == nil {
		return nil
	}
	n := 0
	for _, e := range p.NetworkPolicies {
		if e != nil {
			n += len(e.Endpoints)
		}
	}
	out := make([]ref, 0, n)
	policy.EachEndpoint(p, func(key string, entry *policy.NetworkPolicy, i int, ep *policy.Endpoint) {
		out = append(out, ref{key: key, entry: entry, index: i, ep: ep})
	})
	return out
}

// sortRefs puts refs in document order: by entry key, then endpoint index.
func sortRefs(rs []*ref) {
	slices.SortFunc(rs, func(a, b *ref) int {
		if c := strings.Compare(a.key, b.key); c != 0 {
			return c
		}
		return a.index - b.index
	})
}

// changedEndpoints is the multiset difference, both ways, of (entry
// binaries, endpoint) pairs, marking the changed refs. Decide's verdict on
// a request depends only on the multiset of such pairs whose host and port
// match it (the deny phase and the candidates both filter on host and port
// first, and combine does not depend on order), so a request whose
// matching pairs are the same in both policies gets the same verdict from
// both: every added request matches the host and port of some changed
// endpoint. Pairs at the same place in both documents are compared first
// (the common case of a small change), the rest by fingerprint.
func changedEndpoints(cur, prop []ref) []*policy.Endpoint {
	type place struct {
		key   string
		index int
	}
	at := make(map[place]int, len(cur))
	for i, r := range cur {
		at[place{r.key, r.index}] = i
	}
	curDone := make([]bool, len(cur))
	for i := range prop {
		p := &prop[i]
		j, ok := at[place{p.key, p.index}]
		if ok && slices.Equal(cur[j].entry.Binaries, p.entry.Binaries) && endpointEqual(cur[j].ep, p.ep) {
			curDone[j] = true
			continue
		}
		p.changed = true
	}
	count := map[string]int{}
	for j := range cur {
		if !curDone[j] {
			cur[j].changed = true
			count[fingerprint(cur[j])]++
		}
	}
	for i := range prop {
		if prop[i].changed {
			count[fingerprint(prop[i])]--
		}
	}
	var out []*policy.Endpoint
	seen := map[string]bool{}
	for _, rs := range [][]ref{prop, cur} {
		var changed []*ref
		for i := range rs {
			r := &rs[i]
			if !r.changed {
				continue
			}
			if count[fingerprint(*r)] == 0 {
				r.changed = false
				continue
			}
			changed = append(changed, r)
		}
		sortRefs(changed)
		for _, r := range changed {
			// One group per destination (host, allowed_ips, ports).
			key := policy.NormalizeHost(r.ep.Host) + "|" + strings.Join(r.ep.AllowedIPs, ",") + "|" + fmt.Sprint(policy.EndpointPorts(r.ep))
			if !seen[key] {
				seen[key] = true
				out = append(out, r.ep)
			}
		}
	}
	return out
}

// fingerprint identifies an (entry binaries, endpoint) pair by content.
func fingerprint(r ref) string {
	bins := make([]string, 0, len(r.entry.Binaries))
	for _, b := range r.entry.Binaries {
		bins = append(bins, b.Path)
	}
	sort.Strings(bins)
	raw, _ := json.Marshal(r.ep)
	return strings.Join(bins, "\x00") + "\x01" + string(raw)
}
