package prover

import (
	"strings"

	"github.com/portcullis-dev/portcullis/policy"
)

// Domains: the strings a dimension can take, as DFAs. Witnesses are
// searched inside them, so every witness is a value a request can carry
// in that dimension (a canonical path, a clean absolute binary path, a
// DNS name).

var pathBytes = func() []byte {
	var bs []byte
	for c := 0; c < 128; c++ {
		b := byte(c)
		if b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || strings.IndexByte("-._~!$&'()*+,;=:@/", b) >= 0 {
			bs = append(bs, b)
		}
	}
	return bs
}()

// Path-shaped states: 0 before the leading '/', 1 at the start of a
// segment, 2 segment ".", 3 segment "..", 4 inside an ordinary segment,
// 5 just the root "/".
func pathStep(trailingSlash bool) func(int, byte) int {
	return func(s int, c byte) int {
		switch s {
		case 0:
			if c == '/' {
				return 5
			}
			return -1
		case 1, 5:
			switch c {
			case '/':
				return -1 // empty segment
			case '.':
				return 2
			}
			return 4
		case 2:
			switch c {
			case '/', ';':
				return -1 // "." segment, or ".;" (refused)
			case '.':
				return 3
			}
			return 4
		case 3:
			if c == '/' || c == ';' {
				return -1
			}
			return 4
		case 4:
			if c == '/' {
				return 1
			}
			return 4
		}
		return -1
	}
}

// canonicalPaths: what policy.CanonicalPath can return (without percent
// escapes): '/' first, no empty or dot segments, a trailing '/' allowed.
var canonicalPaths = domain{
	start:   0,
	step:    pathStep(true),
	accept:  func(s int) bool { return s == 1 || s == 4 || s == 5 },
	bytes:   pathBytes,
	special: "/.;",
}

// encodedSlashPaths: canonical paths under allow_encoded_slash that hold
// at least one encoded slash "%2F" inside a segment ('%' appears only
// there). The step keeps pathStep's state in the low bits, the progress
// through "%2F" in bits 3-4 and "seen one" in bit 5.
var encodedSlashPaths = domain{
	start: 0,
	step: func(s int, c byte) int {
		base, enc, seen := s&7, s>>3&3, s>>5
		switch {
		case enc == 1 && c == '2':
			return base | 2<<3 | seen<<5
		case enc == 2 && c == 'F':
			return base | 1<<5
		case enc != 0:
			return -1
		case c == '%':
			if base == 0 {
				return -1
			}
			next := pathStep(true)(base, 'x') // "%2F" is an ordinary segment character
			return next | 1<<3 | seen<<5
		}
		next := pathStep(true)(base, c)
		if next < 0 {
			return -1
		}
		return next | seen<<5
	},
	accept:  func(s int) bool { b := s & 7; return s>>3&3 == 0 && s>>5 == 1 && (b == 1 || b == 4 || b == 5) },
	bytes:   append([]byte{'%'}, pathBytes...),
	special: "/.;%2F",
}

// cleanBinaries: absolute paths with path.Clean(p) == p.
var cleanBinaries = domain{
	start:   0,
	step:    pathStep(false),
	accept:  func(s int) bool { return s == 4 || s == 5 },
	bytes:   pathBytes,
	special: "/.;",
}

// dnsNames: lower-case labels of [a-z0-9_-] joined by dots.
var dnsNames = domain{
	start: 0,
	step: func(s int, c byte) int {
		if c == '.' {
			if s == 1 {
				return 0
			}
			return -1
		}
		return 1
	},
	accept:  func(s int) bool { return s == 1 },
	bytes:   []byte("abcdefghijklmnopqrstuvwxyz0123456789-_."),
	special: ".",
	maxLen:  253,
}

// anyString: non-empty printable ASCII strings (JSON-RPC method names,
// tool names, query values); the empty string is a class of its own that
// callers add.
var anyString = domain{
	start:  0,
	step:   func(int, byte) int { return 1 },
	accept: func(s int) bool { return s == 1 },
	bytes: func() []byte {
		var bs []byte
		for c := byte(' '); c < 127; c++ {
			bs = append(bs, c)
		}
		return bs
	}(),
}

// hostNFA is policy.MatchHost for a DNS-name pattern (nil for an IP
// pattern or an invalid one), over normalised names: a `**` first label is
// one or more labels, a `*` label (first or later) one label, a first
// label holding `*` a character pattern within the label, and other
// labels literal. Wildcards match only host-name bytes ([a-z0-9_-]), as
// MatchHost does; that labels are non-empty comes from the dnsNames
// domain witnesses are drawn from.
func hostNFA(pattern string) *nfa {
	if policy.ValidHostPattern(pattern) != nil {
		return emptyNFA()
	}
	p := policy.NormalizeHost(pattern)
	if _, ok := policy.ParseHostIP(p); ok || strings.Contains(p, ":") {
		return nil
	}
	labels := strings.Split(p, ".")
	a := &nfa{}
	a.start = a.add()
	cur := a.start
	for i, label := range labels {
		if i > 0 {
			next := a.add()
			a.trans[cur] = append(a.trans[cur], edge{isByte('.'), next})
			cur = next
		}
		switch {
		case label == "**":
			// One or more labels of host-name bytes.
			l := a.add()
			a.trans[cur] = append(a.trans[cur], edge{hostByte, l})
			a.trans[l] = append(a.trans[l], edge{hostByte, l})
			dot := a.add()
			a.trans[l] = append(a.trans[l], edge{isByte('.'), dot})
			a.trans[dot] = append(a.trans[dot], edge{hostByte, l})
			cur = l
		case strings.Contains(label, "*"):
			toks, _ := charTokens(label, false)
			first := a.add()
			a.eps[cur] = append(a.eps[cur], first)
			cur = a.appendTokens(first, toks, hostByte)
		default:
			for j := 0; j < len(label); j++ {
				next := a.add()
				a.trans[cur] = append(a.trans[cur], edge{isByte(label[j]), next})
				cur = next
			}
		}
	}
	a.accept[cur] = true
	return a
}

// hostByte is the host-name alphabet of lower-cased names.
func hostByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_'
}

// literalNFA matches exactly s.
func literalNFA(s string) *nfa {
	a := &nfa{}
	a.start = a.add()
	cur := a.start
	for i := 0; i < len(s); i++ {
		next := a.add()
		a.trans[cur] = append(a.trans[cur], edge{isByte(s[i]), next})
		cur = next
	}
	a.accept[cur] = true
	return a
}

// toolCharsNFA is [A-Za-z0-9_.-]+, the strict tool-name alphabet.
func toolCharsNFA() *nfa {
	a := &nfa{}
	a.start = a.add()
	l := a.add()
	ok := func(c byte) bool {
		return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-'
	}
	a.trans[a.start] = append(a.trans[a.start], edge{ok, l})
	a.trans[l] = append(a.trans[l], edge{ok, l})
	a.accept[l] = true
	return a
}
