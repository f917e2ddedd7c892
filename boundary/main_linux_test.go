package boundary

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"
)

// The test binary plays two more parts, chosen by roleEnv: "probe", the
// command run starts (it tries the network and prints what it reached),
// and "run", a run process of its own (for the tests that signal or kill
// it).
const roleEnv = "BOUNDARY_TEST_ROLE"

func TestMain(m *testing.M) {
	switch os.Getenv(roleEnv) {
	case "probe":
		os.Exit(probe(os.Args[1:]))
	case "run":
		os.Exit(runRole(os.Args[1:]))
	case "sidecar":
		os.Exit(sidecarRole(os.Args[1:]))
	}
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// needRoot skips a test that needs root, unless CI says it must run.
func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 && os.Getenv("CI") != "true" {
		t.Skip("needs root: it makes network namespaces, links and nftables rules (CI=true runs it anyway)")
	}
}

var binDir string

// testBinary is a copy of this test binary that every user may run (the
// build's own directory is root's only), for the probe as nobody.
var testBinary = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "boundary-test-")
	if err != nil {
		return "", err
	}
	binDir = dir
	if err := os.Chmod(dir, 0o755); err != nil {
		return "", err
	}
	self, err := os.Executable()
	if err != nil {
		return "", err
	}
	data, err := os.ReadFile(self)
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "boundary.test")
	return bin, os.WriteFile(bin, data, 0o755)
})

// role is an *exec.Cmd of this test binary playing role with args.
func role(t *testing.T, role string, args ...string) *exec.Cmd {
	t.Helper()
	bin, err := testBinary()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), roleEnv+"="+role)
	return cmd
}

// probe runs each of its steps and prints one line per step:
//
//	tcp ADDR      what a proxy answered, or the dial's error
//	udp ADDR      the answer to "ping", "no answer", or "dropped" (the
//	              namespace's rules refused to send it: EPERM)
//	icmp ADDR     "echo reply", "no answer" or "dropped"
//	lo            a listener on 127.0.0.1 in the namespace reached from it
//	id            uid= gid=
//	ns            the network namespace
//	ready         "ready", then waits for stdin to close
//	exit N        exits with N
func probe(steps []string) int {
	for i := 0; i < len(steps); i++ {
		step := steps[i]
		arg := ""
		if step == "tcp" || step == "udp" || step == "icmp" || step == "exit" {
			i++
			arg = steps[i]
		}
		var out string
		switch step {
		case "tcp":
			out = probeTCP(arg)
		case "udp":
			out = probeUDP(arg)
		case "icmp":
			out = probeICMP(arg)
		case "lo":
			out = probeLoopback()
		case "id":
			out = fmt.Sprintf("uid=%d gid=%d", os.Getuid(), os.Getgid())
		case "ns":
			out, _ = os.Readlink("/proc/self/ns/net")
		case "ready":
			fmt.Println("ready")
			io.Copy(io.Discard, os.Stdin)
			continue
		case "exit":
			n, _ := strconv.Atoi(arg)
			return n
		}
		fmt.Printf("%s %s -> %s\n", step, arg, out)
	}
	return 0
}

func probeTCP(addr string) string {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return "error: " + err.Error()
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return "error: " + err.Error()
	}
	return strings.TrimSpace(line)
}

func probeUDP(addr string) string {
	c, err := net.Dial("udp", addr)
	if err != nil {
		return "error: " + err.Error()
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(500 * time.Millisecond))
	if _, err := c.Write([]byte("ping")); err != nil {
		return sendError(err)
	}
	buf := make([]byte, 64)
	n, err := c.Read(buf)
	if err != nil {
		return "no answer"
	}
	return string(buf[:n])
}

func probeICMP(addr string) string {
	c, err := icmp.ListenPacket("ip4:icmp", "0.0.0.0")
	if err != nil {
		return "error: " + err.Error()
	}
	defer c.Close()
	msg := icmp.Message{Type: ipv4.ICMPTypeEcho, Body: &icmp.Echo{ID: os.Getpid() & 0xffff, Seq: 1, Data: []byte("ping")}}
	b, _ := msg.Marshal(nil)
	if _, err := c.WriteTo(b, &net.IPAddr{IP: net.ParseIP(addr)}); err != nil {
		return sendError(err)
	}
	c.SetDeadline(time.Now().Add(500 * time.Millisecond))
	buf := make([]byte, 1500)
	for {
		n, _, err := c.ReadFrom(buf)
		if err != nil {
			return "no answer"
		}
		if m, err := icmp.ParseMessage(1, buf[:n]); err == nil && m.Type == ipv4.ICMPTypeEchoReply {
			return "echo reply"
		}
	}
}

// sendError is "dropped" when an output rule dropped the packet.
func sendError(err error) string {
	if errors.Is(err, unix.EPERM) {
		return "dropped"
	}
	return "error: " + err.Error()
}

func probeLoopback() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "error: " + err.Error()
	}
	defer l.Close()
	go func() {
		if c, err := l.Accept(); err == nil {
			fmt.Fprintln(c, "own loopback")
			c.Close()
		}
	}()
	return probeTCP(l.Addr().String())
}

// runRole is a run process: args are "proxy ADDR" then the command.
func runRole(args []string) int {
	cfg := Config{Proxy: netip.MustParseAddrPort(args[0])}
	cmd := exec.Command(args[1], args[2:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	code, err := Run(context.Background(), cfg, cmd)
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		return 125
	}
	return code
}

// fakeProxy is the proxy's transparent side as the namespace sees it: on
// one port of 127.0.0.1, TCP answers the connection's original
// destination (SO_ORIGINAL_DST, as the proxy reads it) and UDP echoes.
type fakeProxy struct {
	addr netip.AddrPort
}

func startFakeProxy(t *testing.T) *fakeProxy {
	t.Helper()
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := netip.MustParseAddrPort(l.Addr().String())
	u, err := net.ListenPacket("udp4", addr.String())
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { l.Close(); u.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			orig, err := originalDst(c.(*net.TCPConn))
			if err != nil {
				fmt.Fprintf(c, "no original destination: %v\n", err)
			} else {
				fmt.Fprintf(c, "proxy saw %s\n", orig)
			}
			c.Close()
		}
	})
	wg.Go(func() {
		buf := make([]byte, 512)
		for {
			n, from, err := u.ReadFrom(buf)
			if err != nil {
				return
			}
			u.WriteTo(append([]byte("dns "), buf[:n]...), from)
		}
	})
	return &fakeProxy{addr: addr}
}

// originalDst is getsockopt(SOL_IP, SO_ORIGINAL_DST): a sockaddr_in.
func originalDst(c *net.TCPConn) (netip.AddrPort, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, err
	}
	var sa *unix.IPv6Mreq // 20 bytes, room for the 16 of a sockaddr_in
	var serr error
	raw.Control(func(fd uintptr) {
		sa, serr = unix.GetsockoptIPv6Mreq(int(fd), unix.SOL_IP, unix.SO_ORIGINAL_DST)
	})
	if serr != nil {
		return netip.AddrPort{}, serr
	}
	b := sa.Multiaddr
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[4:8])), uint16(b[2])<<8|uint16(b[3])), nil
}

// hostListeners are services on the host the namespace must not reach: a
// TCP one on 127.0.0.1 and a UDP echo on every address, same port.
func hostListeners(t *testing.T) (tcpLoopback netip.AddrPort, udpPort uint16) {
	t.Helper()
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u, err := net.ListenPacket("udp4", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { l.Close(); u.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			fmt.Fprintln(c, "host service")
			c.Close()
		}
	})
	wg.Go(func() {
		buf := make([]byte, 512)
		for {
			n, from, err := u.ReadFrom(buf)
			if err != nil {
				return
			}
			u.WriteTo(append([]byte("host udp "), buf[:n]...), from)
		}
	})
	return netip.MustParseAddrPort(l.Addr().String()), uint16(u.LocalAddr().(*net.UDPAddr).Port)
}

// leftovers lists what runs of pid left on the host: links and tables.
func leftovers(t *testing.T, pid int) []string {
	t.Helper()
	var found []string
	links, err := netlink.LinkList()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range links {
		if p, ok := pidOf(l.Attrs().Name, linkPrefix); ok && p == pid {
			found = append(found, "link "+l.Attrs().Name)
		}
	}
	c, err := nftables.New()
	if err != nil {
		t.Fatal(err)
	}
	tables, err := c.ListTables()
	if err != nil {
		t.Fatal(err)
	}
	for _, tb := range tables {
		if p, ok := pidOf(tb.Name, tablePrefix); ok && p == pid {
			found = append(found, "table "+tb.Name)
		}
	}
	return found
}

// alive reports whether pid is a process that is not a zombie.
func alive(pid int) bool {
	return !errors.Is(unix.Kill(pid, 0), unix.ESRCH) && !gone(pid)
}

// runProbe runs the probe with steps under Run (in this process) and
// returns its output and exit status.
func runProbe(t *testing.T, cfg Config, steps ...string) (string, int) {
	t.Helper()
	cmd := role(t, "probe", steps...)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	code, err := Run(t.Context(), cfg, cmd)
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, out.String())
	}
	t.Logf("run took %v", time.Since(start).Round(time.Millisecond))
	if l := leftovers(t, os.Getpid()); len(l) > 0 {
		t.Errorf("after the run: %v", l)
	}
	return out.String(), code
}
