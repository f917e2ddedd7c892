//go:build linux

package transparent

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"syscall"
	"unsafe"
)

// soOriginalDst is SO_ORIGINAL_DST at level IPPROTO_IP (a sockaddr_in)
// and IP6T_SO_ORIGINAL_DST at level IPPROTO_IPV6 (a sockaddr_in6): the
// destination conntrack recorded before NAT redirected the connection.
const soOriginalDst = 80

// OriginalDst returns where a redirected connection was sent
// (dataplane.Config.OriginalDst's default). A connection no NAT rewrote has its
// own local address there; one conntrack does not track, an error.
func OriginalDst(conn net.Conn) (netip.AddrPort, error) {
	for {
		nc, ok := conn.(interface{ NetConn() net.Conn })
		if !ok {
			break
		}
		conn = nc.NetConn()
	}
	tc, ok := conn.(*net.TCPConn)
	if !ok {
		return netip.AddrPort{}, fmt.Errorf("original destination: %T is not a TCP connection", conn)
	}
	local, _ := tc.LocalAddr().(*net.TCPAddr)
	level := syscall.IPPROTO_IPV6
	if local != nil && local.IP.To4() != nil {
		level = syscall.IPPROTO_IP
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("original destination: %w", err)
	}
	// IPv6MTUInfo is 32 bytes, room for either sockaddr; the kernel
	// writes one at its start.
	var info *syscall.IPv6MTUInfo
	var gerr error
	if err := rc.Control(func(fd uintptr) { info, gerr = syscall.GetsockoptIPv6MTUInfo(int(fd), level, soOriginalDst) }); err != nil {
		return netip.AddrPort{}, fmt.Errorf("original destination: %w", err)
	}
	if gerr != nil {
		return netip.AddrPort{}, fmt.Errorf("original destination (SO_ORIGINAL_DST): %w", gerr)
	}
	return parseSockaddr((*[syscall.SizeofSockaddrInet6]byte)(unsafe.Pointer(&info.Addr))[:])
}

// parseSockaddr reads a sockaddr_in or sockaddr_in6 as the kernel wrote
// it: the family in host order, the port in network order.
func parseSockaddr(b []byte) (netip.AddrPort, error) {
	port := binary.BigEndian.Uint16(b[2:4])
	switch binary.NativeEndian.Uint16(b[0:2]) {
	case syscall.AF_INET:
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[4:8])), port), nil
	case syscall.AF_INET6:
		return netip.AddrPortFrom(netip.AddrFrom16([16]byte(b[8:24])).Unmap(), port), nil
	}
	return netip.AddrPort{}, fmt.Errorf("original destination: address family %d", binary.NativeEndian.Uint16(b[0:2]))
}
