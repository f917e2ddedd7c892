package policy

import (
	"strings"
	"testing"
)

// Issue 11, finding 3: a deny rule holds for every spelling a common server
// routes to the denied resource; allow rules stay exact.

// spellingPolicy is `deny GET /admin/**` and `deny GET /a/secret` beside
// an allow of everything, and an allow_encoded_slash endpoint that allows
// only `/public/**`.
func spellingPolicy() *Policy {
	api := &Endpoint{Host: "api.example.com", Port: 443, Protocol: ProtocolREST, Access: AccessFull,
		DenyRules: []*L7Rule{{Method: "GET", Path: "/admin/**"}, {Method: "GET", Path: "/a/secret"}}}
	pub := &Endpoint{Host: "pub.example.com", Port: 443, Protocol: ProtocolREST, AllowEncodedSlash: true,
		Rules: []Rule{allow(L7Rule{Method: "GET", Path: "/public/**"})}}
	return pol(map[string]*NetworkPolicy{"api": entry(nil, api), "pub": entry(nil, pub)})
}

// DenySpellings are paths a deny of GET /admin/** or GET /a/secret must
// close, each read as the denied resource by some common server.
var DenySpellings = []string{
	"/admin/keys",
	"/admin;jsessionid=x/keys", // Tomcat, Jetty, Spring strip ;parameters
	"/admin;/keys",
	"/a/;/secret", // ;parameter-only segment: /a//secret → /a/secret
	"/a;x/secret;y",
	"/public/..;/admin/keys", // ..;  is .. once the parameter is stripped
	"/public/.;x/../admin/keys",
	"/ADMIN/keys", // ASP.NET and Express route case-insensitively
	"/Admin/Keys",
	"/%41dmin/keys",
	"/A/SECRET",
	"/admin%2e/keys", // IIS drops trailing dots; Spring's suffix match
	"/admin./keys",
	"/a/secret%2e",
	"/a/secret.",
	"/a/secret/",
	"/admin%3Bx/keys", // a server that decodes before stripping parameters
	"/a/secret%3Bjsessionid=1",
	"/a/secret%3B",
	"/adm%C4%B1n/keys", // ı: .NET's OrdinalIgnoreCase reads I
	"/a/%C5%BFecret",   // ſ reads S
	"/v1/../admin/keys",
	"/v1/%2e%2e/admin/keys",
}

func TestDenySpellings(t *testing.T) {
	p := spellingPolicy()
	for _, path := range DenySpellings {
		for _, method := range []string{"GET", "HEAD", "get"} {
			d := Decide(p, req("api.example.com", 443).http(method, path))
			if d.Allow {
				t.Errorf("%s %s allowed (%s): a deny rule must close every spelling", method, path, d.Reason)
			}
		}
	}
	// The deny rules stay rules on their method and their resource.
	for _, path := range []string{"/administrator/keys", "/a/secrets", "/a/secret2", "/a/b/secret", "/admin%25/keys", "/admin.x/keys", "/b/secret"} {
		if d := Decide(p, req("api.example.com", 443).http("GET", path)); !d.Allow {
			t.Errorf("GET %s denied (%s), want allowed", path, d.Reason)
		}
	}
	if d := Decide(p, req("api.example.com", 443).http("POST", "/ADMIN/keys")); !d.Allow {
		t.Errorf("POST /ADMIN/keys denied (%s): the deny is on GET", d.Reason)
	}
}

func TestAllowStaysExact(t *testing.T) {
	p := spellingPolicy()
	for _, tc := range []struct {
		path  string
		allow bool
	}{
		{"/public/x", true},
		{"/public/x;jsessionid=1", true}, // forwarded as /public/x
		{"/public/a%2Fb", true},
		{"/PUBLIC/x", false},
		{"/Public/x", false},
		{"/public./x", false},
		{"/publi%43/x", false},
		{"/public%3Bx/y", false},
		// Residual dot segments behind an encoded slash are refused.
		{"/public/..%2fsecret", false},
		{"/public/..%2F..%2Fsecret", false},
		{"/public/.%2fsecret", false},
		{"/public/..%5Csecret", false},
		{"/public/..%3Bx/secret", false},
	} {
		d := Decide(p, req("pub.example.com", 443).http("GET", tc.path))
		if d.Allow != tc.allow {
			t.Errorf("GET %s: allow = %v (%s), want %v", tc.path, d.Allow, d.Reason, tc.allow)
		}
	}
}

// HEAD is allowed where GET is, as OpenShell's method_matches allows it.
func TestHeadFollowsGet(t *testing.T) {
	ep := &Endpoint{Host: "api.example.com", Port: 443, Protocol: ProtocolREST,
		Rules: []Rule{allow(L7Rule{Method: "GET", Path: "/v1/**"}), allow(L7Rule{Method: "POST", Path: "/v2/**"})}}
	p := pol(map[string]*NetworkPolicy{"api": entry(nil, ep)})
	runDecide(t, []decideCase{
		{"HEAD where GET is allowed", p, req("api.example.com", 443).http("HEAD", "/v1/x"), want{allow: true, rule: "rules[0]"}},
		{"head where GET is allowed", p, req("api.example.com", 443).http("head", "/v1/x"), want{allow: true, rule: "rules[0]"}},
		{"HEAD where only POST is", p, req("api.example.com", 443).http("HEAD", "/v2/x"), want{}},
		{"GET does not grant POST", p, req("api.example.com", 443).http("POST", "/v1/x"), want{}},
	})
}

func TestMatchDenyPath(t *testing.T) {
	for _, tt := range []struct {
		pattern, s string
		want       bool
	}{
		{"/admin/**", "/ADMIN/x", true},
		{"/admin", "/admin.", true},
		{"/admin", "/admin..", true},
		{"/admin", "/admin.json", false},
		{"/a./b", "/a./b", true}, // the exact reading stays
		{"/a.", "/a", false},
		{"/..../x", "/..../x", true},
		{"/[a-c]dmin", "/Bdmin", true},
		{"/[!a]dmin", "/Admin", true}, // some spelling of it matches: deny
		{"/x/*", "/X/Y/Z", true},      // OpenShell's * crossing /, folded too
		{"/a/secret", "/a/secret%3Bx", true},
		{"/a/secret", "/a/%3Bx/secret", true},
		{"/a/secret", "/a/secret%3B/", true},
		{"/a%3Bb", "/a%3Bb", true},
		{"/%C5%BF", "/%C5%BF", true},
		{"/s", "/%C5%BF", true},
		{"/k", "/%E2%84%AA", true},
		{"/admin", "/x", false},
		{"/admin/**", "/admin%2Fkeys", true},
		{"/admin/**", "/admin%20./keys", true},
		{"/a b", "/a%20b", false}, // not canonical: the glob names the escape
		{"/x/[", "/x/[", false},
	} {
		if got := MatchDenyPath(tt.pattern, tt.s); got != tt.want {
			t.Errorf("MatchDenyPath(%q, %q) = %v, want %v", tt.pattern, tt.s, got, tt.want)
		}
	}
}

// Under allow_encoded_slash a deny also holds for the reading of a server
// that decodes encoded slashes before routing.
func TestDenyEncodedSlashReading(t *testing.T) {
	ep := &Endpoint{Host: "api.example.com", Port: 443, Protocol: ProtocolREST, Access: AccessFull, AllowEncodedSlash: true,
		DenyRules: []*L7Rule{{Method: "GET", Path: "/admin/**"}, {Method: "GET", Path: "/a/secret"}}}
	p := pol(map[string]*NetworkPolicy{"api": entry(nil, ep)})
	for _, path := range []string{"/admin%2Fkeys", "/a%2Fsecret", "/a%2F%2Fsecret", "/a/%2Fsecret", "/%2Fadmin", "/A%2FSECRET.", "/a%5Csecret"} {
		if d := Decide(p, req("api.example.com", 443).http("GET", path)); d.Allow {
			t.Errorf("GET %s allowed (%s)", path, d.Reason)
		}
	}
	if d := Decide(p, req("api.example.com", 443).http("GET", "/repos/a%2Fb")); !d.Allow {
		t.Errorf("GET /repos/a%%2Fb denied (%s)", d.Reason)
	}
}

// Issue 11 follow-up: OpenShell reads `{a,b}` in a path glob as
// alternatives (Rego glob.match), so `deny /{admin,internal}/**` closes
// both trees there; read literally here it denied nothing. Deny path
// globs now expand braces; allow path globs read them literally (failing
// closed) with a warning.
func TestDenyPathBraces(t *testing.T) {
	api := &Endpoint{Host: "api.example.com", Port: 443, Protocol: ProtocolREST, Access: AccessFull,
		DenyRules: []*L7Rule{{Method: "GET", Path: "/{admin,internal}/**"}, {Method: "*", Path: "/v1/{a,b{c,d}}/x"}}}
	p := pol(map[string]*NetworkPolicy{"api": entry(nil, api)})
	if _, err := Validate(p); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	for _, path := range []string{"/admin/keys", "/internal", "/internal/x", "/INTERNAL/x", "/internal./x",
		"/internal;x/y", "/v1/a/x", "/v1/bc/x", "/v1/BD/x"} {
		r := Request{Binary: "/usr/bin/curl", Host: "api.example.com", Port: 443, HTTPMethod: "GET", Path: path}
		if d := Decide(p, r); d.Allow {
			t.Errorf("GET %s allowed past deny %v: %+v", path, api.DenyRules, d)
		}
	}
	for _, path := range []string{"/public/x", "/v1/b/x", "/v1/bcd/x", "/adminx/y"} {
		r := Request{Binary: "/usr/bin/curl", Host: "api.example.com", Port: 443, HTTPMethod: "GET", Path: path}
		if d := Decide(p, r); !d.Allow {
			t.Errorf("GET %s denied: %+v", path, d)
		}
	}
}

func TestPathBracesValidation(t *testing.T) {
	many := "/" + strings.Repeat("{a,b}", 9) // 512 alternatives
	deep := "/" + strings.Repeat("{a,", 34) + strings.Repeat("}", 34)
	for _, tc := range []struct {
		glob, want string
	}{
		{"/{admin,internal", "unclosed {"},
		{"/admin}", "unmatched }"},
		{many, "more than 256 brace alternatives"},
		{deep, "nested too deep"},
		{"/x/{a,**b}", "alternative"},
	} {
		api := &Endpoint{Host: "api.example.com", Port: 443, Protocol: ProtocolREST, Access: AccessFull,
			DenyRules: []*L7Rule{{Method: "GET", Path: tc.glob}}}
		_, err := Validate(pol(map[string]*NetworkPolicy{"api": entry(nil, api)}))
		if err == nil || !strings.Contains(err.Error(), "deny_rules[0].path") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("deny path %q: error %v, want one at deny_rules[0].path saying %q", tc.glob, err, tc.want)
		}
	}
	// An allow glob with braces is read literally: valid, with a warning,
	// and it allows neither alternative.
	api := &Endpoint{Host: "api.example.com", Port: 443, Protocol: ProtocolREST,
		Rules: []Rule{allow(L7Rule{Method: "GET", Path: "/{a,b}/**"})}}
	p := pol(map[string]*NetworkPolicy{"api": entry(nil, api)})
	warns, err := Validate(p)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, w := range warns {
		found = found || strings.Contains(w.Path, "rules[0].allow.path") && strings.Contains(w.Message, "literally")
	}
	if !found {
		t.Errorf("no warning about braces in an allow glob: %v", warns)
	}
	for _, path := range []string{"/a/x", "/b/x"} {
		if d := Decide(p, Request{Binary: "/usr/bin/curl", Host: "api.example.com", Port: 443, HTTPMethod: "GET", Path: path}); d.Allow {
			t.Errorf("allow /{a,b}/** allowed %s", path)
		}
	}
}
