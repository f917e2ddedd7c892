//go:build linux && !386

package h1

import (
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"unsafe"
)

// Why the proxy reads and writes its sockets with raw system calls.
//
// Go's net package makes each read and write through syscall.Syscall,
// which tells the scheduler a system call is starting (entersyscall), so
// that a call that blocks does not hold its P. A socket the net package
// opened is non-blocking: its reads and writes never block, and that
// bookkeeping is only a cost, one that is paid where a proxy feels it
// most. The runtime's monitor thread (sysmon) goes to sleep when every P
// is idle, and the first system call after that wakes it with a futex:
// when requests come one at a time, every request finds the process idle,
// so every request paid for a wakeup on its path and for the monitor's
// polling on the other core before it slept again. In CPU profiles of
// the proxy at one client that wakeup was 9% of the proxy's CPU.
//
// rawConn makes the reads and writes through syscall.RawConn instead:
// the descriptor's own locks and the runtime poller (so deadlines,
// Close and waiting for readiness work as for any net.Conn), with
// RawSyscall for the read or write itself. A raw system call holds its P,
// so it must never block: the calls are recvfrom and sendto with
// MSG_DONTWAIT, which do not wait even if something made the descriptor
// blocking (File does). sendto also carries MSG_NOSIGNAL, as the net
// package's writes need no SIGPIPE either.
//
// On linux/386 socket calls go through socketcall, and RawIO is the
// identity there (rawio_other.go).

// RawIO returns conn with Read and Write made as raw system calls, or conn
// itself when it is not a TCP or Unix socket (a TLS connection, a pipe).
// A limitedConn is looked through: it changes only Close.
//
// Under the race detector RawIO is the identity. The detector sees a
// socket's reads and writes only where package syscall tells it of them
// (the buffers touched, and a happens-before edge from every write to the
// reads after it); a raw call tells it nothing, so it would miss races and
// report false ones between goroutines that talk through sockets. The raw
// path is tested by its own tests under -race and by everything else in
// runs without it (.ci/run makes one).
func RawIO(conn net.Conn) net.Conn {
	if raceEnabled {
		return conn
	}
	return newRawConn(conn)
}

// newRawConn is RawIO without the race detector's exception.
func newRawConn(conn net.Conn) net.Conn {
	sock := conn
	if lc, ok := conn.(*limitedConn); ok {
		sock = lc.Conn
	}
	var sc syscall.Conn
	switch s := sock.(type) {
	case *net.TCPConn:
		sc = s
	case *net.UnixConn:
		sc = s
	default:
		return conn
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return conn
	}
	c := &rawConn{Conn: conn, rc: rc}
	c.r.fn = func(fd uintptr) bool { return c.r.do(syscall.SYS_RECVFROM, fd, syscall.MSG_DONTWAIT) }
	c.w.fn = func(fd uintptr) bool {
		return c.w.do(syscall.SYS_SENDTO, fd, syscall.MSG_DONTWAIT|syscall.MSG_NOSIGNAL)
	}
	return c
}

// rawConn is a net.Conn whose Read and Write are raw system calls. Every
// other method is the connection's own.
type rawConn struct {
	net.Conn
	rc   syscall.RawConn
	r, w rawOp
}

// rawOp is one direction's call: the buffer, what was done with it, and
// the function handed to RawConn (made once, so a call allocates nothing).
type rawOp struct {
	mu  sync.Mutex // Read and Write may each be called from several goroutines
	fn  func(fd uintptr) bool
	buf []byte
	n   int
	err syscall.Errno
}

// do reads into or writes from buf; false when the descriptor is not
// ready (the poller waits, then calls again). A write goes on until all
// of buf is written, as net.Conn's does.
func (o *rawOp) do(trap, fd, flags uintptr) bool {
	for {
		rest := o.buf[o.n:]
		n, _, errno := syscall.RawSyscall6(trap, fd, uintptr(unsafe.Pointer(unsafe.SliceData(rest))), uintptr(len(rest)), flags, 0, 0)
		switch errno {
		case 0:
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		default:
			o.err = errno
			return true
		}
		o.n += int(n)
		if trap == syscall.SYS_RECVFROM || o.n == len(o.buf) || n == 0 {
			return true
		}
	}
}

func (c *rawConn) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return c.Conn.Read(b) // 0, nil; or the error a closed connection gives
	}
	n, err := c.op(&c.r, b, "read", c.rc.Read)
	if n == 0 && err == nil {
		return 0, io.EOF
	}
	return n, err
}

func (c *rawConn) Write(b []byte) (int, error) {
	if len(b) == 0 {
		return c.Conn.Write(b)
	}
	n, err := c.op(&c.w, b, "write", c.rc.Write)
	if err == nil && n < len(b) {
		err = io.ErrShortWrite
	}
	return n, err
}

// op runs one read or write through the raw connection. Its errors are
// those of the net package: *net.OpError around os.ErrDeadlineExceeded,
// net.ErrClosed or the system call's errno.
func (c *rawConn) op(o *rawOp, b []byte, name string, run func(func(uintptr) bool) error) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.buf, o.n, o.err = b, 0, 0
	err := run(o.fn)
	n := o.n
	o.buf = nil
	switch {
	case err != nil:
		if oe, ok := err.(*net.OpError); ok {
			// RawConn names its operations raw-read and raw-write.
			oe.Op = name
		}
	case o.err != 0:
		err = &net.OpError{Op: name, Net: c.LocalAddr().Network(), Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: os.NewSyscallError(name, o.err)}
	}
	return n, err
}

// NetConn returns the connection underneath, as tls.Conn's does (CloseWrite
// looks through wrappers so).
func (c *rawConn) NetConn() net.Conn { return c.Conn }

// SyscallConn returns the connection's raw descriptor (openCheck peeks
// through it).
func (c *rawConn) SyscallConn() (syscall.RawConn, error) { return c.rc, nil }

// peekDontWait peeks at what the socket fd holds without waiting: a raw
// recvfrom, for the reason above (it is the first system call of a
// request on a reused upstream connection).
func peekDontWait(fd uintptr, b []byte) (int, error) {
	n, _, errno := syscall.RawSyscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)),
		syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}
