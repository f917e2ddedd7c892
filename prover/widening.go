package prover

import (
	"slices"
	"strings"

	"github.com/portcullis-dev/portcullis/policy"
)

// wildcard_widening: the globs an added request is allowed through that
// the current policy does not use in the same place.

// widening names a glob the allowing endpoint, entry or rule uses that the
// current policy does not use in the same place.
func (pr *prover) widening(entry string, ep *policy.Endpoint, rule string, r policy.Request) string {
	if ep == nil {
		return ""
	}
	var why []string
	if h := policy.NormalizeHost(ep.Host); policy.HasWildcard(h) && !pr.currentUses(globHost, h) {
		why = append(why, "host "+h)
	}
	if e := pr.proposed.NetworkPolicies[entry]; e != nil {
		for _, b := range e.Binaries {
			if policy.HasWildcard(b.Path) && !pr.currentUses(globBinary, b.Path) && cleanAbsolute(r.Binary) && policy.MatchGlob(b.Path, r.Binary) {
				why = append(why, "binary "+b.Path)
			}
		}
	}
	if i, ok := ruleIndex(rule); ok && i >= 0 && i < len(ep.Rules) && ep.Rules[i].Allow != nil {
		a := ep.Rules[i].Allow
		if policy.HasWildcard(a.Path) && !pr.currentUses(globPath, a.Path) {
			why = append(why, "path "+a.Path)
		}
		for _, m := range []struct {
			place int
			what  string
			glob  *policy.Matcher
		}{{globTool, "tool ", a.Tool}, {globPrompt, "prompt ", a.Prompt}, {globResource, "resource ", a.Resource}} {
			if m.glob == nil {
				continue
			}
			for _, t := range m.glob.Any {
				if policy.HasWildcard(t) && !pr.currentUses(m.place, t) {
					why = append(why, m.what+t)
				}
			}
		}
	}
	if len(why) == 0 {
		return ""
	}
	slices.Sort(why)
	return "glob where the current policy has none: " + strings.Join(why, ", ")
}

// Places a glob can take in widening.
const (
	globHost = iota
	globBinary
	globPath
	globTool
	globPrompt
	globResource
)

type globUse struct {
	place int
	glob  string
}

// currentUses reports whether the current policy uses glob at place (a
// host, after normalising; an entry's binary; an allow rule's path or
// tool). Only the few globs of allowing rules are asked about, so each is
// looked up by a scan of the current policy, remembered for the proof.
func (pr *prover) currentUses(place int, glob string) bool {
	k := globUse{place, glob}
	if v, ok := pr.curGlobs[k]; ok {
		return v
	}
	if pr.curGlobs == nil {
		pr.curGlobs = map[globUse]bool{}
	}
	found := false
	for _, c := range pr.cur {
		switch place {
		case globHost:
			found = policy.NormalizeHost(c.ep.Host) == glob
		case globBinary:
			for _, b := range c.entry.Binaries {
				found = found || b.Path == glob
			}
		case globPath, globTool, globPrompt, globResource:
			for _, rl := range c.ep.Rules {
				a := rl.Allow
				if a == nil {
					continue
				}
				var m *policy.Matcher
				switch place {
				case globPath:
					found = found || a.Path == glob
				case globTool:
					m = a.Tool
				case globPrompt:
					m = a.Prompt
				case globResource:
					m = a.Resource
				}
				found = found || m != nil && slices.Contains(m.Any, glob)
			}
		}
		if found {
			break
		}
	}
	pr.curGlobs[k] = found
	return found
}
