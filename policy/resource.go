package policy

import (
	"errors"
	"fmt"
)

// This file holds how MCP rules name prompts and resources: the methods
// that carry a resource URI, the plain URIs a resource glob may match, and
// the allow and deny readings of a resource glob.
//
// A resource URI is matched exactly as the client sent it, never
// normalised: the proxy cannot know how a server resolves a URI, so instead
// of guessing it refuses to judge, by a resource glob, a URI whose
// spelling is not the one obvious spelling (PlainResourceURI). Such a URI
// matches no allow rule's resource matcher and every deny rule's — as a
// query that does not decode does — so a second spelling of a denied
// resource is denied and a second spelling of an allowed one is not
// allowed.

// IsResourceMethod reports whether an MCP method carries params.uri that
// a rule's resource matcher judges: resources/read, resources/subscribe
// and resources/unsubscribe.
func IsResourceMethod(method string) bool {
	switch method {
	case "resources/read", "resources/subscribe", "resources/unsubscribe":
		return true
	}
	return false
}

// ResourceMethods lists the methods IsResourceMethod accepts.
func ResourceMethods() []string {
	return []string{"resources/read", "resources/subscribe", "resources/unsubscribe"}
}

// MatchResource is how an allow rule's resource glob matches a URI:
// MatchGlob (segments split on `/`, `*` within one segment, `**` a whole
// segment crossing `/`, case-sensitive), and only on a plain URI.
func MatchResource(pattern, uri string) bool {
	return PlainResourceURI(uri) == nil && MatchGlob(pattern, uri)
}

// MatchDenyResource is how a deny rule's resource glob matches a URI: a URI
// that is not plain matches every deny glob; a plain one matches when
// MatchDenyGlob does ignoring ASCII case (`*` may cross `/`, a trailing
// slash is optional), since a server may read the path of a URI
// case-insensitively. Braces are not alternatives here: the validator
// refuses them in resource globs.
func MatchDenyResource(pattern, uri string) bool {
	if PlainResourceURI(uri) != nil {
		return true
	}
	return ValidGlob(pattern) == nil && matchDenyFold(pattern, uri)
}

// PlainResourceURI reports why a URI is not plain, or nil. A plain URI is
// one spelling of its resource, so matching it exactly is matching the
// resource:
//
//   - only RFC 3986 characters: letters, digits, `-._~`, `%`, and
//     `:/?@!$&'()*+,;=` (no fragment `#`, no IP-literal `[`, `]`, no
//     spaces or other bytes);
//   - a lower-case scheme, `[a-z][a-z0-9+.-]*:`, first;
//   - no upper-case letter in the authority (after `scheme://`, up to the
//     next `/` or `?`): hosts are case-insensitive;
//   - every `%` starts `%XX` with upper-case hex digits, and the byte it
//     encodes is none that has a literal spelling or changes the URI's
//     structure: not a letter, digit or `-._~`, not `/` or `\`, not a
//     control byte (below 0x20, or 0x7F);
//   - no dot segment: no `/`-separated piece (the part after the scheme's
//     `:` starts a piece) is `.` or `..`, alone or before `;` or `?`.
//
// Default ports (`https://h:443/x` and `https://h/x`) and an empty path are
// not normalised either: rules must name the spelling clients send.
func PlainResourceURI(uri string) error {
	if uri == "" {
		return errors.New("the URI is empty")
	}
	s := uriStart
	for i := 0; i < len(uri); i++ {
		next := ResourceURIStep(s, uri[i])
		if next < 0 {
			return uriStepError(s, uri, i)
		}
		s = next
	}
	if !ResourceURIAccepts(s) {
		switch {
		case s>>5 != 0:
			return fmt.Errorf("the URI ends inside a percent-encoding")
		case s&7 < uriColon:
			return errors.New("the URI has no scheme (lower-case [a-z][a-z0-9+.-]* followed by ':')")
		default:
			return errors.New("the URI ends in a dot segment ('.' or '..')")
		}
	}
	return nil
}

// The plain-URI automaton. A state is phase | segment<<3 | percent<<5:
// the phase of the URI, where the current `/`-separated piece stands (is
// it `.` or `..` so far), and the progress through a `%XX` (0 none, 1
// after `%`, 2+d after `%` and the hex digit d). The prover builds its
// automaton of plain URIs from ResourceURIStep, so the two cannot differ.
const (
	uriStart      = iota // before the scheme
	uriScheme            // inside the scheme
	uriColon             // just after "scheme:"
	uriColonSlash        // just after "scheme:/"
	uriAuthority         // after "scheme://", before the next '/' or '?'
	uriRest              // path, query

	segStart = 0 // at the start of a piece
	segDot   = 1 // the piece is "." so far
	segDots  = 2 // the piece is ".." so far
	segOther = 3
)

// ResourceURIStart is the automaton's start state.
const ResourceURIStart = uriStart

// ResourceURIStep is the automaton's move from state s on byte c; -1
// means c cannot continue a plain URI.
func ResourceURIStep(s int, c byte) int {
	phase, seg, pct := s&7, s>>3&3, s>>5
	switch pct {
	case 1:
		d, ok := upperHex(c)
		if !ok {
			return -1
		}
		return phase | seg<<3 | (2+d)<<5
	case 0:
	default:
		d, ok := upperHex(c)
		if !ok || !percentOK(byte((pct-2)<<4|d)) {
			return -1
		}
		if phase == uriColon || phase == uriColonSlash {
			phase = uriRest
		}
		return phase | segOther<<3
	}
	if !uriByte(c) {
		return -1
	}
	upper := c >= 'A' && c <= 'Z'
	switch phase {
	case uriStart:
		if !(c >= 'a' && c <= 'z') {
			return -1
		}
		return uriScheme | segOther<<3
	case uriScheme:
		switch {
		case c == ':':
			return uriColon | segStart<<3
		case c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '+' || c == '.' || c == '-':
			return uriScheme | segOther<<3
		}
		return -1
	case uriAuthority:
		if upper {
			return -1
		}
	}
	if c == '%' {
		return s | 1<<5
	}
	// Where the piece stands after c.
	switch {
	case c == '/':
		if seg == segDot || seg == segDots {
			return -1
		}
		seg = segStart
	case c == ';' || c == '?':
		if seg == segDot || seg == segDots {
			return -1
		}
		seg = segOther
	case c == '.' && seg == segStart:
		seg = segDot
	case c == '.' && seg == segDot:
		seg = segDots
	default:
		seg = segOther
	}
	switch phase {
	case uriColon:
		if c == '/' {
			phase = uriColonSlash
		} else {
			phase = uriRest
		}
	case uriColonSlash:
		if c == '/' {
			phase = uriAuthority
		} else {
			phase = uriRest
		}
	case uriAuthority:
		if c == '/' || c == '?' {
			phase = uriRest
		}
	}
	return phase | seg<<3
}

// ResourceURIAccepts reports whether a URI that brought the automaton to
// state s is plain.
func ResourceURIAccepts(s int) bool {
	phase, seg, pct := s&7, s>>3&3, s>>5
	return pct == 0 && phase >= uriColon && seg != segDot && seg != segDots
}

// uriByte reports whether c may appear in a plain URI at all.
func uriByte(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	switch c {
	case '-', '.', '_', '~', '%', ':', '/', '?', '@', '!', '$', '&', '\'', '(', ')', '*', '+', ',', ';', '=':
		return true
	}
	return false
}

func upperHex(c byte) (int, bool) {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0'), true
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10, true
	}
	return 0, false
}

// percentOK reports whether %XX may encode b in a plain URI.
func percentOK(b byte) bool {
	switch {
	case b < 0x20 || b == 0x7F:
		return false
	case b >= 'a' && b <= 'z', b >= 'A' && b <= 'Z', b >= '0' && b <= '9':
		return false
	}
	switch b {
	case '-', '.', '_', '~', '/', '\\':
		return false
	}
	return true
}

// uriStepError explains why byte i of uri cannot continue from state s.
func uriStepError(s int, uri string, i int) error {
	c := uri[i]
	phase, seg, pct := s&7, s>>3&3, s>>5
	switch {
	case pct != 0:
		return fmt.Errorf("percent-encoding at byte %d: write %%XX with upper-case hex digits, and do not encode a letter, digit, '-', '.', '_', '~', '/', '\\' or a control byte", i-int(min(pct, 2)))
	case !uriByte(c):
		return fmt.Errorf("byte %q at %d is not allowed (RFC 3986 characters only, without '#', '[' and ']')", c, i)
	case phase == uriStart || phase == uriScheme:
		return fmt.Errorf("byte %q at %d: the URI must start with a lower-case scheme ([a-z][a-z0-9+.-]*) and ':'", c, i)
	case phase == uriAuthority && c >= 'A' && c <= 'Z':
		return fmt.Errorf("upper-case letter %q at %d in the authority: write the host in lower case", c, i)
	case seg == segDot || seg == segDots:
		return fmt.Errorf("dot segment ('.' or '..') before byte %d", i)
	}
	return fmt.Errorf("byte %q at %d is not allowed", c, i)
}
