package h1

import (
	"net/http"
	"net/textproto"
	"strings"
)

// hopByHop are the headers that describe one connection, not the message;
// a proxy never forwards them (RFC 9110 §7.6.1), nor the ones a
// Connection header names.
var hopByHop = []string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

// connectionNamed returns the fields h's Connection header names beyond
// those hop-by-hop by definition, which are hop-by-hop too (nil when it
// names none). A set: a field is then looked up in it once, however many
// names a sender packs into its Connection header.
func connectionNamed(h http.Header) map[string]bool {
	var named map[string]bool
	for _, v := range h["Connection"] {
		for f := range strings.SplitSeq(v, ",") {
			f = http.CanonicalHeaderKey(textproto.TrimString(f))
			if f == "" || f == "Close" || isHopByHop(f, nil) {
				continue
			}
			if named == nil {
				named = make(map[string]bool)
			}
			named[f] = true
		}
	}
	return named
}

// RemoveHopByHop deletes h's hop-by-hop fields, leaving the end-to-end
// ones.
func RemoveHopByHop(h http.Header) {
	named := connectionNamed(h)
	for k := range h {
		if isHopByHop(k, named) {
			delete(h, k)
		}
	}
}

// ConnectionNamesEndToEnd returns the first header a Connection header
// names that is not hop-by-hop by definition ("" if none): such a header
// would be judged but never reach the upstream.
func ConnectionNamesEndToEnd(h http.Header) string {
	for _, v := range h["Connection"] {
		for _, f := range strings.Split(v, ",") {
			f = http.CanonicalHeaderKey(textproto.TrimString(f))
			if f != "" && f != "Close" && f != "Keep-Alive" && !isHopByHop(f, nil) {
				return f
			}
		}
	}
	return ""
}

func isHopByHop(k string, named map[string]bool) bool {
	for _, h := range hopByHop {
		if k == h {
			return true
		}
	}
	return named[k]
}
