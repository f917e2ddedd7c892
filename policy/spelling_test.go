package policy

import "testing"

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
