//go:build !linux

package identity

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
)

// Binary reports the caller as unknown: finding the process behind a
// socket is implemented for Linux only (procid.go). Rules that name binaries
// do not match.
func Binary(conn net.Conn) (string, error) {
	c, err := Of(conn)
	return c.Binary, err
}

// Of reports the caller as unknown, as Binary does.
func Of(conn net.Conn) (Caller, error) {
	_, err := look(conn)
	return Caller{}, err
}

// sighting is empty: nothing is ever seen.
type sighting struct{}

func look(net.Conn) (sighting, error) {
	return sighting{}, fmt.Errorf("caller binary: unknown on %s: %w", runtime.GOOS, errors.ErrUnsupported)
}

func (sighting) caller() Caller         { return Caller{} }
func (sighting) same(sighting) bool     { return false }
func (sighting) errorf(err error) error { return err }

// OfRedirected reports the caller as unknown, as Of does.
func OfRedirected(conn net.Conn, _ netip.AddrPort) (Caller, error) { return Of(conn) }

func lookRedirected(conn net.Conn, _ netip.AddrPort) (sighting, error) { return look(conn) }
