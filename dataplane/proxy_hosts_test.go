package dataplane_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/portcullis-dev/portcullis/dataplane"
	"github.com/portcullis-dev/portcullis/internal/ca"
)

// A CONNECT or absolute-URI host that is neither a host name nor an IP
// literal (a '*', NUL, space, '/' …) is refused before policy: it is not
// matched against wildcard hosts, not resolved, not forwarded, and the
// resolver is never asked.
func TestGlobHostRefusedBeforePolicy(t *testing.T) {
	up := startPlainUpstream(t)
	var mu sync.Mutex
	var asked []string
	resolve := func(_ context.Context, host string) ([]netip.Addr, error) {
		mu.Lock()
		asked = append(asked, host)
		mu.Unlock()
		return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
	}
	proxyCA, err := ca.LoadOrCreate(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	doc := "version: 1\nnetwork_policies:\n  wild:\n    endpoints: [{host: '*.wild.example.com', port: PORT}]\n    binaries: []\n"
	_, pu := startAgent(t, dataplane.Config{DevAllowLoopback: true, Resolve: resolve, CA: proxyCA}, strings.ReplaceAll(doc, "PORT", strconv.Itoa(up.port)), "v1")

	send := func(request string) int {
		t.Helper()
		conn, err := net.Dial("tcp", pu.Host)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		fmt.Fprint(conn, request)
		res, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("%q: %v", request, err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	for _, host := range []string{"*.wild.example.com", "a*.wild.example.com", "a%00.wild.example.com"} {
		authority := net.JoinHostPort(host, strconv.Itoa(up.port))
		if code := send(fmt.Sprintf("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", authority, authority)); code/100 != 4 {
			t.Errorf("CONNECT %s = %d, want a 4xx refusal", authority, code)
		}
		if code := send(fmt.Sprintf("GET http://%s/x HTTP/1.1\r\nHost: %s\r\n\r\n", authority, authority)); code/100 != 4 {
			t.Errorf("GET http://%s/x = %d, want a 4xx refusal", authority, code)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(asked) != 0 || len(up.seen()) != 0 {
		t.Fatalf("refused hosts reached the resolver %q or the upstream %q", asked, up.seen())
	}
	// A plain name under the wildcard still goes through.
	authority := net.JoinHostPort("a.wild.example.com", strconv.Itoa(up.port))
	mu.Unlock()
	code := send(fmt.Sprintf("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", authority, authority))
	mu.Lock()
	if code != http.StatusOK {
		t.Fatalf("CONNECT %s = %d, want 200", authority, code)
	}
}
