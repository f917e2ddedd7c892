//go:build linux

package identity

import (
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"os"
	"runtime"
	"syscall"
	"testing"
	"unsafe"
)

// A redirected connection's client socket is found by its addresses in
// every network namespace, the proxy's own included.
func TestOfRedirectedOwnNamespace(t *testing.T) {
	cb := buildCallers(t)
	ln := listen(t, "tcp", "127.0.0.1:0")
	startCaller(t, cb.a, ln.Addr().String())
	conn, _ := acceptReady(t, ln)
	orig := ln.Addr().(*net.TCPAddr).AddrPort()
	if got, err := OfRedirected(conn, orig); err != nil || got.Binary != cb.a {
		t.Errorf("OfRedirected = %+v, %v; want %s", got, err, cb.a)
	}
	if got, err := FollowRedirected(conn, orig, false).Caller(); err != nil || got.Binary != cb.a {
		t.Errorf("FollowRedirected.Caller = %+v, %v; want %s", got, err, cb.a)
	}

	// In process: the row is the client's socket, and the client is the
	// proxy itself.
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
	local := client.LocalAddr().(*net.TCPAddr).AddrPort()
	if inode, uid, err := namespacesSocketInode(local, orig); err != nil || inode != connInode(t, client) || uid != uint32(os.Geteuid()) {
		t.Errorf("namespacesSocketInode = %d, uid %d, %v; want %d", inode, uid, err, connInode(t, client))
	}
	if got, err := OfRedirected(server, orig); !errors.Is(err, errCallerIsProxy) {
		t.Errorf("OfRedirected (in process) = %+v, %v; want errCallerIsProxy", got, err)
	}
	// A destination nobody dialled: no such row anywhere.
	other := orig
	if orig.Port() > 1 {
		other = netip.AddrPortFrom(orig.Addr(), orig.Port()-1)
	}
	if _, _, err := namespacesSocketInode(local, other); !errors.Is(err, errSocketNotFound) {
		t.Errorf("namespacesSocketInode (other destination) = %v; want errSocketNotFound", err)
	}
}

// The client in a network namespace of its own (as under portcullis run):
// its socket is in that namespace's tables, not the proxy's. The test
// makes the namespace on its own thread (root only), listens there, and
// starts the caller from that thread, so it is in the namespace too.
func TestOfRedirectedOtherNamespace(t *testing.T) {
	// /proc/net is the namespace of the process's main thread, so the
	// namespace must be made on another thread. If this goroutine is on
	// the main thread, it holds it while a subtest (a goroutine of its
	// own, so on another thread) does the work.
	runtime.LockOSThread()
	if syscall.Gettid() == os.Getpid() {
		t.Run("off the main thread", ofRedirectedOtherNamespace)
		runtime.UnlockOSThread()
		return
	}
	ofRedirectedOtherNamespace(t)
}

func ofRedirectedOtherNamespace(t *testing.T) {
	cb := buildCallers(t)
	// This goroutine's thread stays in the new namespace: it is never
	// unlocked, so the thread ends with the test's goroutine.
	runtime.LockOSThread()
	if err := syscall.Unshare(syscall.CLONE_NEWNET); err != nil {
		t.Skipf("a network namespace of the test's own needs root: %v", err)
	}
	loopbackUp(t)
	ln := listen(t, "tcp", "127.0.0.1:0")
	startCaller(t, cb.a, ln.Addr().String())
	conn, _ := acceptReady(t, ln)
	orig := ln.Addr().(*net.TCPAddr).AddrPort()

	if _, err := Of(conn); !errors.Is(err, errSocketNotFound) {
		t.Errorf("Of = %v; want errSocketNotFound (the socket is not in the proxy's namespace)", err)
	}
	if got, err := OfRedirected(conn, orig); err != nil || got.Binary != cb.a {
		t.Errorf("OfRedirected = %+v, %v; want %s", got, err, cb.a)
	}
	if got, err := FollowRedirected(conn, orig, false).Caller(); err != nil || got.Binary != cb.a {
		t.Errorf("FollowRedirected.Caller = %+v, %v; want %s", got, err, cb.a)
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
