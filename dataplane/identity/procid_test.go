//go:build linux

package identity

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// callerBuild holds two builds of testdata/caller: different executables at
// different paths ("client-a" says "ready a", "client-b" says "ready b"), in
// a directory any user may enter.
type callerBuild struct{ a, b string }

// callerUID is the user callers run as: ourselves, or nobody when we are
// root, so the sockets are not root's (processes of another uid that we may
// not read are ignored; a root-only system process in this sandbox is one).
func callerUID() int {
	if os.Geteuid() == 0 {
		return 65534
	}
	return -1
}

func buildCallers(t testing.TB) callerBuild {
	t.Helper()
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("go command not found: %v", err)
	}
	dir := worldDir(t)
	var cb callerBuild
	for _, n := range []struct {
		name string
		dst  *string
	}{{"a", &cb.a}, {"b", &cb.b}} {
		out := filepath.Join(dir, "client-"+n.name)
		cmd := exec.Command(goCmd, "build", "-ldflags=-X main.name="+n.name, "-o", out, "./testdata/caller")
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build caller %s: %v\n%s", n.name, err, b)
		}
		real, err := filepath.EvalSymlinks(out) // the kernel reports resolved paths
		if err != nil {
			t.Fatal(err)
		}
		*n.dst = real
	}
	return cb
}

// startCaller runs exe with args; the process holds its connection until the
// returned stop func closes its stdin (also done at cleanup).
func startCaller(t testing.TB, exe string, args ...string) (stop func()) {
	t.Helper()
	return startCallerAs(t, callerUID(), exe, args...)
}

// startCallerAs is startCaller as user (and group) uid, or as ourselves when
// uid is -1.
func startCallerAs(t testing.TB, uid int, exe string, args ...string) (stop func()) {
	t.Helper()
	cmd := exec.Command(exe, args...)
	if uid >= 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := false
	stop = func() {
		if done {
			return
		}
		done = true
		stdin.Close()
		if err := cmd.Wait(); err != nil {
			t.Errorf("%s %v: %v\n%s", exe, args, err, stderr.String())
		}
	}
	t.Cleanup(stop)
	return stop
}

// acceptReady accepts one connection and reads the caller's "ready NAME"
// line, so the client end is known to exist before Binary looks.
func acceptReady(t testing.TB, ln net.Listener) (net.Conn, string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	if err := ln.(*net.TCPListener).SetDeadline(deadline); err != nil {
		t.Fatal(err)
	}
	conn, err := ln.Accept()
	if err != nil {
		t.Fatalf("accept: %v", err)
	}
	t.Cleanup(func() { conn.Close() })
	conn.SetReadDeadline(deadline)
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		t.Fatalf("read ready line: %v", err)
	}
	name, ok := strings.CutPrefix(strings.TrimSpace(line), "ready ")
	if !ok {
		t.Fatalf("unexpected line %q", line)
	}
	return conn, name
}

func listen(t testing.TB, network, addr string) net.Listener {
	t.Helper()
	ln, err := net.Listen(network, addr)
	if err != nil {
		t.Skipf("listen %s %s: %v", network, addr, err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

func TestCallerBinary(t *testing.T) {
	cb := buildCallers(t)

	t.Run("two executables at once", func(t *testing.T) {
		ln := listen(t, "tcp", "127.0.0.1:0")
		startCaller(t, cb.a, ln.Addr().String())
		startCaller(t, cb.b, ln.Addr().String())
		want := map[string]string{"a": cb.a, "b": cb.b}
		for range 2 {
			conn, name := acceptReady(t, ln)
			got, err := Binary(conn)
			if err != nil || got != want[name] {
				t.Errorf("client %s: Binary = %q, %v; want %q", name, got, err, want[name])
			}
			delete(want, name)
		}
	})

	t.Run("ipv6 loopback", func(t *testing.T) {
		ln := listen(t, "tcp6", "[::1]:0")
		startCaller(t, cb.b, ln.Addr().String())
		conn, _ := acceptReady(t, ln)
		if got, err := Binary(conn); err != nil || got != cb.b {
			t.Errorf("Binary = %q, %v; want %q", got, err, cb.b)
		}
	})

	t.Run("ipv4 client on a dual-stack listener", func(t *testing.T) {
		// The proxy sees ::ffff:127.0.0.1; the client's row is in /proc/net/tcp.
		ln := listen(t, "tcp", "[::]:0")
		port := ln.Addr().(*net.TCPAddr).Port
		startCaller(t, cb.a, fmt.Sprintf("127.0.0.1:%d", port))
		conn, _ := acceptReady(t, ln)
		if got, err := Binary(conn); err != nil || got != cb.a {
			t.Errorf("Binary = %q, %v (remote %s); want %q", got, err, conn.RemoteAddr(), cb.a)
		}
	})

	t.Run("run through a symlink names the target", func(t *testing.T) {
		link := filepath.Join(worldDir(t), "innocent-name")
		if err := os.Symlink(cb.a, link); err != nil {
			t.Fatal(err)
		}
		ln := listen(t, "tcp", "127.0.0.1:0")
		startCaller(t, link, ln.Addr().String())
		conn, _ := acceptReady(t, ln)
		if got, err := Binary(conn); err != nil || got != cb.a {
			t.Errorf("Binary = %q, %v; want %q", got, err, cb.a)
		}
	})

	t.Run("deleted executable is unknown", func(t *testing.T) {
		exe := filepath.Join(worldDir(t), "client-doomed")
		copyFile(t, cb.a, exe)
		ln := listen(t, "tcp", "127.0.0.1:0")
		startCaller(t, exe, ln.Addr().String())
		conn, _ := acceptReady(t, ln)
		if err := os.Remove(exe); err != nil {
			t.Fatal(err)
		}
		if got, err := Binary(conn); !errors.Is(err, errExeReplaced) {
			t.Errorf("Binary = %q, %v; want errExeReplaced", got, err)
		}
	})

	t.Run("socket shared by two processes of one executable", func(t *testing.T) {
		ln := listen(t, "tcp", "127.0.0.1:0")
		startCaller(t, cb.a, "-share", cb.a, ln.Addr().String())
		conn, _ := acceptReady(t, ln) // written by the child: both hold it now
		if got, err := Binary(conn); err != nil || got != cb.a {
			t.Errorf("Binary = %q, %v; want %q", got, err, cb.a)
		}
	})

	t.Run("socket shared by different executables is unknown", func(t *testing.T) {
		ln := listen(t, "tcp", "127.0.0.1:0")
		startCaller(t, cb.a, "-share", cb.b, ln.Addr().String())
		conn, name := acceptReady(t, ln)
		if name != "b" {
			t.Fatalf("ready line from %q, want the child b", name)
		}
		if got, err := Binary(conn); !errors.Is(err, errCallerAmbig) {
			t.Errorf("Binary = %q, %v; want errCallerAmbig", got, err)
		}
	})

	t.Run("ancestors up to the proxy's own lineage", func(t *testing.T) {
		// b runs a runs b, which connects: the caller is b, its ancestors
		// a then b; the walk ends at this process (the proxy).
		ln := listen(t, "tcp", "127.0.0.1:0")
		startCaller(t, cb.b, "-spawn", cb.a, "-spawn", cb.b, ln.Addr().String())
		conn, _ := acceptReady(t, ln)
		got, err := Of(conn)
		if err != nil || got.Binary != cb.b || !slices.Equal(got.Ancestors, []string{cb.a, cb.b}) {
			t.Errorf("Of = %+v, %v; want %s under [%s %s]", got, err, cb.b, cb.a, cb.b)
		}
		if b, err := Binary(conn); err != nil || b != cb.b {
			t.Errorf("Binary = %q, %v; want %q", b, err, cb.b)
		}
	})

	t.Run("no ancestors below the proxy", func(t *testing.T) {
		ln := listen(t, "tcp", "127.0.0.1:0")
		startCaller(t, cb.a, ln.Addr().String())
		conn, _ := acceptReady(t, ln)
		if got, err := Of(conn); err != nil || got.Binary != cb.a || len(got.Ancestors) != 0 {
			t.Errorf("Of = %+v, %v; want %s with no ancestors (its parent is the proxy)", got, err, cb.a)
		}
	})

	t.Run("a shared socket keeps the ancestors its holders share", func(t *testing.T) {
		// b runs a, which shares its socket with a child a: the holders'
		// ancestors are [b] and [a b]; only b vouches for both.
		ln := listen(t, "tcp", "127.0.0.1:0")
		startCaller(t, cb.b, "-spawn", cb.a, "-share", cb.a, ln.Addr().String())
		conn, _ := acceptReady(t, ln)
		if got, err := Of(conn); err != nil || got.Binary != cb.a || !slices.Equal(got.Ancestors, []string{cb.b}) {
			t.Errorf("Of = %+v, %v; want %s under [%s]", got, err, cb.a, cb.b)
		}
	})

	t.Run("client exited", func(t *testing.T) {
		ln := listen(t, "tcp", "127.0.0.1:0")
		stop := startCaller(t, cb.a, ln.Addr().String())
		conn, _ := acceptReady(t, ln)
		stop()
		if got, err := Binary(conn); !errors.Is(err, errSocketNotFound) {
			t.Errorf("Binary = %q, %v; want errSocketNotFound", got, err)
		}
	})
}

// worldDir is a temporary directory other users may enter (t.TempDir is
// private to us).
func worldDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "procid-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestCallerBinaryUnprivileged runs copies of this test as nobody (the
// proxy) to show what a proxy without CAP_SYS_PTRACE can and cannot say.
func TestCallerBinaryUnprivileged(t *testing.T) {
	if mode := os.Getenv("PROCID_HELPER"); mode != "" {
		unprivilegedHelper(t, mode)
		return
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to run a copy of the test as nobody")
	}
	cb := buildCallers(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(worldDir(t), "dataplane.test")
	copyFile(t, self, exe)

	for _, mode := range []string{
		"root-client", // the client is this (root) process: unreadable, so unknown
		"same-uid",    // the client runs as nobody too: named, root's processes ignored
		"hidden",      // a non-dumpable process of nobody shares the socket: unknown
		"ancestors",   // the client's parent runs as nobody too: named as its ancestor
	} {
		t.Run(mode, func(t *testing.T) {
			cmd := exec.Command(exe, "-test.run=^TestCallerBinaryUnprivileged$", "-test.v")
			cmd.Env = append(os.Environ(), "PROCID_HELPER="+mode, "PROCID_CLIENT_A="+cb.a, "PROCID_CLIENT_B="+cb.b)
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
			cmd.Dir = "/"
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			cmd.Stderr = cmd.Stdout
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			var out strings.Builder
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				line := sc.Text()
				out.WriteString(line + "\n")
				if addr, ok := strings.CutPrefix(line, "LISTENING "); ok {
					client, err := net.Dial("tcp", addr)
					if err != nil {
						t.Fatal(err)
					}
					defer client.Close()
				}
			}
			if err := cmd.Wait(); err != nil {
				t.Fatalf("helper as nobody: %v\n%s", err, out.String())
			}
			t.Logf("helper as nobody:\n%s", out.String())
		})
	}
}

// unprivilegedHelper is the proxy side of TestCallerBinaryUnprivileged.
func unprivilegedHelper(t *testing.T, mode string) {
	ln := listen(t, "tcp", "127.0.0.1:0")
	a, b := os.Getenv("PROCID_CLIENT_A"), os.Getenv("PROCID_CLIENT_B")
	switch mode {
	case "root-client":
		fmt.Printf("LISTENING %s\n", ln.Addr())
		conn, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if got, err := Binary(conn); !errors.Is(err, os.ErrPermission) {
			t.Fatalf("Binary = %q, %v; want a permission error", got, err)
		} else {
			t.Log(err)
		}
	case "same-uid":
		startCallerAs(t, -1, a, ln.Addr().String())
		conn, _ := acceptReady(t, ln)
		if got, err := Binary(conn); err != nil || got != a {
			t.Fatalf("Binary = %q, %v; want %q", got, err, a)
		}
	case "hidden":
		t.Setenv("CALLER_NODUMP", "1")
		startCallerAs(t, -1, a, "-share", b, ln.Addr().String())
		conn, _ := acceptReady(t, ln) // from b, after it made itself non-dumpable
		if got, err := Binary(conn); !errors.Is(err, os.ErrPermission) {
			t.Fatalf("Binary = %q, %v; want a permission error (a would vouch for hidden b)", got, err)
		} else {
			t.Log(err)
		}
	case "ancestors":
		startCallerAs(t, -1, b, "-spawn", a, ln.Addr().String())
		conn, _ := acceptReady(t, ln)
		if got, err := Of(conn); err != nil || got.Binary != a || !slices.Equal(got.Ancestors, []string{b}) {
			t.Fatalf("Of = %+v, %v; want %s under [%s]", got, err, a, b)
		}
	default:
		t.Fatalf("unknown mode %q", mode)
	}
}

func TestProcessHasUID(t *testing.T) {
	me := uint32(os.Getuid())
	if !processHasUID(os.Getpid(), me) {
		t.Errorf("processHasUID(self, %d) = false", me)
	}
	if processHasUID(os.Getpid(), me+12345) {
		t.Errorf("processHasUID(self, %d) = true", me+12345)
	}
}

func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o755); err != nil {
		t.Fatal(err)
	}
}

// socketInodeOf is the inode of a socket fd, as fstat sees it: the ground
// truth clientSocketInode must find through /proc/net/tcp{,6}.
func socketInodeOf(t *testing.T, fd int) uint64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

func connInode(t *testing.T, c net.Conn) uint64 {
	t.Helper()
	rc, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var ino uint64
	if err := rc.Control(func(fd uintptr) { ino = socketInodeOf(t, int(fd)) }); err != nil {
		t.Fatal(err)
	}
	return ino
}

func TestCallerBinaryInProcess(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:0", "[::1]:0"} {
		t.Run(addr, func(t *testing.T) {
			ln := listen(t, "tcp", addr)
			client, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer client.Close()
			server, err := ln.Accept()
			if err != nil {
				t.Fatal(err)
			}
			defer server.Close()

			c, p, err := loopbackPeers(server)
			if err != nil {
				t.Fatal(err)
			}
			inode, uid, err := clientSocketInode(c, p)
			if want := connInode(t, client); err != nil || inode != want || uid != uint32(os.Geteuid()) {
				t.Errorf("clientSocketInode = %d, uid %d, %v; want %d, uid %d", inode, uid, err, want, os.Geteuid())
			}
			// The client is the proxy's own process: never an identity.
			if got, err := Binary(server); !errors.Is(err, errCallerIsProxy) {
				t.Errorf("Binary = %q, %v; want errCallerIsProxy", got, err)
			}
		})
	}
}

// An IPv6 socket talking to an IPv4 listener appears in /proc/net/tcp6 with
// IPv4-mapped addresses, while the proxy sees plain 127.0.0.1.
func TestClientSocketInodeMappedIPv6(t *testing.T) {
	ln := listen(t, "tcp4", "127.0.0.1:0")
	fd, err := syscall.Socket(syscall.AF_INET6, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Skipf("no IPv6 sockets: %v", err)
	}
	defer syscall.Close(fd)
	sa := &syscall.SockaddrInet6{Port: ln.Addr().(*net.TCPAddr).Port}
	copy(sa.Addr[:], netip.MustParseAddr("::ffff:127.0.0.1").AsSlice())
	if err := syscall.Connect(fd, sa); err != nil {
		t.Skipf("connect to IPv4-mapped address: %v", err)
	}
	server, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	c, p, err := loopbackPeers(server)
	if err != nil {
		t.Fatal(err)
	}
	if inode, _, err := clientSocketInode(c, p); err != nil || inode != socketInodeOf(t, fd) {
		t.Errorf("clientSocketInode = %d, %v; want %d", inode, err, socketInodeOf(t, fd))
	}
}

type addrConn struct {
	net.Conn
	local, remote net.Addr
}

func (c addrConn) LocalAddr() net.Addr  { return c.local }
func (c addrConn) RemoteAddr() net.Addr { return c.remote }

func TestCallerBinaryNotLoopback(t *testing.T) {
	tcp := func(s string) net.Addr { return net.TCPAddrFromAddrPort(netip.MustParseAddrPort(s)) }
	p1, p2 := net.Pipe()
	defer p1.Close()
	defer p2.Close()
	for name, conn := range map[string]net.Conn{
		"pipe":               p1,
		"remote client":      addrConn{p1, tcp("127.0.0.1:3128"), tcp("192.0.2.7:40000")},
		"proxy on public IP": addrConn{p1, tcp("198.51.100.1:3128"), tcp("127.0.0.1:40000")},
		"ipv6 remote":        addrConn{p1, tcp("[::1]:3128"), tcp("[2001:db8::1]:40000")},
		"udp":                addrConn{p1, &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)}, &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)}},
	} {
		if got, err := Binary(conn); !errors.Is(err, errNotLoopback) {
			t.Errorf("%s: Binary = %q, %v; want errNotLoopback", name, got, err)
		}
	}
}

func littleEndian() bool { return binary.NativeEndian.Uint16([]byte{1, 0}) == 1 }

func TestParseProcNetAddr(t *testing.T) {
	if !littleEndian() {
		t.Skip("expectations below are for a little-endian host")
	}
	for _, tc := range []struct {
		in, want string
	}{
		{"0100007F:0CEA", "127.0.0.1:3306"},
		{"00000000:0000", "0.0.0.0:0"},
		{"0101A8C0:01BB", "192.168.1.1:443"},
		{"00000000000000000000000001000000:1F90", "[::1]:8080"},
		{"0000000000000000FFFF00000100007F:A2B4", "127.0.0.1:41652"}, // IPv4-mapped, unmapped
		{"B80D0120000000000000000001000000:0050", "[2001:db8::1]:80"},
	} {
		got, err := parseProcNetAddr(tc.in)
		if err != nil || got.String() != tc.want {
			t.Errorf("parseProcNetAddr(%q) = %v, %v; want %s", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "0100007F", "0100007F:", "0100007F:CEA", "100007F:0CEA", "0100007G:0CEA",
		"0100007F:0CEAA", "010000007F:0CEA", "+100007F:0CEA", "0100007F:-CEA", "0000000000000000FFFF00000100007F0:0050"} {
		if got, err := parseProcNetAddr(bad); err == nil {
			t.Errorf("parseProcNetAddr(%q) = %v, want an error", bad, got)
		}
	}
}

func TestFindSocketRow(t *testing.T) {
	if !littleEndian() {
		t.Skip("table below is for a little-endian host")
	}
	const table = `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:0C38 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1001 1 0000000000000000 100 0 0 10 0
   1: 0100007F:A2B4 0100007F:0C38 06 00000000:00000000 03:00000F9C 00000000     0        0 0 3 0000000000000000
   2: 0100007F:0C38 0100007F:A2B4 01 00000000:00000000 00:00000000 00000000     0        0 1002 1 0000000000000000 20 4 30 10 -1
  10: 0100007F:A2B4 0100007F:0C38 01 00000000:00000000 00:00000000 00000000  1000        0 1003 1 0000000000000000 20 4 30 10 -1
`
	client := netip.MustParseAddrPort("127.0.0.1:41652")
	proxy := netip.MustParseAddrPort("127.0.0.1:3128")
	// Row 1 (TIME_WAIT, inode 0) and row 2 (the proxy's own end) are skipped.
	if got, err := findSocketRow(strings.NewReader(table), client, proxy); err != nil || got.inode != 1003 || got.uid != 1000 {
		t.Errorf("findSocketRow = %+v, %v; want inode 1003, uid 1000", got, err)
	}
	other := netip.MustParseAddrPort("127.0.0.1:41653")
	if got, err := findSocketRow(strings.NewReader(table), other, proxy); err != nil || got.inode != 0 {
		t.Errorf("findSocketRow(absent) = %+v, %v; want inode 0, nil", got, err)
	}
	if _, err := findSocketRow(strings.NewReader("header\n   0: garbage\n"), client, proxy); err == nil {
		t.Error("findSocketRow accepted a malformed row")
	}
}

func formatProcNetAddr(ap netip.AddrPort, v6 bool) string {
	var b []byte
	if v6 {
		a := ap.Addr().As16()
		b = a[:]
	} else {
		a := ap.Addr().As4()
		b = a[:]
	}
	var s strings.Builder
	for i := 0; i < len(b); i += 4 {
		fmt.Fprintf(&s, "%08X", binary.NativeEndian.Uint32(b[i:]))
	}
	fmt.Fprintf(&s, ":%04X", ap.Port())
	return s.String()
}

func FuzzParseProcNetTCPLine(f *testing.F) {
	f.Add("   0: 0100007F:0C38 0100007F:A2B4 01 00000000:00000000 00:00000000 00000000     0        0 1002 1 0000000000000000 20 4 30 10 -1")
	f.Add("   3: 0000000000000000FFFF00000100007F:0C38 00000000000000000000000001000000:A2B4 01 00000000:00000000 00:00000000 00000000  1000        0 77 1")
	f.Add("0: : : 0 0 0 0 0 0 0")
	f.Fuzz(func(t *testing.T, line string) {
		row, err := parseProcNetTCPLine(line)
		if err != nil {
			return
		}
		// What parses formats back to the same addresses (modulo case and
		// IPv4 mapping, which is dropped on purpose).
		fields := strings.Fields(line)
		for i, ap := range []netip.AddrPort{row.local, row.remote} {
			in := strings.ToUpper(fields[i+1])
			v6 := len(in) == 4+1+32
			if v6 && ap.Addr().Is4() {
				ap = netip.AddrPortFrom(netip.AddrFrom16(ap.Addr().As16()), ap.Port())
			}
			if out := formatProcNetAddr(ap, v6); out != in {
				t.Fatalf("%q parsed as %v formats back as %q", in, ap, out)
			}
		}
	})
}

// The lookup's cost is one read of the TCP tables and one pass over every fd
// on the host; this shows what that is here (see the reported processes and
// fds per op).
func BenchmarkCallerBinary(b *testing.B) {
	cb := buildCallers(b)
	ln := listen(b, "tcp", "127.0.0.1:0")
	startCaller(b, cb.a, ln.Addr().String())
	conn, _ := acceptReady(b, ln)
	cpu := cpuTime()
	for b.Loop() {
		if got, err := Binary(conn); err != nil || got != cb.a {
			b.Fatalf("Binary = %q, %v", got, err)
		}
	}
	b.ReportMetric(float64((cpuTime()-cpu).Microseconds())/float64(b.N), "cpu-µs/op")
	procs, fds := countProcFDs()
	b.ReportMetric(float64(procs), "procs")
	b.ReportMetric(float64(fds), "fds")
}

// cpuTime is the CPU time (user and system) this process has used: on a
// shared machine, what a lookup costs, whatever the wait for a core.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func countProcFDs() (procs, fds int) {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		procs++
		fdEnts, _ := os.ReadDir("/proc/" + e.Name() + "/fd")
		fds += len(fdEnts)
	}
	return procs, fds
}

func TestParseStatPPID(t *testing.T) {
	for _, tc := range []struct {
		stat string
		want int
		ok   bool
	}{
		{"1234 (python3) S 77 1234 1234 0 -1 4194560", 77, true},
		{"1234 (a) b) S 88 1 1", 88, true}, // a comm with ") " in it
		{"1234 (x) (y)) R 99 1", 99, true},
		{"1234 (x y z) S 1 1", 1, true},
		{"1234 python3 S 77", 0, false},
		{"1234 (python3)", 0, false},
		{"1234 (python3) S notanumber", 0, false},
	} {
		got, err := parseStatPPID(tc.stat)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("parseStatPPID(%q) = %d, %v; want %d (ok %v)", tc.stat, got, err, tc.want, tc.ok)
		}
	}
}

func TestProxyLineage(t *testing.T) {
	l := proxyLineage()
	if !l[os.Getpid()] || !l[os.Getppid()] {
		t.Errorf("proxyLineage() = %v; want this process and its parent in it", l)
	}
}
