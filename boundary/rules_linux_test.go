package boundary

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/vishvananda/netlink"
)

// TestRulesApplied applies what --print-rules prints, with nft, in a
// namespace of the test's own (the "sidecar" role, started in a new
// network namespace), as a container runtime's init step would, with a
// fake proxy inside, and probes as the agent (nobody) and as the proxy's
// user: the agent's TCP, to anywhere and to a loopback resolver's port 53,
// reaches the proxy with its original destination, its DNS (a loopback
// stub's included) the proxy's resolver, other UDP is dropped; the
// proxy's own traffic is not redirected.
func TestRulesApplied(t *testing.T) {
	needRoot(t)
	if _, err := exec.LookPath("nft"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("nft is needed (CI=true: .ci/run installs nftables): %v", err)
		}
		t.Skipf("nft not found: %v", err)
	}
	cmd := role(t, "sidecar")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("sidecar: %v\n%s", err, out)
	}
	got := string(out)
	for _, want := range []string{
		"agent: tcp 203.0.113.5:80 -> proxy saw 203.0.113.5:80",
		"agent: tcp 127.0.0.11:53 -> proxy saw 127.0.0.11:53",
		"agent: udp 127.0.0.11:53 -> dns ping",
		"agent: udp 203.0.113.5:53 -> dns ping",
		"agent: udp 203.0.113.5:9999 -> dropped",
		"proxy: udp 127.0.0.11:53 -> no answer",
	} {
		if !strings.Contains(got, want+"\n") {
			t.Errorf("want %q in\n%s", want, got)
		}
	}
	// The proxy's own connection goes out as sent (here into a link with
	// nothing behind it), never back to itself.
	if line := lineOf(got, "proxy: tcp 203.0.113.5:80 -> "); strings.Contains(line, "proxy saw") || line == "" {
		t.Errorf("the proxy's own TCP was redirected: %q\n%s", line, got)
	}
}

// sidecarRole runs in a network namespace of its own: it gives it a
// route out (a veth pair leading nowhere), starts the fake proxy on 127.0.0.1, applies
// Rules with nft and probes as the agent (65534) and the proxy (65532).
func sidecarRole([]string) int {
	fail := func(err error) int { fmt.Println("error:", err); return 1 }
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return fail(err)
	}
	if err := netlink.LinkSetUp(lo); err != nil {
		return fail(err)
	}
	// A veth pair whose other end is up and goes nowhere (the kernel may
	// have no dummy links).
	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "out0"}, PeerName: "out1"}); err != nil {
		return fail(err)
	}
	if peer, err := netlink.LinkByName("out1"); err != nil || netlink.LinkSetUp(peer) != nil {
		return fail(fmt.Errorf("out1 up: %v", err))
	}
	out, _ := netlink.LinkByName("out0")
	addr, _ := netlink.ParseAddr("10.99.0.1/24")
	if err := netlink.AddrAdd(out, addr); err != nil {
		return fail(err)
	}
	if err := netlink.LinkSetUp(out); err != nil {
		return fail(err)
	}
	if err := netlink.RouteAdd(&netlink.Route{LinkIndex: out.Attrs().Index, Dst: &net.IPNet{IP: net.IPv4zero, Mask: net.CIDRMask(0, 32)}}); err != nil {
		return fail(err)
	}
	proxy, err := serveFakeProxy()
	if err != nil {
		return fail(err)
	}
	nft := exec.Command("nft", "-f", "-")
	nft.Stdin = strings.NewReader(Rules(SidecarConfig{Proxy: proxy, ProxyUID: 65532}))
	if b, err := nft.CombinedOutput(); err != nil {
		return fail(fmt.Errorf("nft: %v: %s", err, b))
	}
	self, err := testBinary()
	if err != nil {
		return fail(err)
	}
	for _, who := range []struct {
		name string
		uid  uint32
	}{{"agent", 65534}, {"proxy", 65532}} {
		p := exec.Command(self, "tcp", "203.0.113.5:80", "tcp", "127.0.0.11:53", "udp", "127.0.0.11:53", "udp", "203.0.113.5:53", "udp", "203.0.113.5:9999")
		p.Env = append(os.Environ(), roleEnv+"=probe")
		p.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: who.uid, Gid: who.uid}}
		b, err := p.Output()
		if err != nil {
			return fail(fmt.Errorf("probe as %s: %v", who.name, err))
		}
		for line := range bytes.Lines(b) {
			fmt.Printf("%s: %s", who.name, line)
		}
	}
	return 0
}

// serveFakeProxy is startFakeProxy for a process without a *testing.T
// (the sidecar role): it serves until the process exits.
func serveFakeProxy() (netip.AddrPort, error) {
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		return netip.AddrPort{}, err
	}
	addr := netip.MustParseAddrPort(l.Addr().String())
	u, err := net.ListenPacket("udp4", addr.String())
	if err != nil {
		return netip.AddrPort{}, err
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			if orig, err := originalDst(c.(*net.TCPConn)); err != nil {
				fmt.Fprintf(c, "no original destination: %v\n", err)
			} else {
				fmt.Fprintf(c, "proxy saw %s\n", orig)
			}
			c.Close()
		}
	}()
	go func() {
		buf := make([]byte, 512)
		for {
			n, from, err := u.ReadFrom(buf)
			if err != nil {
				return
			}
			u.WriteTo(append([]byte("dns "), buf[:n]...), from)
		}
	}()
	return addr, nil
}
