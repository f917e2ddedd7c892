package dataplane_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
)

// spellingPolicy denies GET /admin/** and GET /a/secret on an endpoint
// that allows everything else, and allows only GET /public/** (and so
// HEAD) on an allow_encoded_slash endpoint.
const spellingPolicy = `
version: 1
network_policies:
  api:
    endpoints:
      - host: api.example.com
        port: PORT
        protocol: rest
        enforcement: enforce
        access: full
        deny_rules:
          - { method: GET, path: "/admin/**" }
          - { method: GET, path: "/a/secret" }
      - host: raw.example.com
        port: PORT
        protocol: rest
        enforcement: enforce
        allow_encoded_slash: true
        rules:
          - allow: { method: GET, path: "/public/**" }
    binaries: []
`

// sendRaw writes one request line as given to the proxy (no client
// rewrites it) and returns the status.
func sendRaw(t *testing.T, proxyAddr, method, target, host string) int {
	t.Helper()
	conn, err := net.Dial("tcp", proxyAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "%s %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", method, target, host)
	res, err := http.ReadResponse(bufio.NewReader(conn), &http.Request{Method: method})
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res.StatusCode
}

// Issue 11, finding 3, through the real proxy: no spelling of a denied
// path reaches the upstream; allow rules stay exact; what is forwarded is
// the canonical path, with ;parameters stripped and %3B kept encoded.
func TestDenySpellingsThroughProxy(t *testing.T) {
	up := startPlainUpstream(t)
	_, pu := plainProxy(t, spellingPolicy, up.port, nil)
	api := fmt.Sprintf("api.example.com:%d", up.port)
	raw := fmt.Sprintf("raw.example.com:%d", up.port)

	for _, path := range []string{
		"/admin;jsessionid=x/keys", "/admin;/keys", "/a/;/secret", "/a;x/secret;y", "/public/..;/admin/keys",
		"/ADMIN/keys", "/Admin/Keys", "/%41dmin/keys", "/A/SECRET", "/admin%2e/keys", "/admin./keys",
		"/a/secret%2e", "/a/secret.", "/admin%3Bx/keys", "/a/secret%3Bjsessionid=1", "/adm%C4%B1n/keys",
	} {
		for _, method := range []string{"GET", "HEAD"} {
			if code := sendRaw(t, pu.Host, method, "http://"+api+path, api); code != http.StatusForbidden {
				t.Errorf("%s %s = %d, want 403", method, path, code)
			}
		}
	}
	for _, path := range []string{
		"/PUBLIC/x", "/Public/x", "/public./x", "/public%3Bx/y",
		"/public/..%2fsecret", "/public/..%2F..%2Fsecret", "/public/.%2fsecret", "/public/..%5Csecret", "/public/..%3Bx/secret",
	} {
		if code := sendRaw(t, pu.Host, "GET", "http://"+raw+path, raw); code != http.StatusForbidden {
			t.Errorf("GET raw %s = %d, want 403", path, code)
		}
	}
	if got := up.seen(); len(got) != 0 {
		t.Fatalf("the upstream received denied requests: %q", got)
	}

	// Allowed requests are forwarded canonical: parameters stripped, an
	// encoded ; kept encoded, HEAD where GET is allowed.
	for _, tc := range []struct{ method, host, path, forwarded string }{
		{"GET", api, "/files/a%3Bb", "/files/a%3Bb"},
		{"GET", api, "/files/a%3bb", "/files/a%3Bb"},
		{"GET", api, "/files;v=1/x;y", "/files/x"},
		{"GET", raw, "/public/x;jsessionid=1", "/public/x"},
		{"GET", raw, "/public/a%2Fb", "/public/a%2Fb"},
		{"HEAD", raw, "/public/x", "/public/x"},
	} {
		n := len(up.seen())
		if code := sendRaw(t, pu.Host, tc.method, "http://"+tc.host+tc.path, tc.host); code != http.StatusOK {
			t.Errorf("%s %s%s = %d, want 200", tc.method, tc.host, tc.path, code)
			continue
		}
		got := up.seen()
		if want := tc.method + " " + tc.forwarded + " host=" + tc.host; len(got) != n+1 || got[n] != want {
			t.Errorf("%s %s forwarded as %q, want %q", tc.method, tc.path, got[n:], want)
		}
	}
}

// Issue 11 follow-up, through the real proxy: a deny path glob's `{a,b}`
// alternatives are each denied, as OpenShell denies them, and nothing
// reaches the upstream.
func TestDenyBracesThroughProxy(t *testing.T) {
	up := startPlainUpstream(t)
	_, pu := plainProxy(t, `
version: 1
network_policies:
  api:
    endpoints:
      - host: api.example.com
        port: PORT
        protocol: rest
        enforcement: enforce
        access: full
        deny_rules:
          - { method: GET, path: "/{admin,internal}/**" }
    binaries: []
`, up.port, nil)
	api := fmt.Sprintf("api.example.com:%d", up.port)
	for _, path := range []string{"/admin/keys", "/internal/keys", "/INTERNAL/keys", "/internal;x/keys", "/internal"} {
		if code := sendRaw(t, pu.Host, "GET", "http://"+api+path, api); code != http.StatusForbidden {
			t.Errorf("GET %s = %d, want 403", path, code)
		}
	}
	if got := up.seen(); len(got) != 0 {
		t.Fatalf("the upstream received denied requests: %q", got)
	}
	if code := sendRaw(t, pu.Host, "GET", "http://"+api+"/public/x", api); code != http.StatusOK {
		t.Errorf("GET /public/x = %d, want 200", code)
	}
}
