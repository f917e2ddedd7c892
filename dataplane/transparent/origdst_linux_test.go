//go:build linux

package transparent

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"unsafe"
)

func TestParseSockaddr(t *testing.T) {
	var in4 [28]byte
	binary.NativeEndian.PutUint16(in4[0:], syscall.AF_INET)
	binary.BigEndian.PutUint16(in4[2:], 443)
	copy(in4[4:], []byte{192, 0, 2, 7})
	var in6 [28]byte
	binary.NativeEndian.PutUint16(in6[0:], syscall.AF_INET6)
	binary.BigEndian.PutUint16(in6[2:], 8080)
	a6 := netip.MustParseAddr("2001:db8::7").As16()
	copy(in6[8:], a6[:])
	var mapped [28]byte
	copy(mapped[:], in6[:])
	m := netip.MustParseAddr("::ffff:192.0.2.9").As16()
	copy(mapped[8:], m[:])
	for _, tc := range []struct {
		b    [28]byte
		want string
	}{{in4, "192.0.2.7:443"}, {in6, "[2001:db8::7]:8080"}, {mapped, "192.0.2.9:8080"}} {
		if got, err := parseSockaddr(tc.b[:]); err != nil || got.String() != tc.want {
			t.Errorf("parseSockaddr = %v, %v; want %s", got, err, tc.want)
		}
	}
	if _, err := parseSockaddr(make([]byte, 28)); err == nil {
		t.Error("parseSockaddr of family 0: no error")
	}
}

// wrapped is a connection wrapper, as the proxy's connection limit's.
type wrapped struct{ net.Conn }

func (w wrapped) NetConn() net.Conn { return w.Conn }

// OriginalDst reads what the kernel's NAT recorded: in a network
// namespace of the test's own (root only), nftables redirects TCP to one
// port to the listener's, for IPv4 and IPv6.
func TestOriginalDstRedirected(t *testing.T) {
	nft, err := exec.LookPath("nft")
	if err != nil {
		t.Skipf("nft not found: %v", err)
	}
	// This goroutine's thread stays in the new namespace: never
	// unlocked, it ends with the test.
	runtime.LockOSThread()
	if err := syscall.Unshare(syscall.CLONE_NEWNET); err != nil {
		t.Skipf("a network namespace of the test's own needs root: %v", err)
	}
	loopbackUp(t)
	for _, network := range []struct{ family, loopback string }{{"ip", "127.0.0.1"}, {"ip6", "::1"}} {
		ln, err := net.Listen("tcp", net.JoinHostPort(network.loopback, "0"))
		if err != nil {
			t.Skipf("listen on %s: %v", network.loopback, err)
		}
		defer ln.Close()
		port := ln.Addr().(*net.TCPAddr).Port
		const sent = 9 // the port clients dial
		rules := fmt.Sprintf("table %s t {\n chain out {\n  type nat hook output priority -100;\n  tcp dport %d redirect to :%d\n }\n}\n", network.family, sent, port)
		cmd := exec.Command(nft, "-f", "-")
		cmd.Stdin = strings.NewReader(rules)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Skipf("nft: %v\n%s", err, out)
		}
		for _, dial := range []struct {
			port int
			want netip.AddrPort
		}{
			{sent, netip.AddrPortFrom(netip.MustParseAddr(network.loopback), sent)},
			// Not redirected: its own destination, the listener.
			{port, netip.AddrPortFrom(netip.MustParseAddr(network.loopback), uint16(port))},
		} {
			client, err := net.Dial("tcp", net.JoinHostPort(network.loopback, fmt.Sprint(dial.port)))
			if err != nil {
				t.Fatal(err)
			}
			defer client.Close()
			conn, err := ln.Accept()
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if got, err := OriginalDst(wrapped{conn}); err != nil || got != dial.want {
				t.Errorf("%s: OriginalDst of a connection to port %d = %v, %v; want %v", network.family, dial.port, got, err, dial.want)
			}
		}
	}
}

// loopbackUp sets lo up in the calling thread's network namespace.
func loopbackUp(t *testing.T) {
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
