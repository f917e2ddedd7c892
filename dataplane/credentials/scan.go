package credentials

import (
	"net"
	"net/http"
	"strconv"
	"strings"

	"github.com/portcullis-dev/portcullis/provider"
)

// checkPlaceholders denies s (where says what it is) when it holds a
// placeholder of a provider other than bound ("" when none is bound).
func checkPlaceholders(where, s, bound string) *Denial {
	for s != "" {
		name, at, ok := provider.FindPlaceholder(s)
		if !ok {
			return nil
		}
		if bound == "" || name != bound {
			return deny(CodePlaceholder, "%s holds the placeholder of provider %q, which the endpoint allowing the request does not bind", where, name)
		}
		s = s[at+len(provider.PlaceholderPrefix)+len(name):]
	}
	return nil
}

// checkTarget looks for placeholders in r's target, as sent and
// percent-decoded.
func checkTarget(r *http.Request, bound string) *Denial {
	target := r.RequestURI
	if target == "" && r.URL != nil {
		target = r.URL.RequestURI()
	}
	if d := checkPlaceholders("the request target", target, bound); d != nil {
		return d
	}
	if strings.Contains(target, "%") {
		return checkPlaceholders("the request target", unescape(target), bound)
	}
	return nil
}

// unescape decodes every valid %XX of s, one by one, and keeps the rest
// as written (an invalid escape elsewhere must not hide a valid one).
func unescape(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) && ishex(s[i+1]) && ishex(s[i+2]) {
			b.WriteByte(unhex(s[i+1])<<4 | unhex(s[i+2]))
			i += 2
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func ishex(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c <= 'F':
		return c - 'A' + 10
	}
	return c - 'a' + 10
}

// checkHeaders looks at every header value: for placeholders of other
// providers than bound, and (s not nil) for a secret s holds or a token
// fetched with one. The header the bound provider e sets is judged by
// checkSupplied.
func (s *state) checkHeaders(r *http.Request, bound string, e *entry) *Denial {
	for k, vv := range r.Header {
		for _, v := range vv {
			// The label is built only for a value holding a placeholder.
			if provider.IndexPlaceholder(v) >= 0 {
				if d := checkPlaceholders("header "+k, v, bound); d != nil {
					return d
				}
			}
			if s != nil && s.holdsSecret(v) {
				return deny(CodeSupplied, "header %s holds a credential the proxy holds: the agent must not have it", k)
			}
		}
	}
	if e != nil {
		return checkSupplied(r, e)
	}
	return nil
}

// holdsSecret reports whether v contains a held secret or a fetched
// token.
func (s *state) holdsSecret(v string) bool {
	if len(v) < MinSearchedSecret {
		return false
	}
	for _, sec := range s.secrets {
		if strings.Contains(v, sec) {
			return true
		}
	}
	for _, e := range s.providers {
		if t := e.tokens.current(); t != "" && strings.Contains(v, t) {
			return true
		}
	}
	return false
}

// checkSupplied denies a request whose header for e's credential holds a
// value other than e's placeholder (absent is fine).
func checkSupplied(r *http.Request, e *entry) *Denial {
	name := headerOf(e.p)
	placeholder := provider.Placeholder(e.p.Name)
	for _, v := range r.Header.Values(name) {
		switch {
		case e.p.Type == provider.TypeAWS:
			if !awsPlaceholder(v, placeholder) {
				return deny(CodeSupplied, "the agent sent its own AWS signature with an access key: it must not hold a credential; use %s as the access key, or send none", placeholder)
			}
		case containsName(v, e.p.Name):
		case e.p.Type == provider.TypeBasic && basicPlaceholder(v, placeholder):
		default:
			return deny(CodeSupplied, "the agent sent its own %s header: it must not hold a credential; send %s there, or nothing", name, placeholder)
		}
	}
	return nil
}

// containsName reports whether v holds name's placeholder exactly (not
// as the start of a longer name).
func containsName(v, name string) bool {
	for v != "" {
		n, at, ok := provider.FindPlaceholder(v)
		if !ok {
			return false
		}
		if n == name {
			return true
		}
		v = v[at+len(provider.PlaceholderPrefix)+len(n):]
	}
	return false
}

// basicPlaceholder: Basic base64(USER:placeholder).
func basicPlaceholder(v, placeholder string) bool {
	scheme, cred, ok := strings.Cut(v, " ")
	if !ok || !strings.EqualFold(scheme, "Basic") {
		return false
	}
	r := &http.Request{Header: http.Header{"Authorization": {"Basic " + strings.TrimSpace(cred)}}}
	_, pass, ok := r.BasicAuth()
	return ok && pass == placeholder
}

// awsPlaceholder: an AWS4-HMAC-SHA256 Authorization naming the
// placeholder as its access key.
func awsPlaceholder(v, placeholder string) bool {
	alg, rest, _ := strings.Cut(strings.TrimSpace(v), " ")
	if alg != "AWS4-HMAC-SHA256" {
		return false
	}
	for part := range strings.SplitSeq(rest, ",") {
		if cred, ok := strings.CutPrefix(strings.TrimSpace(part), "Credential="); ok {
			key, _, _ := strings.Cut(cred, "/")
			return key == placeholder
		}
	}
	return false
}

// headerOf is the header provider p's credential goes in.
func headerOf(p provider.Provider) string {
	if p.Type == provider.TypeHeader {
		return http.CanonicalHeaderKey(p.Settings[provider.SettingHeader])
	}
	return "Authorization"
}

func hostPort(host string, port int) string { return net.JoinHostPort(host, strconv.Itoa(port)) }
