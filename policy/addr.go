package policy

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"golang.org/x/net/idna"
)

// This file holds the address rules that no policy can override: which
// destinations are always denied, which need `allowed_ips`, and how a host
// string is recognised as an IP literal in every spelling a client accepts.

// ParseHostIP reports whether host is an IP literal and returns the address.
//
// It accepts every spelling an HTTP client or a system resolver turns into
// an address without DNS: dotted decimal, the inet_aton forms (one to four
// parts, each decimal, hexadecimal with 0x, or octal with a leading 0, the
// last part filling the remaining bytes: 2852039166, 0xA9FEA9FE,
// 0251.0376.0251.0376, 169.254.43518, 127.1), IPv6 with or without
// brackets and with a zone (dropped), one trailing dot, any case, and
// full-width digits and dots (UTS #46 maps them to ASCII). The result is
// unmapped: ::ffff:a.b.c.d is returned as the IPv4 address a.b.c.d.
// NAT64 and IPv4-compatible addresses are returned as they are;
// AlwaysDenied and IsPrivate look through them.
//
// Recognising too much is the safe direction here: a host taken for an IP
// is checked as one.
func ParseHostIP(host string) (netip.Addr, bool) {
	h := strings.TrimSpace(host)
	if !isASCII(h) {
		mapped, err := idna.New(idna.MapForLookup()).ToASCII(h)
		if err != nil && mapped == "" {
			return netip.Addr{}, false
		}
		h = mapped
	}
	h = strings.ToLower(h)
	if strings.HasPrefix(h, "[") && strings.HasSuffix(h, "]") {
		return parseIPv6(h[1 : len(h)-1])
	}
	if strings.Contains(h, ":") {
		return parseIPv6(h)
	}
	h = strings.TrimSuffix(h, ".")
	return parseIPv4(h)
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// parseIPv6 parses an IPv6 literal, dropping a zone (written `%zone` or,
// inside URLs, `%25zone`).
func parseIPv6(s string) (netip.Addr, bool) {
	if i := strings.IndexByte(s, '%'); i >= 0 {
		s = s[:i]
	}
	a, err := netip.ParseAddr(s)
	if err != nil || !a.Is6() {
		return netip.Addr{}, false
	}
	return a.Unmap(), true
}

// parseIPv4 implements inet_aton: one to four parts; every part but the last
// is one byte; the last fills the remaining bytes. Parts overflowing their
// bytes are refused, as glibc and the WHATWG URL parser refuse them.
func parseIPv4(s string) (netip.Addr, bool) {
	// A plain dotted quad (no leading zeros) reads the same either way;
	// netip parses it without allocating, which keeps the proxy's per-request
	// address check cheap.
	if a, err := netip.ParseAddr(s); err == nil && a.Is4() {
		return a, true
	}
	if strings.Count(s, ".") > 3 {
		return netip.Addr{}, false
	}
	var buf [4]uint64
	vals := buf[:0]
	for p := range strings.SplitSeq(s, ".") {
		v, ok := parseIPv4Part(p)
		if !ok {
			return netip.Addr{}, false
		}
		vals = append(vals, v)
	}
	var n uint64
	for i, v := range vals[:len(vals)-1] {
		if v > 0xff {
			return netip.Addr{}, false
		}
		n |= v << (8 * (3 - i))
	}
	last := vals[len(vals)-1]
	if last >= 1<<(8*(5-len(vals))) {
		return netip.Addr{}, false
	}
	n |= last
	return netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}), true
}

// parseIPv4Part parses one inet_aton part: 0x-prefixed hex ("0x" alone is
// 0, as in the WHATWG parser), 0-prefixed octal, or decimal.
func parseIPv4Part(p string) (uint64, bool) {
	if p == "" {
		return 0, false
	}
	base, digits := 10, p
	switch {
	case strings.HasPrefix(p, "0x"):
		base, digits = 16, p[2:]
		if digits == "" {
			return 0, true
		}
	case len(p) > 1 && p[0] == '0':
		base, digits = 8, p[1:]
	}
	// With an explicit base, ParseUint takes digits only: no sign, no "_".
	v, err := strconv.ParseUint(digits, base, 32)
	if err != nil {
		return 0, false
	}
	return v, true
}

// metadataAddrs are the cloud metadata and credential endpoints: AWS IMDS
// (IPv4 and IPv6), ECS task credentials, EKS Pod Identity (IPv4 and IPv6),
// Alibaba Cloud, and Azure's WireServer.
var metadataAddrs = []netip.Addr{
	netip.MustParseAddr("169.254.169.254"),
	netip.MustParseAddr("169.254.170.2"),
	netip.MustParseAddr("169.254.170.23"),
	netip.MustParseAddr("fd00:ec2::254"),
	netip.MustParseAddr("fd00:ec2::23"),
	netip.MustParseAddr("100.100.100.200"),
	netip.MustParseAddr("168.63.129.16"),
}

// metadataNames are DNS names of metadata services. "metadata" is GCE's
// short name (reached through the search domain google.internal);
// instance-data is AWS's.
var metadataNames = []string{
	"metadata.google.internal",
	"metadata.azure.internal",
	"metadata",
	"instance-data",
	"instance-data.ec2.internal",
}

// IsMetadataHost reports whether host names a cloud metadata or credential
// service: one of the metadata DNS names (in any spelling lookupName folds)
// or a
// metadata address in any spelling ParseHostIP accepts, including its
// IPv4-mapped, IPv4-compatible and NAT64 forms.
func IsMetadataHost(host string) bool {
	name := lookupName(host)
	for _, m := range metadataNames {
		if name == m {
			return true
		}
	}
	addr, ok := ParseHostIP(host)
	if !ok {
		return false
	}
	for _, a := range withEmbedded(addr).all() {
		if isMetadataAddr(a) {
			return true
		}
	}
	return false
}

func isMetadataAddr(a netip.Addr) bool {
	for _, m := range metadataAddrs {
		if a == m {
			return true
		}
	}
	return false
}

// nat64Prefixes carry an IPv4 address in their last 32 bits: the well-known
// prefix (RFC 6052) and the local-use prefix (RFC 8215) in its /96 layout.
var nat64Prefixes = []netip.Prefix{
	netip.MustParsePrefix("64:ff9b::/96"),
	netip.MustParsePrefix("64:ff9b:1::/48"),
}

// ipv4Compatible is the deprecated IPv4-compatible IPv6 range ::a.b.c.d
// (RFC 4291 §2.5.5.1). Some stacks still parse and route it as the IPv4
// address, so it is one more spelling of that address (:: and ::1 excepted:
// they are the IPv6 unspecified and loopback addresses).
var ipv4Compatible = netip.MustParsePrefix("::/96")

// EmbeddedIPv4 returns the IPv4 address a NAT64 or IPv4-compatible address
// reaches.
func EmbeddedIPv4(a netip.Addr) (netip.Addr, bool) {
	if !a.Is6() {
		return netip.Addr{}, false
	}
	b := a.As16()
	v4 := netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]})
	if ipv4Compatible.Contains(a) && a != netip.IPv6Unspecified() && a != netip.IPv6Loopback() {
		return v4, true
	}
	for _, p := range nat64Prefixes {
		if p.Contains(a) {
			return v4, true
		}
	}
	return netip.Addr{}, false
}

// withEmbedded returns the unmapped address and, for a NAT64 or
// IPv4-compatible address, the IPv4 address it reaches: the addresses a
// rule about destinations must see.
func withEmbedded(a netip.Addr) addrForms {
	a = a.Unmap().WithZone("")
	if v4, ok := EmbeddedIPv4(a); ok {
		return addrForms{a, v4}
	}
	return addrForms{a}
}

// addrForms is an address and, for NAT64 and IPv4-compatible forms, the
// IPv4 address it reaches: a fixed array, so the per-request address
// checks allocate nothing.
type addrForms [2]netip.Addr

// all yields the valid forms, the address itself first.
func (f addrForms) all() []netip.Addr {
	if f[1].IsValid() {
		return f[:]
	}
	return f[:1]
}

// Ranges that are always denied (AlwaysDenied) and those that need
// allowed_ips (IsPrivate). Metadata addresses are checked before these.
var (
	thisNetwork = []netip.Prefix{ // unspecified and RFC 1122 "this network"
		netip.MustParsePrefix("0.0.0.0/8"),
		netip.MustParsePrefix("::/128"),
	}
	loopback = []netip.Prefix{
		netip.MustParsePrefix("127.0.0.0/8"),
		netip.MustParsePrefix("::1/128"),
	}
	linkLocal = []netip.Prefix{
		netip.MustParsePrefix("169.254.0.0/16"),
		netip.MustParsePrefix("fe80::/10"),
	}
	multicastOrBroadcast = []netip.Prefix{
		netip.MustParsePrefix("224.0.0.0/4"),
		netip.MustParsePrefix("240.0.0.0/4"), // reserved, incl. 255.255.255.255
		netip.MustParsePrefix("ff00::/8"),
	}
	privateRanges = []netip.Prefix{
		netip.MustParsePrefix("10.0.0.0/8"),      // RFC 1918
		netip.MustParsePrefix("172.16.0.0/12"),   // RFC 1918
		netip.MustParsePrefix("192.168.0.0/16"),  // RFC 1918
		netip.MustParsePrefix("100.64.0.0/10"),   // CGNAT, RFC 6598
		netip.MustParsePrefix("192.0.0.0/24"),    // IETF protocol assignments
		netip.MustParsePrefix("192.0.2.0/24"),    // TEST-NET-1
		netip.MustParsePrefix("198.51.100.0/24"), // TEST-NET-2
		netip.MustParsePrefix("203.0.113.0/24"),  // TEST-NET-3
		netip.MustParsePrefix("198.18.0.0/15"),   // benchmarking, RFC 2544
		netip.MustParsePrefix("192.88.99.0/24"),  // 6to4 relay anycast (deprecated)
		netip.MustParsePrefix("fc00::/7"),        // ULA
		netip.MustParsePrefix("fec0::/10"),       // site-local (deprecated)
		netip.MustParsePrefix("2001:db8::/32"),   // documentation
		netip.MustParsePrefix("3fff::/20"),       // documentation, RFC 9637
		netip.MustParsePrefix("100::/64"),        // discard-only
		netip.MustParsePrefix("2001::/23"),       // IETF protocol assignments
		netip.MustParsePrefix("64:ff9b:1::/48"),  // local-use NAT64
	}
)

func inAny(a netip.Addr, ps []netip.Prefix) bool {
	for _, p := range ps {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// AlwaysDenied reports whether addr may never be dialled, whatever the
// policy says, and why: unspecified and 0.0.0.0/8, loopback (unless
// devAllowLoopback), link-local (169.254/16, fe80::/10), multicast,
// broadcast and 240/4, and the cloud metadata addresses. IPv4-mapped
// addresses are judged as their IPv4 address; NAT64 and IPv4-compatible
// ones also as the IPv4 address they reach (where loopback is denied even
// with devAllowLoopback: it would be the translator's loopback). The zero
// Addr is denied as invalid.
func AlwaysDenied(addr netip.Addr, devAllowLoopback bool) (reason string, denied bool) {
	if !addr.IsValid() {
		return "invalid address", true
	}
	forms := withEmbedded(addr)
	for i, a := range forms.all() {
		kind := ""
		switch {
		case isMetadataAddr(a):
			kind = "cloud metadata address"
		case inAny(a, thisNetwork):
			kind = "unspecified address"
		case inAny(a, loopback) && (!devAllowLoopback || i > 0):
			kind = "loopback address"
		case inAny(a, linkLocal):
			kind = "link-local address"
		case inAny(a, multicastOrBroadcast):
			kind = "multicast, broadcast or reserved address"
		default:
			continue
		}
		// The description is built only on a denial: allowed requests
		// pass this check without allocating.
		return kind + " " + describeForm(forms, i), true
	}
	return "", false
}

// describeForm names forms[i], saying which form of which address it is.
func describeForm(forms addrForms, i int) string {
	if i == 0 {
		return forms[0].String()
	}
	form := "NAT64"
	if ipv4Compatible.Contains(forms[0]) {
		form = "IPv4-compatible"
	}
	return fmt.Sprintf("%s (%s form of %s)", forms[0], form, forms[i])
}

// IsPrivate reports whether addr is in a private, shared or special-purpose
// range (RFC 1918, CGNAT 100.64/10, ULA fc00::/7, TEST-NETs and
// documentation, benchmarking 198.18/15, …), directly or through its
// IPv4-mapped, IPv4-compatible or NAT64 form. Such a destination is allowed only by an
// endpoint whose allowed_ips covers it — even when the endpoint names an
// exact hostname (a divergence from OpenShell). AlwaysDenied is checked
// first; IsPrivate says nothing about the ranges it denies.
func IsPrivate(addr netip.Addr) bool {
	for _, a := range withEmbedded(addr).all() {
		if inAny(a, privateRanges) {
			return true
		}
	}
	return false
}

// AllowedIPsOverlap reports whether an allowed_ips prefix overlaps a range
// that no policy may open (unspecified, loopback, link-local), directly or
// through the IPv4-mapped (::ffff:0:0/96), IPv4-compatible (::/96) or NAT64
// forms, and which range.
// The validator refuses such entries.
func AllowedIPsOverlap(p netip.Prefix) (reason string, overlaps bool) {
	p = p.Masked()
	groups := []struct {
		name   string
		ranges []netip.Prefix
	}{
		{"unspecified", thisNetwork},
		{"loopback", loopback},
		{"link-local", linkLocal},
	}
	// Direct overlaps first, so ::1 is reported as loopback rather than as
	// the IPv4-compatible spelling of 0.0.0.1.
	for _, viaForms := range []bool{false, true} {
		for _, g := range groups {
			for _, r := range g.ranges {
				forms := []netip.Prefix{r}
				if viaForms {
					forms = prefixForms(r)
				}
				for _, form := range forms {
					if form.Overlaps(p) {
						return fmt.Sprintf("%s overlaps %s range %s", p, g.name, r), true
					}
				}
			}
		}
	}
	return "", false
}

// prefixForms returns an IPv4 prefix with its IPv4-mapped, IPv4-compatible
// and NAT64 IPv6 spellings; an IPv6 prefix alone.
func prefixForms(r netip.Prefix) []netip.Prefix {
	if !r.Addr().Is4() {
		return []netip.Prefix{r}
	}
	v4 := r.Addr().As4()
	mapped := netip.AddrFrom16([16]byte{10: 0xff, 11: 0xff, 12: v4[0], 13: v4[1], 14: v4[2], 15: v4[3]})
	compatible := netip.AddrFrom16([16]byte{12: v4[0], 13: v4[1], 14: v4[2], 15: v4[3]})
	forms := []netip.Prefix{r, netip.PrefixFrom(mapped, 96+r.Bits()), netip.PrefixFrom(compatible, 96+r.Bits())}
	for _, n := range nat64Prefixes {
		b := n.Addr().As16()
		copy(b[12:], v4[:])
		forms = append(forms, netip.PrefixFrom(netip.AddrFrom16(b), 96+r.Bits()))
	}
	return forms
}

// controlPlanePorts are etcd (2379, 2380), the Kubernetes API server (6443)
// and the kubelet (10250, 10255).
var controlPlanePorts = []int{2379, 2380, 6443, 10250, 10255}

// DeniedPort reports whether port is a cluster control-plane port, which no
// policy may open.
func DeniedPort(port int) bool {
	for _, p := range controlPlanePorts {
		if port == p {
			return true
		}
	}
	return false
}

// IsLoopbackName reports whether host is "localhost" or a name under it
// (RFC 6761), which resolvers answer with loopback without asking DNS.
func IsLoopbackName(host string) bool {
	h := lookupName(host)
	return h == "localhost" || strings.HasSuffix(h, ".localhost")
}

// lookupName folds a DNS name the way some client or resolver may before
// asking DNS — UTS #46 mapping (full-width letters, dots), lower case,
// trailing dots dropped — so that the always-denied names are recognised in
// every spelling. Folding too much is the safe direction here: it is used
// only to deny.
func lookupName(host string) string {
	h := strings.TrimSpace(host)
	if !isASCII(h) {
		if mapped, _ := idna.New(idna.MapForLookup()).ToASCII(h); mapped != "" {
			h = mapped
		}
	}
	return strings.TrimRight(strings.ToLower(h), ".")
}
