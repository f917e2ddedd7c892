package match

import (
	"net/url"
	"path"
	"strings"
	"testing"

	"github.com/portcullis-dev/portcullis/policy"
)

// The differential fuzz of the path canonicaliser (issue 11): what the
// proxy forwards is read by the upstream, and common servers read a path
// in different ways. Whenever one of them would route a forwarded path to
// a resource a deny glob names, Decide (and the matcher) must have denied
// the request. The servers are modelled below, each as the path it routes
// on and whether it compares case-insensitively.

// serverDenyGlobs are the deny rules of serverPolicy.
var serverDenyGlobs = []string{"/admin/**", "/a/secret", "/v1/*/keys", "/files/*.env", "/x"}

const serverPolicy = `
version: 1
network_policies:
  api:
    endpoints:
      - host: plain.example.com
        port: 443
        protocol: rest
        enforcement: enforce
        access: full
        deny_rules: &deny
          - { method: GET, path: "/admin/**" }
          - { method: GET, path: "/a/secret" }
          - { method: GET, path: "/v1/*/keys" }
          - { method: GET, path: "/files/*.env" }
          - { method: GET, path: "/x" }
      - host: slash.example.com
        port: 443
        protocol: rest
        enforcement: enforce
        access: full
        allow_encoded_slash: true
        deny_rules: *deny
    binaries: []
`

// serverRead is how one server reads a request path: the path it routes
// on (ok false when it refuses the request) and whether its routes match
// case-insensitively.
type serverRead struct {
	name     string
	route    func(escaped string) (string, bool)
	caseFold bool
}

var serverReads = []serverRead{
	// Go's net/http: r.URL.Path is the decoded path (an encoded slash
	// becomes '/'), which ServeMux cleans (path.Clean, keeping a trailing
	// slash) before it routes.
	{name: "go net/http ServeMux", route: func(p string) (string, bool) {
		u, err := url.Parse(p)
		if err != nil || u.Path == "" {
			return "", false
		}
		return cleanKeepSlash(u.Path), true
	}},
	// Tomcat (and Spring on it, Jetty alike): `;` parameters stripped from
	// every segment of the raw path, then decoded (with
	// ALLOW_ENCODED_SLASH an encoded slash is a '/'), then normalised:
	// dot segments, `%2e` ones included, resolved.
	{name: "tomcat/spring", route: func(p string) (string, bool) {
		segs := strings.Split(p, "/")
		for i, s := range segs {
			if j := strings.IndexByte(s, ';'); j >= 0 {
				segs[i] = s[:j]
			}
		}
		dec, err := url.PathUnescape(strings.Join(segs, "/"))
		if err != nil {
			return "", false
		}
		return cleanKeepSlash(dec), true
	}},
	// A server that decodes first and strips parameters after (what
	// Spring Security's firewall guards against with encoded ';').
	{name: "decode then strip", route: func(p string) (string, bool) {
		dec, err := url.PathUnescape(p)
		if err != nil {
			return "", false
		}
		segs := strings.Split(dec, "/")
		for i, s := range segs {
			if j := strings.IndexByte(s, ';'); j >= 0 {
				segs[i] = s[:j]
			}
		}
		return cleanKeepSlash(strings.Join(segs, "/")), true
	}},
	// ASP.NET / Express: case-insensitive routes on the decoded path.
	{name: "case-insensitive router", caseFold: true, route: func(p string) (string, bool) {
		dec, err := url.PathUnescape(p)
		if err != nil {
			return "", false
		}
		return cleanKeepSlash(dec), true
	}},
	// IIS: decoded, '\' is '/', trailing dots and spaces of a segment
	// ignored, case-insensitive.
	{name: "iis", caseFold: true, route: func(p string) (string, bool) {
		dec, err := url.PathUnescape(p)
		if err != nil {
			return "", false
		}
		segs := strings.Split(strings.ReplaceAll(dec, `\`, "/"), "/")
		for i, s := range segs {
			if t := strings.TrimRight(s, ". "); t != "" {
				segs[i] = t
			}
		}
		return cleanKeepSlash(strings.Join(segs, "/")), true
	}},
}

// cleanKeepSlash is path.Clean keeping a trailing slash (ServeMux's
// cleanPath).
func cleanKeepSlash(p string) string {
	if p == "" || p[0] != '/' {
		p = "/" + p
	}
	c := path.Clean(p)
	if strings.HasSuffix(p, "/") && c != "/" {
		c += "/"
	}
	return c
}

// routesToDenied reports whether a server's routed path reaches what a
// deny glob names: the glob matches it (either case for a case-insensitive
// server, .NET's folds of ı, İ, ſ and K included), with or without a
// trailing slash.
func routesToDenied(glob, routed string, caseFold bool) bool {
	if caseFold {
		routed = strings.NewReplacer("ı", "i", "İ", "i", "ſ", "s", "\u212a", "k").Replace(strings.ToLower(routed))
		glob = strings.ToLower(glob)
	}
	if policy.MatchGlob(glob, routed) {
		return true
	}
	t := strings.TrimSuffix(routed, "/")
	return t != routed && t != "" && policy.MatchGlob(glob, t)
}

// wirePath is the request path forward puts on the wire for canonical
// path c.
func wirePath(t *testing.T, c string) string {
	unescaped, err := url.PathUnescape(c)
	if err != nil {
		t.Fatalf("canonical path %q does not unescape: %v", c, err)
	}
	return (&url.URL{Path: unescaped, RawPath: c}).EscapedPath()
}

var serverSeeds = []string{
	"/admin/keys", "/admin;jsessionid=x/keys", "/a/;/secret", "/a;x/secret;y", "/public/..;/admin/keys",
	"/public/.;x/../a/secret", "/ADMIN/keys", "/%41dmin/keys", "/A/SECRET", "/admin%2e/keys", "/a/secret%2e",
	"/a/secret.", "/admin%3Bx/keys", "/a/secret%3Bjsessionid=1", "/adm%C4%B1n/keys", "/a/%C5%BFecret",
	"/v1/../admin/keys", "/v1/%2e%2e/admin/keys", "/admin%2Fkeys", "/a%2Fsecret", "/a%5Csecret", "/a/secret%20",
	"/v1/a/keys", "/v1/a;b/KEYS", "/files/.env", "/files/x.ENV", "/files/x.env.", "/X", "/x/", "/x;y", "//x", "/x%2F",
	"/public/..%2fadmin/keys", "/public/..%3Badmin", "/files/a%3Bb", "/v1/items",
}

func FuzzCanonicalPathServers(f *testing.F) {
	for _, s := range serverSeeds {
		f.Add(s)
	}
	m, err := Compile(mustParse(f, serverPolicy))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		for _, host := range []string{"plain.example.com", "slash.example.com"} {
			aes := host == "slash.example.com"
			r := policy.Request{Binary: curl, Host: host, Addr: pubIP, Port: 443, HTTPMethod: "GET", Path: raw, Time: when}
			d := agree(t, m, r)
			if !d.Allow {
				continue
			}
			c, err := policy.CanonicalPath(raw, aes)
			if err != nil {
				t.Fatalf("GET %s allowed on %s though its path does not canonicalise: %v", raw, host, err)
			}
			wire := wirePath(t, c)
			if wire != c {
				t.Fatalf("canonical path %q goes on the wire as %q", c, wire)
			}
			for _, s := range serverReads {
				routed, ok := s.route(wire)
				if !ok {
					continue
				}
				for _, g := range serverDenyGlobs {
					if routesToDenied(g, routed, s.caseFold) {
						t.Fatalf("GET %s on %s is allowed and forwarded as %s, which %s routes to %s, denied by %s",
							raw, host, wire, s.name, routed, g)
					}
				}
			}
		}
	})
}

func mustParse(tb testing.TB, doc string) *policy.Policy {
	tb.Helper()
	p, _, err := policy.Parse([]byte(doc))
	if err != nil {
		tb.Fatal(err)
	}
	return p
}
