//go:build unix

package transport

import (
	"io"
	"syscall"

	"google.golang.org/grpc/mem"
)

// rawReads: readRaw works here.
const rawReads = true

// readRaw reads from raw into a buffer from pool, taken only once the
// socket is readable.
func readRaw(raw syscall.RawConn, bufSize int, pool mem.BufferPool) (*[]byte, int, error) {
	var (
		buf  *[]byte
		n    int
		rerr error
	)
	err := raw.Read(func(fd uintptr) bool {
		buf = pool.Get(bufSize)
		n, rerr = syscall.Read(int(fd), *buf)
		if rerr != nil {
			pool.Put(buf)
			buf = nil
		}
		return rerr != syscall.EAGAIN && rerr != syscall.EWOULDBLOCK
	})
	switch {
	case err != nil:
		if buf != nil {
			pool.Put(buf)
		}
		return nil, 0, err
	case rerr != nil:
		return nil, 0, rerr
	case n <= 0:
		pool.Put(buf)
		return nil, 0, io.EOF
	}
	return buf, n, nil
}
