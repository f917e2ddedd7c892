package decision

import "net/netip"

// AddrText is a.String(), a record's Addr, without allocating when host,
// the request's host, already spells it: an IPv4 literal, which the proxy
// dials as written. netip.ParseAddr reads an IPv4 address only as four
// decimal fields without leading zeros, so a host it reads as a is a's
// one spelling.
func AddrText(host string, a netip.Addr) string {
	if a.Is4() {
		if h, err := netip.ParseAddr(host); err == nil && h == a {
			return host
		}
	}
	return a.String()
}
