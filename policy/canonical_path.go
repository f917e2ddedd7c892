package policy

import (
	"errors"
	"fmt"
	"strings"
)

// This file holds the canonical HTTP path that path globs are matched
// against: decoding, dot segments and re-encoding.

// CanonicalPath returns the canonical form of an HTTP request path, the form
// rules are matched against and the proxy forwards:
//
//   - a query (`?…`) is dropped; a fragment (`#`) is refused;
//   - `;` path parameters are stripped from every segment, as OpenShell,
//     Tomcat, Jetty and Spring do (`/admin;jsessionid=x/keys` is
//     `/admin/keys`, `/a/;/b` is `/a/b`), before dot segments are resolved,
//     so `..;x` is `..` and `.;x` is `.`;
//   - every percent-encoding is decoded and each byte re-encoded one way:
//     unreserved characters, sub-delims but `;`, `:` and `@` literal,
//     everything else as %XX with upper-case hex — so `%61dmin` and
//     `admin` are one path, and `%3A` and `:` are one. An encoded `;`
//     (`%3B`) is data, not a parameter, and stays `%3B`: decoded, the
//     upstream would strip what follows it;
//   - `.` and `..` segments (also spelled `%2e`) are resolved as RFC 3986
//     §5.2.4 does, never above `/`;
//   - a dot segment that survives decoding is refused: `.` or `..` next to
//     an encoded `/`, `\` or `;` inside a segment (`..%2F`, `.%5Cx`,
//     `..%3B`), which a server that decodes before routing reads as a dot
//     segment;
//   - empty segments (`//`) are collapsed;
//   - `%2F` and `%5C` (an encoded `/` or `\`) are refused unless
//     allowEncodedSlash, and then kept encoded inside their segment;
//   - NUL and other control bytes, raw or encoded, raw backslashes and
//     invalid percent-encodings are refused.
//
// The result starts with `/` and holds no raw `;`; an empty path is `/`.
func CanonicalPath(raw string, allowEncodedSlash bool) (string, error) {
	if i := strings.IndexByte(raw, '?'); i >= 0 {
		raw = raw[:i]
	}
	if strings.ContainsRune(raw, '#') {
		return "", fmt.Errorf("path %q contains a fragment", raw)
	}
	if raw == "" {
		return "/", nil
	}
	if plainPath(raw) {
		return raw, nil // what the steps below would make of it, unchanged
	}
	return canonicalPath(raw, allowEncodedSlash)
}

// plainPath reports whether raw is already canonical plainly: `/` and
// segments of literal bytes only (no `%`, `;`, `\`, control or non-ASCII
// bytes), none of them empty but the last, none a dot segment. Such a
// path decodes and encodes to itself.
func plainPath(raw string) bool {
	if raw == "" || raw[0] != '/' {
		return false
	}
	start := 1 // of the current segment
	for i := 1; i <= len(raw); i++ {
		if i < len(raw) && raw[i] != '/' {
			if !isPathLiteral(raw[i]) {
				return false
			}
			continue
		}
		switch seg := raw[start:i]; seg {
		case ".", "..":
			return false
		case "":
			if i < len(raw) {
				return false // "//"
			}
		}
		start = i + 1
	}
	return true
}

// canonicalPath is CanonicalPath step by step, for a path without a query
// or fragment.
func canonicalPath(raw string, allowEncodedSlash bool) (string, error) {
	if raw == "" {
		return "/", nil
	}
	if raw[0] != '/' {
		return "", fmt.Errorf("path %q does not start with /", raw)
	}
	var out []string
	segs := strings.Split(raw[1:], "/")
	for i, seg := range segs {
		if j := strings.IndexByte(seg, ';'); j >= 0 {
			seg = seg[:j]
		}
		dec, err := decodeSegment(seg, allowEncodedSlash)
		if err != nil {
			return "", fmt.Errorf("path %q: %w", raw, err)
		}
		last := i == len(segs)-1
		switch {
		case dec == ".":
		case dec == "..":
			if len(out) > 0 {
				out = out[:len(out)-1]
			}
		case hidesDotSegment(dec):
			return "", fmt.Errorf("path %q: segment %q holds a dot segment behind an encoded separator", raw, seg)
		case dec == "":
			// An empty segment is a doubled or trailing slash; only the
			// trailing one survives.
			if !last {
				continue
			}
		default:
			out = append(out, encodeSegment(dec))
			continue
		}
		if last {
			// A trailing dot segment or slash leaves a trailing slash.
			out = append(out, "")
		}
	}
	p := "/" + strings.Join(out, "/")
	return strings.ReplaceAll(p, "//", "/"), nil
}

// hidesDotSegment reports whether a decoded segment holding an encoded
// `/`, `\` or `;` has a `.` or `..` part: a server that decodes before it
// splits the path on `/` (or `\`) and strips `;` parameters reads that
// part as a dot segment (`..%2F`, `.%5Cx`, `..%3Bx`).
func hidesDotSegment(dec string) bool {
	if !strings.ContainsAny(dec, `/\;`) {
		return false
	}
	for _, part := range strings.FieldsFunc(dec, func(r rune) bool { return r == '/' || r == '\\' }) {
		if j := strings.IndexByte(part, ';'); j >= 0 {
			part = part[:j]
		}
		if part == "." || part == ".." {
			return true
		}
	}
	return false
}

// decodeSegment percent-decodes one path segment, refusing control bytes,
// backslashes, invalid escapes and (unless allowed) encoded slashes.
func decodeSegment(seg string, allowEncodedSlash bool) (string, error) {
	var b strings.Builder
	for i := 0; i < len(seg); i++ {
		c := seg[i]
		if c == '\\' {
			return "", errors.New("backslash in path")
		}
		if c >= 0x80 {
			// As OpenShell: a request target is ASCII; a client that
			// means a non-ASCII byte percent-encodes it. Servers differ in
			// how they read a raw one.
			return "", fmt.Errorf("raw non-ASCII byte %#02x in path (percent-encode it)", c)
		}
		if c == '%' {
			if i+2 >= len(seg) || !isHex(seg[i+1]) || !isHex(seg[i+2]) {
				return "", fmt.Errorf("invalid percent-encoding in %q", seg)
			}
			c = unhex(seg[i+1])<<4 | unhex(seg[i+2])
			i += 2
			if (c == '/' || c == '\\') && !allowEncodedSlash {
				return "", fmt.Errorf("encoded %q in path (allow_encoded_slash is off)", c)
			}
		}
		if c < 0x20 || c == 0x7f {
			return "", fmt.Errorf("control byte %#02x in path", c)
		}
		b.WriteByte(c)
	}
	return b.String(), nil
}

// encodeSegment writes a decoded segment in the one canonical spelling.
func encodeSegment(seg string) string {
	const hexDigits = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(seg); i++ {
		c := seg[i]
		if isPathLiteral(c) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hexDigits[c>>4])
		b.WriteByte(hexDigits[c&0xf])
	}
	return b.String()
}

// isPathLiteral reports whether c stays literal in a canonical segment:
// RFC 3986 unreserved, sub-delims but ';', ':' and '@'.
func isPathLiteral(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	return strings.IndexByte("-._~!$&'()*+,=:@", c) >= 0
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c >= '0' && c <= '9':
		return c - '0'
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10
	default:
		return c - 'A' + 10
	}
}
