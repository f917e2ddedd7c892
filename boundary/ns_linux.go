package boundary

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"runtime"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// nsThread is an OS thread that lives in the sandbox's new network
// namespace: what must happen inside it (its sysctls, starting the
// command, which inherits the thread's namespace at fork) runs there. The
// thread is never unlocked, so the Go runtime ends it with its goroutine
// rather than reuse it in the wrong namespace; a command started from it
// gets Pdeathsig when it ends, so it must live until the command is reaped.
type nsThread struct {
	fd    int // the namespace
	do    chan func()
	ended chan struct{}
}

// newNSThread starts the thread and its namespace.
func newNSThread() (*nsThread, error) {
	t := &nsThread{do: make(chan func()), ended: make(chan struct{})}
	ready := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if unix.Gettid() == unix.Getpid() {
			// The main thread: /proc/PID/ns/net names its namespace,
			// so it stays in the host's. Hold it while another
			// goroutine takes another thread.
			held := make(chan struct{})
			go t.serve(ready, held)
			<-held
			runtime.UnlockOSThread()
			return
		}
		t.serve(ready, nil)
	}()
	if err := <-ready; err != nil {
		<-t.ended
		return nil, err
	}
	return t, nil
}

// serve moves its thread to a new namespace and runs what it is given
// there until do is closed; held, if not nil, is closed once it holds its
// thread.
func (t *nsThread) serve(ready chan<- error, held chan struct{}) {
	defer close(t.ended)
	runtime.LockOSThread() // never unlocked: see nsThread
	if held != nil {
		close(held)
	}
	if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
		ready <- privileges(fmt.Errorf("create the network namespace: %w", err))
		return
	}
	fd, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		ready <- fmt.Errorf("open the network namespace: %w", err)
		return
	}
	t.fd = fd
	ready <- nil
	for f := range t.do {
		f()
	}
}

// run runs f on the thread, in the namespace.
func (t *nsThread) run(f func()) {
	done := make(chan struct{})
	t.do <- func() { f(); close(done) }
	<-done
}

// close ends the thread (and with it the Pdeathsig of anything started
// from it) and closes the namespace's descriptor.
func (t *nsThread) close() {
	close(t.do)
	<-t.ended
	unix.Close(t.fd)
}

// ino is the namespace's inode, as /proc/PID/ns/net of its processes
// names it.
func (t *nsThread) ino() (uint64, error) {
	var st unix.Stat_t
	if err := unix.Fstat(t.fd, &st); err != nil {
		return 0, err
	}
	return st.Ino, nil
}

// privileges turns a permission error into ErrPrivileges.
func privileges(err error) error {
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
		return fmt.Errorf("%w: %v", ErrPrivileges, err)
	}
	return err
}

// link is the veth pair between the host and the sandbox's namespace.
type link struct {
	name       string // host side; the namespace side is eth0
	host, peer netip.Prefix
}

// pickSubnet returns a /30 of r that no host address or route overlaps,
// starting the search at a random place so concurrent runs rarely pick the
// same one.
func pickSubnet(r netip.Prefix) (netip.Prefix, error) {
	addrs, err := netlink.AddrList(nil, netlink.FAMILY_V4)
	if err != nil {
		return netip.Prefix{}, privileges(fmt.Errorf("list the host's addresses: %w", err))
	}
	routes, err := netlink.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: unix.RT_TABLE_UNSPEC}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return netip.Prefix{}, privileges(fmt.Errorf("list the host's routes: %w", err))
	}
	var used []netip.Prefix
	for _, a := range addrs {
		if p, ok := prefixOf(a.IPNet); ok {
			used = append(used, p)
		}
	}
	for _, rt := range routes {
		if p, ok := prefixOf(rt.Dst); ok && p.Bits() > 0 {
			used = append(used, p)
		}
	}
	r = r.Masked()
	if !r.Addr().Is4() || r.Bits() > 30 {
		return netip.Prefix{}, fmt.Errorf("range %s: want an IPv4 prefix of /30 or wider", r)
	}
	n := 1 << (30 - r.Bits())
	start := rand.IntN(n)
	base := ipv4Uint(r.Addr())
	for i := range n {
		s := netip.PrefixFrom(uint32IPv4(base+uint32((start+i)%n)*4), 30)
		if !overlapsAny(s, used) {
			return s, nil
		}
	}
	return netip.Prefix{}, fmt.Errorf("%w in %s", ErrNoRange, r)
}

func overlapsAny(p netip.Prefix, used []netip.Prefix) bool {
	for _, u := range used {
		if p.Overlaps(u) {
			return true
		}
	}
	return false
}

func prefixOf(n *net.IPNet) (netip.Prefix, bool) {
	if n == nil {
		return netip.Prefix{}, false
	}
	a, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	ones, _ := n.Mask.Size()
	return netip.PrefixFrom(a.Unmap(), ones).Masked(), true
}

func ipv4Uint(a netip.Addr) uint32 {
	b := a.As4()
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

func uint32IPv4(v uint32) netip.Addr {
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// addLink makes the veth pair name (host) / eth0 (in the namespace t),
// addressed from subnet, both up, the namespace's default route via the
// host side, IPv6 off on both sides.
func addLink(t *nsThread, name, alias string, subnet netip.Prefix) (*link, error) {
	base := ipv4Uint(subnet.Addr())
	l := &link{
		name: name,
		host: netip.PrefixFrom(uint32IPv4(base+1), 30),
		peer: netip.PrefixFrom(uint32IPv4(base+2), 30),
	}
	// Before eth0 arrives, so it never gets an IPv6 address.
	var sysErr error
	t.run(func() {
		sysErr = sysctls(map[string]string{
			"net/ipv6/conf/all/disable_ipv6":     "1",
			"net/ipv6/conf/default/disable_ipv6": "1",
		})
	})
	if sysErr != nil {
		return nil, sysErr
	}
	veth := &netlink.Veth{
		LinkAttrs:     netlink.LinkAttrs{Name: name, Alias: alias},
		PeerName:      "eth0",
		PeerNamespace: netlink.NsFd(t.fd),
	}
	if err := netlink.LinkAdd(veth); err != nil {
		return nil, privileges(fmt.Errorf("add link %s: %w", name, err))
	}
	if err := l.configure(t); err != nil {
		l.remove()
		return nil, err
	}
	return l, nil
}

func (l *link) configure(t *nsThread) error {
	host, err := netlink.LinkByName(l.name)
	if err != nil {
		return fmt.Errorf("link %s: %w", l.name, err)
	}
	if err := sysctls(map[string]string{"net/ipv6/conf/" + l.name + "/disable_ipv6": "1"}); err != nil {
		return err
	}
	if err := netlink.AddrAdd(host, &netlink.Addr{IPNet: ipNet(l.host)}); err != nil {
		return fmt.Errorf("address %s on %s: %w", l.host, l.name, err)
	}
	if err := netlink.LinkSetUp(host); err != nil {
		return fmt.Errorf("link %s up: %w", l.name, err)
	}
	h, err := netlink.NewHandleAt(netns.NsHandle(t.fd))
	if err != nil {
		return fmt.Errorf("netlink in the namespace: %w", err)
	}
	defer h.Close()
	lo, err := h.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("lo in the namespace: %w", err)
	}
	if err := h.LinkSetUp(lo); err != nil {
		return fmt.Errorf("lo up in the namespace: %w", err)
	}
	eth0, err := h.LinkByName("eth0")
	if err != nil {
		return fmt.Errorf("eth0 in the namespace: %w", err)
	}
	if err := h.AddrAdd(eth0, &netlink.Addr{IPNet: ipNet(l.peer)}); err != nil {
		return fmt.Errorf("address %s on eth0 in the namespace: %w", l.peer, err)
	}
	if err := h.LinkSetUp(eth0); err != nil {
		return fmt.Errorf("eth0 up in the namespace: %w", err)
	}
	gw := l.host.Addr().AsSlice()
	if err := h.RouteAdd(&netlink.Route{LinkIndex: eth0.Attrs().Index, Gw: gw}); err != nil {
		return fmt.Errorf("default route in the namespace: %w", err)
	}
	// A DNS query to a loopback stub is DNATed out of eth0 with its
	// loopback source until masqueraded: let eth0 route it.
	var sysErr error
	t.run(func() { sysErr = sysctls(map[string]string{"net/ipv4/conf/eth0/route_localnet": "1"}) })
	return sysErr
}

// remove deletes the pair (its host side; the other goes with it).
func (l *link) remove() error {
	return removeLink(l.name)
}

func removeLink(name string) error {
	ln, err := netlink.LinkByName(name)
	if err != nil {
		if _, ok := errors.AsType[netlink.LinkNotFoundError](err); ok {
			return nil
		}
		return err
	}
	if err := netlink.LinkDel(ln); err != nil && !errors.Is(err, unix.ENODEV) {
		return fmt.Errorf("delete link %s: %w", name, err)
	}
	return nil
}

func ipNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), 32)}
}

// sysctls writes /proc/sys entries, in the network namespace of the
// calling thread. IPv6 entries are skipped on a kernel without IPv6.
func sysctls(kv map[string]string) error {
	for k, v := range kv {
		err := os.WriteFile("/proc/sys/"+k, []byte(v), 0)
		if errors.Is(err, os.ErrNotExist) && len(k) > 8 && k[:8] == "net/ipv6" {
			continue
		}
		if err != nil {
			return privileges(fmt.Errorf("sysctl %s: %w", k, err))
		}
	}
	return nil
}
