//go:build linux

package dataplane_test

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/portcullis-dev/portcullis/dataplane/dataplanetest"
	"github.com/portcullis-dev/portcullis/dataplane/decision"
)

// TestTransparentWithNAT is the transparent listener behind the kernel's
// NAT instead of the tests' seam: in a network namespace of the test's
// own (root, nft), TCP to the upstream's port is redirected to the
// listener; the original destination is the socket's (SO_ORIGINAL_DST),
// and the callers, whose sockets are in that namespace, are named there
// (identity.FollowRedirected): a binary rule allows one executable and
// denies another.
func TestTransparentWithNAT(t *testing.T) {
	nft, err := exec.LookPath("nft")
	if err != nil {
		t.Skipf("nft not found: %v", err)
	}
	a, b := buildCallerPair(t)
	up := startPlainUpstream(t) // in the test's namespace, where the proxy dials
	doc := strings.NewReplacer("PORT", strconv.Itoa(up.port), "EXE", b).Replace(`
version: 1
network_policies:
  b_only:
    endpoints:
      - { host: api.example.com, port: PORT, protocol: rest, enforcement: enforce, access: read-only }
    binaries: [{path: EXE}]
`)
	// This goroutine's thread (and what it starts) is in the new
	// namespace: never unlocked, it ends with the test.
	runtime.LockOSThread()
	if err := syscall.Unshare(syscall.CLONE_NEWNET); err != nil {
		t.Skipf("a network namespace of the test's own needs root: %v", err)
	}
	setLoopbackUp(t)
	records := make(chan decision.Record, 8)
	cfg := plainConfig(t, nil)
	cfg.Names = nameBook{netip.MustParseAddr("127.0.0.1"): {"api.example.com"}}
	cfg.OnRecord = func(r decision.Record) { records <- r }
	agent := newAgent(t, cfg)
	setPolicy(t, agent, doc, "v1")
	_, listener := dataplanetest.ServeTransparent(t, agent) // in the new namespace
	_, port, _ := net.SplitHostPort(listener)
	rules := fmt.Sprintf("table ip portcullis_test {\n chain out {\n  type nat hook output priority -100;\n  tcp dport %d redirect to :%s\n }\n}\n", up.port, port)
	cmd := exec.Command(nft, "-f", "-")
	cmd.Stdin = strings.NewReader(rules)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Skipf("nft: %v\n%s", err, out)
	}
	t.Setenv("CALLER_REQUEST", fmt.Sprintf("GET /v1/x HTTP/1.1\r\nHost: api.example.com:%d\r\nConnection: close\r\n\r\n", up.port))
	dest := fmt.Sprintf("127.0.0.1:%d", up.port) // where the callers connect

	for _, tc := range []struct {
		exe, decision, answer string
	}{{b, decision.Allow, "got HTTP/1.1 200 OK"}, {a, decision.Deny, "got HTTP/1.1 403 Forbidden"}} {
		c := startHelper(t, tc.exe, dest)
		select {
		case r := <-records:
			if r.Binary != tc.exe || r.Decision != tc.decision || r.Host != "api.example.com" || r.Path != "/v1/x" {
				t.Errorf("recorded %s of %s %s for %q (%s); want %s for %s", r.Decision, r.Host, r.Path, r.Binary, r.Reason, tc.decision, tc.exe)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("no decision for %s's request", tc.exe)
		}
		c.expect(t, tc.answer)
	}
	if seen := up.seen(); len(seen) != 1 {
		t.Errorf("the upstream saw %q; want b's request alone", seen)
	}
}

// setLoopbackUp sets lo up in the calling thread's network namespace.
func setLoopbackUp(t *testing.T) {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_DGRAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	var ifr [40]byte // struct ifreq: the name, then ifr_flags
	copy(ifr[:], "lo")
	binary.NativeEndian.PutUint16(ifr[16:], syscall.IFF_UP|syscall.IFF_LOOPBACK|syscall.IFF_RUNNING)
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), syscall.SIOCSIFFLAGS, uintptr(unsafe.Pointer(&ifr[0]))); errno != 0 {
		t.Fatalf("set lo up: %v", errno)
	}
}
