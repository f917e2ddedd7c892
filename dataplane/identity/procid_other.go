//go:build !linux

package identity

import (
	"errors"
	"fmt"
	"net"
	"runtime"
)

// Binary reports the caller as unknown: finding the process behind a
// socket is implemented for Linux only (procid.go). Rules that name binaries
// do not match.
func Binary(conn net.Conn) (string, error) {
	return "", fmt.Errorf("caller binary: unknown on %s: %w", runtime.GOOS, errors.ErrUnsupported)
}

// Of reports the caller as unknown, as Binary does.
func Of(conn net.Conn) (Caller, error) {
	_, err := Binary(conn)
	return Caller{}, err
}
