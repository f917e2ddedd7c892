package boundary

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// ipsDstNAT is IPS_DST_NAT, conntrack's "destination was NATed" status bit.
const ipsDstNAT = 0x20

// hostRules installs the host side's table for the link named link whose
// namespace side has the address peer: TCP and UDP/53 from link DNATed to
// proxy, nothing else from it accepted or forwarded.
func hostRules(table, link string, proxy netip.AddrPort) error {
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	t := c.AddTable(&nftables.Table{Name: table, Family: nftables.TableFamilyINet})
	pre := c.AddChain(&nftables.Chain{Name: "to_the_proxy", Table: t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityNATDest})
	dnat := dnatTo(proxy)
	c.AddRule(&nftables.Rule{Table: t, Chain: pre, Exprs: cat(iifname(link), isIPv4(), l4proto(unix.IPPROTO_TCP), dnat)})
	c.AddRule(&nftables.Rule{Table: t, Chain: pre, Exprs: cat(iifname(link), isIPv4(), udpDport(53), dnat)})

	accept := nftables.ChainPolicyAccept
	in := c.AddChain(&nftables.Chain{Name: "only_the_proxy", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookInput, Priority: nftables.ChainPriorityFilter, Policy: &accept})
	c.AddRule(&nftables.Rule{Table: t, Chain: in, Exprs: cat(iifname(link), ctDNATed(), verdict(expr.VerdictAccept))})
	c.AddRule(&nftables.Rule{Table: t, Chain: in, Exprs: cat(iifname(link), verdict(expr.VerdictDrop))})

	fwd := c.AddChain(&nftables.Chain{Name: "no_forwarding", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter, Policy: &accept})
	c.AddRule(&nftables.Rule{Table: t, Chain: fwd, Exprs: cat(iifname(link), verdict(expr.VerdictDrop))})
	c.AddRule(&nftables.Rule{Table: t, Chain: fwd, Exprs: cat(oifname(link), verdict(expr.VerdictDrop))})
	if err := c.Flush(); err != nil {
		return fmt.Errorf("nftables: table %s: %w", table, err)
	}
	return nil
}

// nsRules installs the namespace side's table (the namespace nsFD):
// loopback accepted, TCP and UDP/53 accepted (the host DNATs them to the
// proxy), everything else dropped; DNS to a loopback address DNATed to
// the host side's address hostAddr and masqueraded out of eth0.
func nsRules(nsFD int, hostAddr netip.Addr) error {
	c, err := nftables.New(nftables.WithNetNSFd(nsFD))
	if err != nil {
		return fmt.Errorf("nftables in the namespace: %w", err)
	}
	t := c.AddTable(&nftables.Table{Name: sidecarTable, Family: nftables.TableFamilyINet})
	drop := nftables.ChainPolicyDrop
	out := c.AddChain(&nftables.Chain{Name: "only_the_proxy", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityFilter, Policy: &drop})
	c.AddRule(&nftables.Rule{Table: t, Chain: out, Exprs: cat(oifname("lo"), verdict(expr.VerdictAccept))})
	c.AddRule(&nftables.Rule{Table: t, Chain: out, Exprs: cat(isIPv4(), l4proto(unix.IPPROTO_TCP), verdict(expr.VerdictAccept))})
	c.AddRule(&nftables.Rule{Table: t, Chain: out, Exprs: cat(isIPv4(), udpDport(53), verdict(expr.VerdictAccept))})

	stub := c.AddChain(&nftables.Chain{Name: "loopback_dns", Table: t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityNATDest})
	c.AddRule(&nftables.Rule{Table: t, Chain: stub, Exprs: cat(isIPv4(), daddrLoopback(), udpDport(53),
		dnatTo(netip.AddrPortFrom(hostAddr, 53)))})
	masq := c.AddChain(&nftables.Chain{Name: "loopback_dns_source", Table: t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityNATSource})
	c.AddRule(&nftables.Rule{Table: t, Chain: masq, Exprs: cat(oifname("eth0"), isIPv4(), saddrLoopback(), []expr.Any{&expr.Masq{}})})
	if err := c.Flush(); err != nil {
		return fmt.Errorf("nftables in the namespace: %w", err)
	}
	return nil
}

// removeTable deletes the host's inet table name, if it is there.
func removeTable(name string) error {
	c, err := nftables.New()
	if err != nil {
		return err
	}
	c.DelTable(&nftables.Table{Name: name, Family: nftables.TableFamilyINet})
	if err := c.Flush(); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("delete table %s: %w", name, err)
	}
	return nil
}

func cat(parts ...[]expr.Any) []expr.Any {
	var all []expr.Any
	for _, p := range parts {
		all = append(all, p...)
	}
	return all
}

// ifname is an interface name as the kernel compares it (IFNAMSIZ).
func ifname(name string) []byte {
	b := make([]byte, unix.IFNAMSIZ)
	copy(b, name)
	return b
}

func iifname(name string) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ifname(name)},
	}
}

func oifname(name string) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyOIFNAME, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ifname(name)},
	}
}

func isIPv4() []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.NFPROTO_IPV4}},
	}
}

func l4proto(p byte) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{p}},
	}
}

func udpDport(port uint16) []expr.Any {
	return append(l4proto(unix.IPPROTO_UDP),
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(port)},
	)
}

// loopback4 matches the IPv4 header field at offset (12 source, 16
// destination) against 127.0.0.0/8.
func loopback4(offset uint32) []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: offset, Len: 4},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: []byte{255, 0, 0, 0}, Xor: []byte{0, 0, 0, 0}},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{127, 0, 0, 0}},
	}
}

func saddrLoopback() []expr.Any { return loopback4(12) }
func daddrLoopback() []expr.Any { return loopback4(16) }

// ctDNATed matches packets of connections whose destination was NATed.
func ctDNATed() []expr.Any {
	return []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeySTATUS},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(ipsDstNAT), Xor: binaryutil.NativeEndian.PutUint32(0)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(0)},
	}
}

// dnatTo rewrites the destination to to (IPv4).
func dnatTo(to netip.AddrPort) []expr.Any {
	a := to.Addr().As4()
	return []expr.Any{
		&expr.Immediate{Register: 1, Data: a[:]},
		&expr.Immediate{Register: 2, Data: binaryutil.BigEndian.PutUint16(to.Port())},
		&expr.NAT{Type: expr.NATTypeDestNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: 1, RegProtoMin: 2, Specified: true},
	}
}

func verdict(k expr.VerdictKind) []expr.Any { return []expr.Any{&expr.Verdict{Kind: k}} }
