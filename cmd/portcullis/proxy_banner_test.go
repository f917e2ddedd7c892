package main

import (
	"net"
	"strings"
	"testing"

	"github.com/portcullis-dev/portcullis/dataplane"
)

// A proxy following a gateway with no kept version says it waits for the
// gateway's policy (it applies one moments later), not that it has no
// valid policy; a file-mode proxy without a valid file still says that.
func TestProxyBannerPolicy(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{policyState("", true), "waiting for the gateway's policy (denying until it arrives)"},
		{policyState("3", true), "3"},
		{policyState("", false), "no valid policy: denying everything"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}

// With --transparent-listen the banner says where redirected connections
// are taken, below the proxy's own address.
func TestProxyBannerTransparent(t *testing.T) {
	var ls [2]net.Listener
	for i := range ls {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		ls[i] = ln
	}
	var out strings.Builder
	f := &proxyFlags{policyFile: "policy.yaml", dataDir: "data"}
	f.banner(&environment{stdout: &out}, dataplane.Listeners{Proxy: ls[0], Transparent: ls[1]}, "v1", nil, nil)
	lines := strings.Split(out.String(), "\n")
	if len(lines) < 2 || lines[0] != "Portcullis proxy listening on "+ls[0].Addr().String() || lines[1] != "  transparent: "+ls[1].Addr().String()+" (TCP, and the sandbox's DNS over UDP)" {
		t.Errorf("banner:\n%s", out.String())
	}
}
