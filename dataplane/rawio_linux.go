package dataplane

import (
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// rawConn is a TCP connection whose Read and Write make their system
// calls without telling the Go scheduler, as the runtime's own network
// poller makes its non-blocking epoll_wait.
//
// Why: a socket of the net package is non-blocking, so its read and write
// never wait, yet the net package enters them as calls that might block:
// the scheduler records the goroutine as in a system call (entersyscall
// and exitsyscall around each), its P may be handed to another thread by
// the runtime's monitor (sysmon) while the kernel works, and the first
// call after the process was idle wakes that monitor. The proxy makes
// four such calls a request. Made raw, a call is ordinary running code to
// the scheduler. Measured with bench/proxyload (BENCHMARKS.md, session
// 27): at one client the proxy's CPU per request over direct fell 5–16%;
// at saturation the change is within the noise.
//
// Waiting is unchanged: a read that would block (EAGAIN) parks the
// goroutine in the network poller through syscall.RawConn, deadlines and
// Close included, exactly as net.Conn's own Read does. Writes use
// send(MSG_NOSIGNAL), so a peer that went away is EPIPE, never a signal.
// Every method other than Read and Write is the TCP connection's own.
type rawConn struct {
	*net.TCPConn
	rc syscall.RawConn

	rmu   sync.Mutex // one Read at a time holds rbuf
	rbuf  []byte
	rn    int
	rerr  syscall.Errno
	readf func(fd uintptr) bool

	wmu    sync.Mutex // one Write at a time holds wbuf
	wbuf   []byte
	wn     int
	werr   syscall.Errno
	writef func(fd uintptr) bool
}

// maxRW bounds one system call's length, as internal/poll does.
const maxRW = 1 << 30

// withRawIO returns c with raw reads and writes when it is a TCP
// connection, else c itself.
func withRawIO(c net.Conn) net.Conn {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return c
	}
	r := &rawConn{TCPConn: tc, rc: rc}
	// The two callbacks are made once per connection, so that a read or
	// a write allocates nothing.
	r.readf = func(fd uintptr) bool {
		for {
			n, _, e := unix.RawSyscall(unix.SYS_READ, fd, uintptr(unsafe.Pointer(&r.rbuf[0])), uintptr(len(r.rbuf)))
			switch e {
			case unix.EINTR:
				continue
			case unix.EAGAIN:
				return false // park until readable
			case 0:
				r.rn = int(n)
			}
			r.rerr = e
			return true
		}
	}
	r.writef = func(fd uintptr) bool {
		for r.wn < len(r.wbuf) {
			p := r.wbuf[r.wn:min(len(r.wbuf), r.wn+maxRW)]
			n, _, e := unix.RawSyscall6(unix.SYS_SENDTO, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)), unix.MSG_NOSIGNAL, 0, 0)
			switch e {
			case 0:
				r.wn += int(n)
			case unix.EINTR:
			case unix.EAGAIN:
				return false // park until writable
			default:
				r.werr = e
				return true
			}
		}
		return true
	}
	return r
}

// Read reads as net.Conn's Read does: 0 and io.EOF once the peer closed,
// a *net.OpError otherwise.
func (r *rawConn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	r.rmu.Lock()
	r.rbuf, r.rn, r.rerr = p[:min(len(p), maxRW)], 0, 0
	err := r.rc.Read(r.readf)
	n, e := r.rn, r.rerr
	r.rbuf = nil
	r.rmu.Unlock()
	switch {
	case err != nil:
		return 0, err // closed, or past the deadline: the poller's own error
	case e != 0:
		return 0, r.opError("read", e)
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// Write writes all of p unless an error stops it, as net.Conn's does.
func (r *rawConn) Write(p []byte) (int, error) {
	r.wmu.Lock()
	r.wbuf, r.wn, r.werr = p, 0, 0
	err := r.rc.Write(r.writef)
	n, e := r.wn, r.werr
	r.wbuf = nil
	r.wmu.Unlock()
	switch {
	case err != nil:
		return n, err
	case e != 0:
		return n, r.opError("write", e)
	}
	return n, nil
}

func (r *rawConn) opError(op string, e syscall.Errno) error {
	return &net.OpError{Op: op, Net: "tcp", Source: r.LocalAddr(), Addr: r.RemoteAddr(), Err: os.NewSyscallError(op, e)}
}

// NetConn returns the TCP connection underneath.
func (r *rawConn) NetConn() net.Conn { return r.TCPConn }
