package policy

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// This file holds host patterns: their syntax, matching a host against one,
// and whether two can match one host.

// NormalizeHost lowercases a host and drops one trailing dot.
func NormalizeHost(h string) string {
	return strings.TrimSuffix(strings.ToLower(strings.TrimSpace(h)), ".")
}

// ValidHostPattern reports whether pattern is a valid endpoint host: an IP
// address in its standard spelling, an exact DNS name, or a DNS name with
// wildcards. Following OpenShell, `*` may appear inside the first label
// (`*.example.com`, `*-aiplatform.googleapis.com`) and matches within that
// label; `**` must be the entire first label and matches one or more
// labels; a later label may be a whole `*` (`*.s3.*.amazonaws.com`),
// matching exactly one label. Wildcards never cross a dot, and a label a
// wildcard matches is never empty.
//
// Stricter than OpenShell: at least two literal labels must follow the
// last wildcard label, so `*`, `**`, TLD wildcards (`*.com`), `*.*.com`
// and a wildcard last label (`api.example.*`) are refused, as are partial
// wildcards in later labels (`foo.us-*.x`, refused by OpenShell too) and
// `**` anywhere but the whole first label.
func ValidHostPattern(pattern string) error {
	h := NormalizeHost(pattern)
	if h == "" {
		return errors.New("host is empty")
	}
	if strings.HasPrefix(h, "[") || strings.Contains(h, ":") {
		a, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(h, "["), "]"))
		if err != nil || !a.Is6() || a.Zone() != "" {
			return fmt.Errorf("host %q is not a valid IPv6 address", pattern)
		}
		return nil
	}
	if a, ok := ParseHostIP(h); ok {
		if a.String() != h {
			return fmt.Errorf("host %q is an IP address in a non-standard spelling; write %s", pattern, a)
		}
		return nil
	}
	if len(h) > 253 {
		return fmt.Errorf("host %q is longer than 253 characters", pattern)
	}
	labels := strings.Split(h, ".")
	lastWild := -1
	for i, l := range labels {
		if err := validHostLabel(l, i == 0); err != nil {
			return fmt.Errorf("host %q: %w", pattern, err)
		}
		if strings.Contains(l, "*") {
			lastWild = i
		}
	}
	if lastWild >= 0 && len(labels)-1-lastWild < 2 {
		return fmt.Errorf("host %q: a wildcard label needs at least two literal labels after it (no bare, TLD or last-label wildcards)", pattern)
	}
	return nil
}

func validHostLabel(l string, first bool) error {
	switch {
	case l == "":
		return errors.New("empty label")
	case len(l) > 63:
		return fmt.Errorf("label %q is longer than 63 characters", l)
	case strings.Contains(l, "**") && (l != "**" || !first):
		return fmt.Errorf("label %q: ** must be the entire first label", l)
	case strings.Contains(l, "*") && !first && l != "*":
		return fmt.Errorf("wildcard in label %q: after the first label, a wildcard must be the entire label", l)
	}
	for i := 0; i < len(l); i++ {
		if c := l[i]; !hostChar(c) && c != '*' {
			return fmt.Errorf("label %q: character %q is not allowed in a host name", l, c)
		}
	}
	return nil
}

// hostChar reports whether c belongs to the host-name alphabet, after
// lower-casing: letters, digits, '-' and '_' (which real DNS names use,
// although RFC 952 does not).
func hostChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_'
}

// ValidHostName reports whether host, lower-cased and without one trailing
// dot (NormalizeHost), is a DNS name a wildcard may match: dot-separated
// non-empty labels of letters, digits, '-' and '_', at most 253
// characters. A host with any other byte (NUL, '*', '/', '%', space,
// non-ASCII) matches no wildcard, and the proxy refuses it before policy.
func ValidHostName(host string) bool {
	h := NormalizeHost(host)
	if h == "" || len(h) > 253 {
		return false
	}
	n := 0
	for i := 0; i < len(h); i++ {
		switch c := h[i]; {
		case c == '.':
			if n == 0 {
				return false
			}
			n = 0
		case hostChar(c):
			n++
			if n > 63 {
				return false
			}
		default:
			return false
		}
	}
	return n > 0
}

// MatchHost reports whether host matches the host pattern (see
// ValidHostPattern; an invalid pattern matches nothing). Names compare
// case-insensitively with a trailing dot ignored. A pattern that is an IP
// address matches that address in any spelling ParseHostIP accepts. A
// name pattern matches only a host that is a valid host name
// (ValidHostName): a label holding NUL or another byte outside the
// host-name alphabet matches no `*`.
func MatchHost(pattern, host string) bool {
	if ValidHostPattern(pattern) != nil {
		return false
	}
	p, h := NormalizeHost(pattern), NormalizeHost(host)
	if pa, ok := ParseHostIP(p); ok {
		ha, ok := ParseHostIP(h)
		return ok && ha == pa
	}
	if _, ok := ParseHostIP(h); ok {
		return false
	}
	if !ValidHostName(h) {
		return false
	}
	pl, hl := strings.Split(p, "."), strings.Split(h, ".")
	if pl[0] == "**" {
		// One or more labels, then the rest label by label.
		n := len(pl) - 1
		return len(hl) > n && matchLabels(pl[1:], hl[len(hl)-n:])
	}
	return len(pl) == len(hl) && matchLabels(pl, hl)
}

// matchLabels matches host labels against pattern labels one by one: a
// literal label compares equal, a `*` label matches any label, and a first
// label holding `*` matches as a character pattern within the label.
func matchLabels(pl, hl []string) bool {
	if len(pl) != len(hl) {
		return false
	}
	for i := range pl {
		switch {
		case pl[i] == "*":
		case strings.Contains(pl[i], "*"):
			if !matchChars(pl[i], hl[i]) {
				return false
			}
		case pl[i] != hl[i]:
			return false
		}
	}
	return true
}

// HostPatternsOverlap reports whether some host name matches both host
// patterns (MatchHost), exactly: IP patterns overlap when they are one
// address; name patterns are compared label by label from the right, a
// `**` first label standing for one or more labels and a `*` label for
// any one label. An invalid pattern overlaps nothing.
func HostPatternsOverlap(a, b string) bool {
	if ValidHostPattern(a) != nil || ValidHostPattern(b) != nil {
		return false
	}
	a, b = NormalizeHost(a), NormalizeHost(b)
	ia, aIP := hostPatternIP(a)
	ib, bIP := hostPatternIP(b)
	if aIP || bIP {
		return aIP && bIP && ia == ib
	}
	pa, pb := strings.Split(a, "."), strings.Split(b, ".")
	i, j := len(pa)-1, len(pb)-1
	for i >= 0 && j >= 0 {
		if pa[i] == "**" {
			return true // one or more labels: b has j+1 ≥ 1 left
		}
		if pb[j] == "**" {
			return true
		}
		if !labelsOverlap(pa[i], pb[j]) {
			return false
		}
		i--
		j--
	}
	return i < 0 && j < 0
}

func hostPatternIP(p string) (netip.Addr, bool) {
	if strings.HasPrefix(p, "[") || strings.Contains(p, ":") {
		a, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(p, "["), "]"))
		return a.Unmap(), err == nil
	}
	return ParseHostIP(p)
}

// labelsOverlap reports whether one host label matches both label
// patterns (literals, `*`, or first-label patterns of literals and `*`).
// Two star patterns share a label exactly when their literal heads (before
// the first star) and tails (after the last) are compatible: one a prefix
// (suffix) of the other; the stars absorb the rest.
func labelsOverlap(x, y string) bool {
	xs, ys := strings.Contains(x, "*"), strings.Contains(y, "*")
	switch {
	case !xs && !ys:
		return x == y
	case xs && !ys:
		return matchChars(x, y)
	case !xs && ys:
		return matchChars(y, x)
	}
	xh, xt := x[:strings.IndexByte(x, '*')], x[strings.LastIndexByte(x, '*')+1:]
	yh, yt := y[:strings.IndexByte(y, '*')], y[strings.LastIndexByte(y, '*')+1:]
	return (strings.HasPrefix(xh, yh) || strings.HasPrefix(yh, xh)) &&
		(strings.HasSuffix(xt, yt) || strings.HasSuffix(yt, xt))
}
