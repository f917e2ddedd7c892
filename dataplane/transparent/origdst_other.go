//go:build !linux

package transparent

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
)

// OriginalDst is an error: redirected connections are Linux's (NAT and
// SO_ORIGINAL_DST).
func OriginalDst(net.Conn) (netip.AddrPort, error) {
	return netip.AddrPort{}, fmt.Errorf("original destination: unknown on %s: %w", runtime.GOOS, errors.ErrUnsupported)
}
