//go:build linux

// Package netnstest makes network namespaces for tests and benchmarks:
// a Host is a namespace at the other end of a veth pair from the caller's
// own, with addresses of its own, in which servers listen. The tests of
// the transparent path put upstreams there, so that an agent captured by
// `portcullis run` can only reach them through the proxy, which reaches
// them over the veth like any host on a network.
//
// Its addresses are routed to it from the caller's namespace for as long
// as it lives, so they must be addresses nothing else on the machine needs:
// take a small prefix of 198.18.0.0/15 (RFC 2544's benchmarking range),
// never a TEST-NET (a sandbox's own services, its module proxy included,
// may live there). New refuses a prefix another route already covers.
//
// It needs root (or CAP_NET_ADMIN and CAP_SYS_ADMIN) and does all its work
// through netlink, never a command. Every Host must be closed: Close
// removes the veth pair, and the namespace goes with its last socket.
package netnstest

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// Host is a network namespace reached from the caller's namespace over a
// veth pair.
type Host struct {
	ns    netns.NsHandle
	link  string // the caller's end of the veth pair
	addrs []netip.Prefix
}

// New makes a Host. link names the caller's end of the veth pair (at
// most 15 bytes; it must not exist yet), local is that end's address with
// its prefix (the connected route to the Host), and addrs are the Host's
// own addresses, which must be inside local's prefix. The Host's default
// route is local's address.
func New(link string, local netip.Prefix, addrs ...netip.Prefix) (_ *Host, err error) {
	if len(addrs) == 0 {
		return nil, errors.New("netnstest: a host needs an address")
	}
	for _, a := range addrs {
		if !local.Masked().Contains(a.Addr()) {
			return nil, fmt.Errorf("netnstest: %s is outside %s", a, local.Masked())
		}
	}
	if err := unrouted(local.Masked()); err != nil {
		return nil, err
	}
	ns, err := newNamespace()
	if err != nil {
		return nil, err
	}
	h := &Host{ns: ns, link: link, addrs: addrs}
	defer func() {
		if err != nil {
			h.Close()
		}
	}()
	peer := link + "p"
	if len(peer) > 15 {
		return nil, fmt.Errorf("netnstest: link name %q is too long (at most 14 bytes)", link)
	}
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: link}, PeerName: peer, PeerNamespace: netlink.NsFd(int(ns))}
	if err := netlink.LinkAdd(veth); err != nil {
		return nil, fmt.Errorf("netnstest: add veth %s: %w", link, err)
	}
	if err := up(nil, link, local); err != nil {
		return nil, err
	}
	in, err := netlink.NewHandleAt(ns)
	if err != nil {
		return nil, fmt.Errorf("netnstest: netlink in the host's namespace: %w", err)
	}
	defer in.Close()
	if err := up(in, "lo"); err != nil {
		return nil, err
	}
	if err := up(in, peer, addrs...); err != nil {
		return nil, err
	}
	peerLink, err := in.LinkByName(peer)
	if err != nil {
		return nil, fmt.Errorf("netnstest: %s: %w", peer, err)
	}
	gw := net.IP(local.Addr().AsSlice())
	if err := in.RouteAdd(&netlink.Route{LinkIndex: peerLink.Attrs().Index, Gw: gw}); err != nil {
		return nil, fmt.Errorf("netnstest: default route via %s: %w", local.Addr(), err)
	}
	return h, nil
}

// unrouted refuses a prefix that overlaps a route of the caller's
// namespace other than a default route: traffic to it would be diverted.
func unrouted(p netip.Prefix) error {
	routes, err := netlink.RouteList(nil, netlink.FAMILY_V4)
	if err != nil {
		return fmt.Errorf("netnstest: routes: %w", err)
	}
	for _, r := range routes {
		if r.Dst == nil {
			continue
		}
		ones, _ := r.Dst.Mask.Size()
		a, ok := netip.AddrFromSlice(r.Dst.IP.To4())
		if ok && ones > 0 && netip.PrefixFrom(a, ones).Overlaps(p) {
			return fmt.Errorf("netnstest: %s overlaps the route to %s: pick addresses nothing else uses", p, r.Dst)
		}
	}
	return nil
}

// newNamespace makes a network namespace and returns a handle to it,
// leaving the calling thread in its own.
func newNamespace() (netns.NsHandle, error) {
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return 0, fmt.Errorf("netnstest: this thread's namespace: %w", err)
	}
	defer orig.Close()
	ns, err := netns.New() // moves this thread into it
	if err != nil {
		runtime.UnlockOSThread()
		return 0, fmt.Errorf("netnstest: new network namespace (root or CAP_SYS_ADMIN needed): %w", err)
	}
	if err := netns.Set(orig); err != nil {
		ns.Close()
		// The thread stays locked, so it ends with this goroutine
		// instead of serving others in the wrong namespace.
		return 0, fmt.Errorf("netnstest: back to the original namespace: %w", err)
	}
	runtime.UnlockOSThread()
	return ns, nil
}

// up sets link up, with addrs, through h (nil: the caller's namespace).
func up(h *netlink.Handle, name string, addrs ...netip.Prefix) error {
	if h == nil {
		h = &netlink.Handle{}
	}
	l, err := h.LinkByName(name)
	if err != nil {
		return fmt.Errorf("netnstest: %s: %w", name, err)
	}
	for _, a := range addrs {
		ipnet := &net.IPNet{IP: net.IP(a.Addr().AsSlice()), Mask: net.CIDRMask(a.Bits(), a.Addr().BitLen())}
		if err := h.AddrAdd(l, &netlink.Addr{IPNet: ipnet}); err != nil {
			return fmt.Errorf("netnstest: address %s on %s: %w", a, name, err)
		}
	}
	if err := h.LinkSetUp(l); err != nil {
		return fmt.Errorf("netnstest: %s up: %w", name, err)
	}
	return nil
}

// Addrs are the Host's addresses.
func (h *Host) Addrs() []netip.Addr {
	out := make([]netip.Addr, len(h.addrs))
	for i, a := range h.addrs {
		out[i] = a.Addr()
	}
	return out
}

// Listen is net.Listen inside the Host's namespace.
func (h *Host) Listen(network, addr string) (ln net.Listener, err error) {
	err = h.do(func() error {
		ln, err = net.Listen(network, addr)
		return err
	})
	return ln, err
}

// ListenPacket is net.ListenPacket inside the Host's namespace.
func (h *Host) ListenPacket(network, addr string) (pc net.PacketConn, err error) {
	err = h.do(func() error {
		pc, err = net.ListenPacket(network, addr)
		return err
	})
	return pc, err
}

// do runs f on a thread inside the Host's namespace. A socket keeps the
// namespace it was made in, so what f opens may be used from anywhere.
func (h *Host) do(f func() error) error {
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer orig.Close()
	if err := netns.Set(h.ns); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("netnstest: enter the host's namespace: %w", err)
	}
	ferr := f()
	if err := netns.Set(orig); err != nil {
		return errors.Join(ferr, fmt.Errorf("netnstest: back to the original namespace: %w", err))
	}
	runtime.UnlockOSThread()
	return ferr
}

// Close removes the veth pair and lets the namespace go (it ends with
// the last socket made in it).
func (h *Host) Close() error {
	var err error
	if l, lerr := netlink.LinkByName(h.link); lerr == nil {
		err = netlink.LinkDel(l)
	}
	return errors.Join(err, h.ns.Close())
}
