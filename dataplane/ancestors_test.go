package dataplane_test

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/portcullis-dev/portcullis/dataplane"
	"github.com/portcullis-dev/portcullis/dataplane/dataplanetest"
	"github.com/portcullis-dev/portcullis/dataplane/identity"
	"github.com/portcullis-dev/portcullis/internal/ca"
	"github.com/portcullis-dev/portcullis/policy"
)

// TestAncestorBinaryThroughProxy: the proxy judges a request by the
// caller's executable and its ancestors (Config.Caller), as OpenShell
// does: python3 run by git reaches what a git rule grants; python3 run by a
// shell does not, and neither does a caller known only by its executable.
func TestAncestorBinaryThroughProxy(t *testing.T) {
	up := startPlainUpstream(t)
	doc := strings.ReplaceAll(`
version: 1
network_policies:
  git:
    endpoints:
      - { host: raw.example.com, port: PORT }
    binaries: [{path: /usr/bin/git}]
`, "PORT", strconv.Itoa(up.port))
	pol, _, err := policy.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	python, git := "/usr/bin/python3", "/usr/bin/git"
	for _, tc := range []struct {
		name   string
		cfg    dataplane.Config
		status int
	}{
		{"python3 under git", dataplane.Config{Caller: func(net.Conn) (identity.Caller, error) {
			return identity.Caller{Binary: python, Ancestors: []string{"/bin/sh", git}}, nil
		}}, 200},
		{"python3 under a shell", dataplane.Config{Caller: func(net.Conn) (identity.Caller, error) {
			return identity.Caller{Binary: python, Ancestors: []string{"/bin/sh"}}, nil
		}}, 403},
		{"an unidentified caller's ancestors", dataplane.Config{Caller: func(net.Conn) (identity.Caller, error) {
			return identity.Caller{Binary: python, Ancestors: []string{git}}, fmt.Errorf("ambiguous")
		}}, 403},
		{"executable only (CallerBinary)", dataplane.Config{CallerBinary: func(net.Conn) (string, error) { return python, nil }}, 403},
	} {
		t.Run(tc.name, func(t *testing.T) {
			proxyCA, err := ca.LoadOrCreate(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			cfg := tc.cfg
			cfg.DevAllowLoopback, cfg.Resolve, cfg.CA = true, fakeDNS, proxyCA
			p := newAgent(t, cfg)
			if err := p.SetPolicy(pol, "v1"); err != nil {
				t.Fatal(err)
			}
			before := len(up.seen())
			res, err := proxied(dataplanetest.Serve(t, p)).Get(fmt.Sprintf("http://raw.example.com:%d/x", up.port))
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if res.StatusCode != tc.status {
				t.Fatalf("status %d, want %d; decisions %+v", res.StatusCode, tc.status, p.Decisions())
			}
			if forwarded := len(up.seen()) - before; (tc.status == 200) != (forwarded == 1) || forwarded > 1 {
				t.Errorf("forwarded %d requests upstream", forwarded)
			}
		})
	}
}
