package prover

import (
	"strings"
	"sync"

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

// canonicalPathBytes are the bytes a canonical path writes literally:
// pathBytes but ';', which starts the parameters CanonicalPath strips.
var canonicalPathBytes = func() []byte {
	var bs []byte
	for _, b := range pathBytes {
		if b != ';' {
			bs = append(bs, b)
		}
	}
	return bs
}()

// canonicalPaths: what policy.CanonicalPath can return (without percent
// escapes): '/' first, no empty or dot segments, a trailing '/' allowed.
var canonicalPaths = domain{
	start:   0,
	step:    pathStep(true),
	accept:  func(s int) bool { return s == 1 || s == 4 || s == 5 },
	bytes:   canonicalPathBytes,
	special: "/.",
}

// encodedSlashPaths: canonical paths under allow_encoded_slash that hold
// at least one encoded slash "%2F" inside a segment ('%' appears only
// there), and no `.` or `..` between encoded slashes (CanonicalPath
// refuses those). The low four bits of a state are its place in the path:
// 0 before the leading '/', 1 at the start of a segment, 2 segment ".",
// 3 segment "..", 4 inside an ordinary segment, 5 just the root "/",
// 6 just after an encoded slash, 7 and 8 a "." or ".." part after one;
// bits 4-5 are the progress through "%2F", bit 6 "seen one".
var encodedSlashPaths = domain{
	start: 0,
	step: func(s int, c byte) int {
		base, enc, seen := s&15, s>>4&3, s>>6
		switch {
		case enc == 1 && c == '2':
			return base | 2<<4 | seen<<6
		case enc == 2 && c == 'F':
			return 6 | 1<<6
		case enc != 0:
			return -1
		}
		next := -1
		switch c {
		case '%':
			if base == 1 || base == 4 || base == 5 || base == 6 {
				return base | 1<<4 | seen<<6
			}
		case '/':
			switch base {
			case 0:
				next = 5
			case 4, 6:
				next = 1
			}
		case '.':
			next = [9]int{0: -1, 1: 2, 2: 3, 3: 4, 4: 4, 5: 2, 6: 7, 7: 8, 8: 4}[base]
		default:
			if base != 0 {
				next = 4
			}
		}
		if next < 0 {
			return -1
		}
		return next | seen<<6
	},
	accept: func(s int) bool {
		b := s & 15
		return s>>4&3 == 0 && s>>6 == 1 && (b == 1 || b == 4 || b == 5 || b == 6)
	},
	bytes:   append([]byte{'%'}, canonicalPathBytes...),
	special: "/.%2F",
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
			cur = a.appendLiteral(cur, ".")
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
			cur = a.appendLiteral(cur, label)
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
	end := a.appendLiteral(a.start, s) // grows a.accept: not inside the index
	a.accept[end] = true
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

// plainURINFA accepts the plain resource URIs (policy.PlainResourceURI),
// built from policy's own automaton (policy.ResourceURIStep), so the
// prover and the evaluator cannot read a URI differently. Bytes that take
// a state to the same next state share one edge, so the witness search
// splits the alphabet only where plainness does.
var plainURINFA = sync.OnceValue(func() *nfa {
	a := &nfa{}
	ids := map[int]int{}
	var order []int
	id := func(s int) int {
		if i, ok := ids[s]; ok {
			return i
		}
		i := a.add()
		ids[s] = i
		order = append(order, s)
		a.accept[i] = policy.ResourceURIAccepts(s)
		return i
	}
	a.start = id(policy.ResourceURIStart)
	for k := 0; k < len(order); k++ {
		from := order[k]
		sets := map[int]*[256]bool{}
		var targets []int
		for c := 0; c < 256; c++ {
			to := policy.ResourceURIStep(from, byte(c))
			if to < 0 {
				continue
			}
			if sets[to] == nil {
				sets[to] = new([256]bool)
				targets = append(targets, to)
			}
			sets[to][c] = true
		}
		for _, to := range targets {
			set := sets[to]
			t := id(to)
			a.trans[ids[from]] = append(a.trans[ids[from]], edge{func(b byte) bool { return set[b] }, t})
		}
	}
	return a
})
