package match

import (
	"net/netip"
	"strings"

	"github.com/portcullis-dev/portcullis/policy"
)

// ---------------------------------------------------------------------------
// Hosts.

type hostKind uint8

const (
	hostNone    hostKind = iota // no host: allowed_ips decide
	hostName                    // an exact DNS name
	hostIP                      // an IP literal
	hostWild                    // a name with wildcard labels
	hostInvalid                 // matches nothing
)

// hostPattern is a compiled endpoint host (policy.MatchHost).
type hostPattern struct {
	kind   hostKind
	name   string      // hostName: the folded name
	ip     netip.Addr  // hostIP
	multi  bool        // hostWild: first label `**` (one or more labels)
	labels []hostLabel // hostWild: the labels, the first omitted when multi
}

// hostLabel is one label of a wildcard host pattern: a literal, a whole
// `*` (any one label), or a first label holding `*` (a character pattern).
type hostLabel struct {
	literal string
	any     bool
	toks    []token
}

func compileHost(pattern string) hostPattern {
	if pattern == "" {
		return hostPattern{kind: hostNone}
	}
	if policy.ValidHostPattern(pattern) != nil {
		return hostPattern{kind: hostInvalid}
	}
	p := policy.NormalizeHost(pattern)
	if a, ok := policy.ParseHostIP(p); ok {
		return hostPattern{kind: hostIP, ip: a}
	}
	if !strings.Contains(p, "*") {
		return hostPattern{kind: hostName, name: p}
	}
	hp := hostPattern{kind: hostWild}
	labels := strings.Split(p, ".")
	if labels[0] == "**" {
		hp.multi, labels = true, labels[1:]
	}
	for _, l := range labels {
		switch {
		case l == "*":
			hp.labels = append(hp.labels, hostLabel{any: true})
		case strings.Contains(l, "*"):
			toks, ok := compileChars(l)
			if !ok {
				return hostPattern{kind: hostInvalid}
			}
			hp.labels = append(hp.labels, hostLabel{toks: toks})
		default:
			hp.labels = append(hp.labels, hostLabel{literal: l})
		}
	}
	return hp
}

// matchWild mirrors policy.MatchHost for a wildcard pattern and a folded
// host that is not an IP literal: the host must be a valid host name
// (policy.ValidHostName), and its labels match the pattern's from the
// right, a `**` first label taking the one or more labels left over.
func (hp *hostPattern) matchWild(h string) bool {
	if !policy.ValidHostName(h) {
		return false
	}
	rest := h
	for i := len(hp.labels) - 1; i >= 0; i-- {
		var label string
		if j := strings.LastIndexByte(rest, '.'); j >= 0 {
			label, rest = rest[j+1:], rest[:j]
		} else if rest != "" {
			label, rest = rest, ""
		} else {
			return false
		}
		if i == 0 && !hp.multi && rest != "" {
			return false
		}
		l := &hp.labels[i]
		switch {
		case l.any:
		case l.toks != nil:
			if !matchTokens(l.toks, label) {
				return false
			}
		case l.literal != label:
			return false
		}
	}
	// A `**` takes the one or more (non-empty, by ValidHostName) labels left.
	return hp.multi == (rest != "")
}

// allowedPrefixes parses allowed_ips once, entry by entry as policy's
// addrInAllowedIPs does (policy.ParseAllowedIP); invalid entries cover
// nothing.
func allowedPrefixes(list []string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range list {
		if prefix, ok := policy.ParseAllowedIP(s); ok {
			out = append(out, prefix)
		}
	}
	return out
}

// inPrefixes mirrors policy's addrInAllowedIPs: addr, or the IPv4 address
// a NAT64 or IPv4-compatible addr reaches, in one of the prefixes.
func inPrefixes(prefixes []netip.Prefix, addr netip.Addr) bool {
	a := addr.Unmap().WithZone("")
	v4, embedded := policy.EmbeddedIPv4(a)
	for _, p := range prefixes {
		if p.Contains(a) || embedded && p.Contains(v4) {
			return true
		}
	}
	return false
}
