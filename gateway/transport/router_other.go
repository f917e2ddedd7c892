//go:build !unix

package transport

import (
	"errors"
	"syscall"

	"google.golang.org/grpc/mem"
)

// rawReads: readRaw does not work here.
const rawReads = false

// readRaw is never called where rawReads is false.
func readRaw(syscall.RawConn, int, mem.BufferPool) (*[]byte, int, error) {
	return nil, 0, errors.ErrUnsupported
}
