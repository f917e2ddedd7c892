package prover

import (
	"net/netip"
	"strings"

	"github.com/portcullis-dev/portcullis/policy"
)

// allowedIPsContains is policy's allowed_ips membership: CIDRs or single
// addresses (invalid entries cover nothing), checked on the address and
// on the IPv4 address a NAT64 or IPv4-compatible address reaches.
func allowedIPsContains(list []string, addr netip.Addr) bool {
	forms := []netip.Addr{addr.Unmap().WithZone("")}
	if v4, ok := policy.EmbeddedIPv4(forms[0]); ok {
		forms = append(forms, v4)
	}
	for _, s := range list {
		prefix, ok := policy.ParseAllowedIP(s)
		if !ok {
			continue
		}
		for _, a := range forms {
			if prefix.Contains(a) {
				return true
			}
		}
	}
	return false
}

// fixedAddrs are addresses of the classes policy treats apart whatever a
// policy says: public and private IPv4 and IPv6, CGNAT, NAT64.
var fixedAddrs = []string{
	"93.184.216.34", "8.8.4.4", "2606:4700::1111",
	"10.1.2.3", "172.16.5.4", "192.168.1.1", "100.64.1.1", "fd12:3456::1",
	"64:ff9b::a01:203", "64:ff9b::5db8:d822",
}

// addressCandidates returns addresses covering every region of the family
// of prefixes: prefixes are nested or disjoint (a laminar family), so each
// region "inside P, outside its sub-prefixes" is a union of intervals
// whose ends are P's first or last address or neighbours of a
// sub-prefix's ends. Taking all of those, plus a few addresses near them
// (the private, reserved and always-denied ranges are not prefixes of the
// policy and are sampled there), realises every allowed_ips membership
// vector.
func addressCandidates(lists [][]string, hostIPs []netip.Addr) []netip.Addr {
	var prefixes []netip.Prefix
	for _, l := range lists {
		for _, s := range l {
			if p, ok := policy.ParseAllowedIP(s); ok {
				prefixes = append(prefixes, p)
				if v4, ok := policy.EmbeddedIPv4(p.Addr()); ok && p.Bits() >= 96 {
					prefixes = append(prefixes, netip.PrefixFrom(v4, p.Bits()-96))
				}
			}
		}
	}
	seen := map[netip.Addr]bool{}
	var out []netip.Addr
	add := func(a netip.Addr) {
		if a.IsValid() && !seen[a] {
			seen[a] = true
			out = append(out, a)
		}
	}
	for _, s := range fixedAddrs {
		add(netip.MustParseAddr(s))
	}
	for _, a := range hostIPs {
		add(a)
	}
	for _, p := range prefixes {
		first := p.Addr()
		last := lastAddr(p)
		for _, a := range []netip.Addr{first, first.Next(), first.Next().Next(), last, last.Prev(), last.Prev().Prev(), first.Prev(), last.Next(), midAddr(p)} {
			add(a)
		}
	}
	return out
}

func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Addr().AsSlice()
	bits := p.Bits()
	for i := range b {
		for j := 0; j < 8; j++ {
			if i*8+j >= bits {
				b[i] |= 0x80 >> j
			}
		}
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

func midAddr(p netip.Prefix) netip.Addr {
	if p.Bits() >= p.Addr().BitLen() {
		return p.Addr()
	}
	b := p.Addr().AsSlice()
	i := p.Bits()
	b[i/8] |= 0x80 >> (i % 8)
	// and a few low bits, away from the ends
	b[len(b)-1] |= 0x05
	a, _ := netip.AddrFromSlice(b)
	if p.Contains(a) {
		return a
	}
	return p.Addr()
}

// hostIP parses an IP-literal host pattern.
func hostIP(h string) (netip.Addr, bool) {
	h = strings.TrimSuffix(strings.TrimPrefix(policy.NormalizeHost(h), "["), "]")
	return policy.ParseHostIP(h)
}
