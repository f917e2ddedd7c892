//go:build !linux

package dataplane

import (
	"errors"
	"fmt"
	"net"
	"runtime"
)

// CallerBinary reports the caller as unknown: finding the process behind a
// socket is implemented for Linux only (procid.go). Rules that name binaries
// do not match.
func CallerBinary(conn net.Conn) (string, error) {
	return "", fmt.Errorf("caller binary: unknown on %s: %w", runtime.GOOS, errors.ErrUnsupported)
}

// CallerProcess reports the caller as unknown, as CallerBinary does.
func CallerProcess(conn net.Conn) (Caller, error) {
	_, err := CallerBinary(conn)
	return Caller{}, err
}
