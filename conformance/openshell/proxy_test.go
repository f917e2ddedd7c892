package openshell

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/portcullis-dev/portcullis/dataplane"
	"github.com/portcullis-dev/portcullis/dataplane/dataplanetest"
	"github.com/portcullis-dev/portcullis/internal/ca"
	"github.com/portcullis-dev/portcullis/policy"
)

// Proxy cases run a raw HTTP/1.1 request through the real proxy
// (dataplane.New + Agent.Run on 127.0.0.1:0, loopback allowed for the test) to
// a real upstream, and judge by what the upstream received: a request
// OpenShell forwards must reach it (with the path OpenShell forwards), a
// request OpenShell refuses must not.

type proxyCase struct {
	Source string
	Policy string // YAML; PORT is the upstream's port; "" = restProxyPolicy
	// Raw is the request as sent to the proxy; HOST is api.example.com:PORT.
	Raw string

	OpenShell verdict // allow = forwarded, deny = refused and not forwarded
	Forwarded string  // with allow: the request line's target the upstream must see ("" = not checked)

	Divergence string
	Ours       verdict
}

const restProxyPolicy = `
version: 1
network_policies:
  api:
    name: api
    endpoints:
      - host: api.example.com
        port: PORT
        protocol: rest
        enforcement: enforce
        access: full
    binaries: []
`

const encodedSlashProxyPolicy = `
version: 1
network_policies:
  api:
    name: api
    endpoints:
      - host: api.example.com
        port: PORT
        protocol: rest
        enforcement: enforce
        access: full
        allow_encoded_slash: true
    binaries: []
`

func get(target string) string {
	return "GET http://HOST" + target + " HTTP/1.1\r\nHost: HOST\r\nConnection: close\r\n\r\n"
}

func post(headers, body string) string {
	return "POST http://HOST/api HTTP/1.1\r\nHost: HOST\r\nConnection: close\r\n" + headers + "\r\n" + body
}

var restProxyCases = []proxyCase{
	{Source: restRS + "reject_dual_content_length_and_transfer_encoding", Raw: post("Content-Length: 5\r\nTransfer-Encoding: chunked\r\n", "0\r\n\r\n"), OpenShell: deny},
	{Source: restRS + "reject_dual_transfer_encoding_and_content_length", Raw: post("Transfer-Encoding: chunked\r\nContent-Length: 5\r\n", "0\r\n\r\n"), OpenShell: deny},
	{Source: restRS + "reject_differing_duplicate_content_length", Raw: post("Content-Length: 0\r\nContent-Length: 50\r\n", ""), OpenShell: deny},
	{Source: restRS + "accept_identical_duplicate_content_length", Raw: post("Content-Length: 2\r\nContent-Length: 2\r\n", "ok"), OpenShell: allow},
	{Source: restRS + "reject_non_numeric_content_length", Raw: post("Content-Length: abc\r\n", ""), OpenShell: deny},
	{Source: restRS + "reject_valid_then_invalid_content_length", Raw: post("Content-Length: 2\r\nContent-Length: abc\r\n", "ok"), OpenShell: deny},
	{Source: restRS + "reject_unsupported_transfer_encoding_sequences", Raw: post("Transfer-Encoding: gzip, chunked\r\n", "0\r\n\r\n"), OpenShell: deny},
	{Source: restRS + "reject_unsupported_transfer_encoding_sequences", Raw: post("Transfer-Encoding: chunked, chunked\r\n", "0\r\n\r\n"), OpenShell: deny},
	{Source: restRS + "reject_unsupported_transfer_encoding_sequences", Raw: post("Transfer-Encoding: chunkedx\r\n", "0\r\n\r\n"), OpenShell: deny},
	{Source: restRS + "reject_multiple_chunked_transfer_encoding_fields", Raw: post("Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n", "0\r\n\r\n"), OpenShell: deny},
	{Source: restRS + "reject_content_length_with_unsupported_transfer_encoding", Raw: post("Content-Length: 4\r\nTransfer-Encoding: gzip\r\n", "abcd"), OpenShell: deny},
	{Source: restRS + "reject_bare_lf_in_headers", Raw: "GET http://HOST/api HTTP/1.1\r\nX-Injected: value\nEvil: header\r\nHost: HOST\r\nConnection: close\r\n\r\n", OpenShell: deny},
	{Source: restRS + "reject_invalid_utf8_in_headers", Raw: "GET http://HOST/api HTTP/1.1\r\nHost: HOST\r\nX-Bad: \xc0\xaf\r\nConnection: close\r\n\r\n", OpenShell: deny},
	{Source: restRS + "reject_malformed_header_fields_before_forwarding", Raw: "GET http://HOST/api HTTP/1.1\r\nX-Test: first\r\n continued\r\nHost: HOST\r\nConnection: close\r\n\r\n", OpenShell: deny},
	{Source: restRS + "reject_malformed_header_fields_before_forwarding", Raw: "GET http://HOST/api HTTP/1.1\r\nX-Test value\r\nHost: HOST\r\nConnection: close\r\n\r\n", OpenShell: deny},
	{Source: restRS + "reject_malformed_header_fields_before_forwarding", Raw: "GET http://HOST/api HTTP/1.1\r\nX-Test : value\r\nHost: HOST\r\nConnection: close\r\n\r\n", OpenShell: deny},
	{Source: restRS + "reject_malformed_header_fields_before_forwarding", Raw: "GET http://HOST/api HTTP/1.1\r\nX@Test: value\r\nHost: HOST\r\nConnection: close\r\n\r\n", OpenShell: deny},
	{Source: restRS + "reject_invalid_http_version", Raw: "GET http://HOST/api JUNK/9.9\r\nHost: HOST\r\nConnection: close\r\n\r\n", OpenShell: deny},
	{Source: restRS + "parse_http_request_canonicalizes_target_and_rewrites_raw_header", Raw: get("/public/../secret"), OpenShell: allow, Forwarded: "/secret"},
	{Source: restRS + "parse_http_request_rejects_absolute_authority_mismatched_with_host", Raw: "GET http://attacker.example.test/v1 HTTP/1.1\r\nHost: HOST\r\nConnection: close\r\n\r\n", OpenShell: deny},
	{Source: restRS + "parse_http_request_keeps_embedded_url_in_origin_form_path", Raw: get("/fetch/http://example.test?next=http://other.test"), OpenShell: allow, Forwarded: "/fetch/http:/example.test?next=http://other.test"},
	{Source: restRS + "parse_http_request_canonicalization_preserves_query_string", Raw: get("/public/../v1/list?limit=10&sort=asc"), OpenShell: allow, Forwarded: "/v1/list?limit=10&sort=asc"},
	{Source: restRS + "parse_http_request_leaves_canonical_input_byte_for_byte", Raw: get("/api/v1/users"), OpenShell: allow, Forwarded: "/api/v1/users"},
	{Source: restRS + "parse_http_request_rejects_traversal_above_root", Raw: get("/.."), OpenShell: deny,
		Divergence: divAboveRoot, Ours: allow},
	{Source: restRS + "parse_http_request_accepts_encoded_slash_when_endpoint_opts_in", Policy: encodedSlashProxyPolicy, Raw: get("/api/v4/projects/group%2Fproject"), OpenShell: allow, Forwarded: "/api/v4/projects/group%2Fproject"},
	{Source: restRS + "parse_http_request_rejects_encoded_slash_by_default", Raw: get("/api/v4/projects/group%2Fproject"), OpenShell: deny},
	{Source: restRS + "parse_http_request_preserves_http_10_version_on_rewrite", Raw: "GET http://HOST/a/./b HTTP/1.0\r\nHost: HOST\r\n\r\n", OpenShell: allow, Forwarded: "/a/b"},
	{Source: restRS + "parse_http_request_splits_path_and_query_params", Raw: get("/download?slug=my%2Fskill&tag=foo&tag=bar"), OpenShell: allow, Forwarded: "/download?slug=my%2Fskill&tag=foo&tag=bar"},
	{Source: pathRS + "absolute_form_strips_authority", Raw: get("/a/../b"), OpenShell: allow, Forwarded: "/b"},
	{Source: pathRS + "regression_percent_encoded_slash_in_dotdot_rejected", Raw: get("/public/%2E%2E%2Fsecret"), OpenShell: deny},
	{Source: pathRS + "non_ascii_raw_byte_rejected", Raw: get("/a\u00e9"), OpenShell: deny},
	{Source: pathRS + "percent_encoded_non_ascii_bytes_round_trip", Raw: get("/users/caf%C3%A9"), OpenShell: allow, Forwarded: "/users/caf%C3%A9"},
}

func TestRESTProxy(t *testing.T) { runProxy(t, restProxyCases) }

// Forward-proxy request handling from proxy.rs.
var forwardProxyCases = []proxyCase{
	{Source: proxyRS + "malformed_forward_headers_are_rejected_before_route_or_middleware_dispatch", Raw: "GET http://HOST/ HTTP/1.1\r\nHost: HOST\r\nX-Guard: before\x00after\r\nConnection: close\r\n\r\n", OpenShell: deny},
	{Source: proxyRS + "malformed_request_lines_are_rejected_before_connect_or_forward_dispatch", Raw: "GET http://HOST/ HTTP/1.1 extra\r\nHost: HOST\r\nConnection: close\r\n\r\n", OpenShell: deny},
	{Source: proxyRS + "unsupported_forward_scheme_is_rejected_before_policy_or_middleware_dispatch", Raw: "GET ftp://HOST/resource HTTP/1.1\r\nHost: HOST\r\nConnection: close\r\n\r\n", OpenShell: deny},
	{Source: proxyRS + "test_forward_relay_rejects_cl_te_smuggling_before_upstream_write", Raw: post("Content-Length: 4\r\nTransfer-Encoding: chunked\r\n", "0\r\n\r\n"), OpenShell: deny},
	{Source: proxyRS + "h2c_upgrade_request_on_l7_relay_is_denied_without_upstream_write", Raw: "GET http://HOST/allowed HTTP/1.1\r\nHost: HOST\r\nUpgrade: h2c\r\nConnection: close, Upgrade\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n\r\n", OpenShell: deny},
	{Source: proxyRS + "test_rewrite_forward_request_uses_canonical_path_on_the_wire", Raw: get("/public/../secret"), OpenShell: allow, Forwarded: "/secret"},
	{Source: proxyRS + "test_rewrite_forward_request_preserves_canonical_query_on_the_wire", Raw: get("/public/../graphql?query=query+Viewer+%7B+viewer+%7B+login+%7D+%7D"), OpenShell: allow, Forwarded: "/graphql?query=query+Viewer+%7B+viewer+%7B+login+%7D+%7D"},
}

func TestForwardProxy(t *testing.T) { runProxy(t, forwardProxyCases) }

// upstream is a plain HTTP server on loopback recording the request
// targets it receives.
type upstream struct {
	port int
	mu   sync.Mutex
	seen []string
}

func (u *upstream) targets() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.seen...)
}

func startUpstream(t *testing.T) *upstream {
	t.Helper()
	u := &upstream{}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		u.mu.Lock()
		u.seen = append(u.seen, r.RequestURI)
		u.mu.Unlock()
		fmt.Fprint(w, "ok")
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u.port = ln.Addr().(*net.TCPAddr).Port
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return u
}

// startProxy runs the real proxy with doc, resolving api.example.com to
// loopback (allowed for tests only).
func startProxy(t *testing.T, doc string, port int) string {
	t.Helper()
	proxyCA, err := ca.LoadOrCreate(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	resolve := func(_ context.Context, host string) ([]netip.Addr, error) {
		if strings.EqualFold(strings.TrimSuffix(host, "."), "api.example.com") {
			return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
		}
		return nil, fmt.Errorf("no such host %s", host)
	}
	p, err := dataplane.New(dataplane.Config{DevAllowLoopback: true, Resolve: resolve, Logger: slog.New(slog.DiscardHandler), CA: proxyCA})
	if err != nil {
		t.Fatal(err)
	}
	pol, _, err := policy.Parse([]byte(strings.ReplaceAll(doc, "PORT", strconv.Itoa(port))))
	if err != nil {
		t.Fatalf("policy: %v", err)
	}
	if err := p.SetPolicy(pol, "v1"); err != nil {
		t.Fatal(err)
	}
	return dataplanetest.Serve(t, p).Host
}

// send writes raw and returns the response status (0 when the proxy
// closed the connection without one).
func send(t *testing.T, proxy, raw string) int {
	t.Helper()
	conn, err := net.Dial("tcp", proxy)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(conn, raw); err != nil {
		return 0
	}
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return 0
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res.StatusCode
}

func runProxy(t *testing.T, cases []proxyCase) {
	t.Helper()
	seen := map[string]int{}
	for _, c := range cases {
		seen[c.Source]++
		t.Run(fmt.Sprintf("%s#%d", c.Source, seen[c.Source]), func(t *testing.T) {
			if (c.Divergence == "") != (c.Ours == 0) || c.OpenShell == 0 {
				t.Fatalf("%s: malformed case", c.Source)
			}
			want := c.OpenShell
			if c.Divergence != "" {
				want = c.Ours
			}
			up := startUpstream(t)
			doc := c.Policy
			if doc == "" {
				doc = restProxyPolicy
			}
			proxy := startProxy(t, doc, up.port)
			host := "api.example.com:" + strconv.Itoa(up.port)
			status := send(t, proxy, strings.ReplaceAll(c.Raw, "HOST", host))
			got := up.targets()
			switch {
			case want == deny && len(got) > 0:
				t.Errorf("%s\nOpenShell refuses this request (divergence %q); we forwarded it: upstream saw %q (status %d)", c.Source, c.Divergence, got, status)
			case want == deny && status/100 == 2:
				t.Errorf("%s\nOpenShell refuses this request; we answered %d", c.Source, status)
			case want == allow && len(got) == 0:
				t.Errorf("%s\nOpenShell forwards this request (divergence %q); we refused it with status %d", c.Source, c.Divergence, status)
			case want == allow && c.Forwarded != "" && got[0] != c.Forwarded:
				t.Errorf("%s\nOpenShell forwards %q; the upstream saw %q", c.Source, c.Forwarded, got[0])
			}
		})
	}
}

// CONNECT targets (proxy.rs parse_target): each CONNECT goes to the real
// proxy with an L4 endpoint for api.example.com; when the proxy answers
// 200, a GET is sent through the tunnel. OpenShell accepts the target =
// the GET reaches the upstream.

const l4ProxyPolicy = `
version: 1
network_policies:
  api:
    name: api
    endpoints:
      - { host: api.example.com, port: PORT }
    binaries: []
`

type connectCase struct {
	Source    string
	Target    string // CONNECT authority; PORT is the upstream's port
	OpenShell verdict
}

var connectCases = []connectCase{
	{Source: proxyRS + "test_parse_target_valid_baseline", Target: "api.example.com:PORT", OpenShell: allow},
	{Source: proxyRS + "test_parse_target_preserves_case", Target: "API.EXAMPLE.COM:PORT", OpenShell: allow},
	{Source: proxyRS + "test_parse_target_accepts_empty_host", Target: ":PORT", OpenShell: deny},
	{Source: proxyRS + "test_parse_target_nul_byte_passes_through", Target: "evil.com\x00.api.example.com:PORT", OpenShell: deny},
	{Source: proxyRS + "test_parse_target_control_char_passes_through", Target: "evil\x01.com:PORT", OpenShell: deny},
	{Source: proxyRS + "test_parse_target_percent_encoded_dot_is_literal", Target: "api%2eexample.com:PORT", OpenShell: deny},
	{Source: proxyRS + "test_parse_target_rejects_missing_port_separator", Target: "api.example.com", OpenShell: deny},
	{Source: proxyRS + "test_parse_target_rejects_non_numeric_port", Target: "api.example.com:notaport", OpenShell: deny},
	{Source: proxyRS + "test_parse_target_rejects_port_overflow", Target: "api.example.com:65536", OpenShell: deny},
	{Source: proxyRS + "test_parse_target_extra_colon_fails_port_parse", Target: "api.example.com:PORT:extra", OpenShell: deny},
	{Source: proxyRS + "test_parse_target_backslash_passes_through", Target: "evil.com\\..api.example.com:PORT", OpenShell: deny},
	{Source: proxyRS + "test_parse_target_slash_passes_through", Target: "evil.com/../api.example.com:PORT", OpenShell: deny},
	{Source: proxyRS + "test_parse_target_rejects_malformed_ipv6_brackets", Target: "[::1:PORT", OpenShell: deny},
}

func TestConnect(t *testing.T) {
	for _, c := range connectCases {
		t.Run(c.Source, func(t *testing.T) {
			up := startUpstream(t)
			proxy := startProxy(t, l4ProxyPolicy, up.port)
			target := strings.ReplaceAll(c.Target, "PORT", strconv.Itoa(up.port))
			conn, err := net.Dial("tcp", proxy)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			conn.SetDeadline(time.Now().Add(10 * time.Second))
			fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
			br := bufio.NewReader(conn)
			res, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
			status := 0
			if err == nil {
				status = res.StatusCode
				if status == http.StatusOK {
					fmt.Fprintf(conn, "GET /tunnel HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", target)
					if inner, err := http.ReadResponse(br, nil); err == nil {
						io.Copy(io.Discard, inner.Body)
						inner.Body.Close()
					}
				}
			}
			got := up.targets()
			switch {
			case c.OpenShell == allow && len(got) == 0:
				t.Errorf("%s\nOpenShell accepts CONNECT %q; we answered %d and nothing reached the upstream", c.Source, target, status)
			case c.OpenShell == deny && (len(got) > 0 || status == http.StatusOK):
				t.Errorf("%s\nOpenShell refuses CONNECT %q; we answered %d and the upstream saw %q", c.Source, target, status, got)
			}
		})
	}
}
