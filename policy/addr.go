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
	forms := withEmbedded(addr)
	for i := 0; i < forms.n; i++ {
		if isMetadataAddr(forms.addr[i]) {
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
// These are translations: the IPv6 address is that IPv4 address, so
// allowed_ips look through them (EmbeddedIPv4).
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
// reaches. It is the reading allowed_ips use (the permissive direction);
// the always-denied and private checks also see the deny-only forms of
// embeddings.
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

// embedding is an IPv6 range whose addresses carry an IPv4 address: at
// holds the byte offsets of the four IPv4 bytes in the IPv6 address, and
// xor the byte they are XORed with (Teredo obfuscates its client address).
type embedding struct {
	name    string
	carrier netip.Prefix
	at      [4]uint8
	xor     byte
}

// embeddings are every IPv6 form that carries, or is routed to, an IPv4
// address. The always-denied and private checks judge an address by each
// IPv4 address it may stand for, so 169.254.169.254 is refused in all of
// them:
//   - IPv4-compatible ::a.b.c.d (RFC 4291, deprecated);
//   - SIIT IPv4-translated ::ffff:0:a.b.c.d (RFC 2765, RFC 7915);
//   - NAT64 with the well-known prefix 64:ff9b::/96 (RFC 6052);
//   - NAT64 with the local-use prefix 64:ff9b:1::/48 (RFC 8215), in every
//     RFC 6052 layout a /48 admits (/48, /56, /64, /96: the IPv4 bytes skip
//     the reserved octet 8; the octet is not required to be zero here);
//   - 6to4 2002:a.b.c.d::/48 (RFC 3056): packets go to that IPv4 router;
//   - Teredo 2001::/32 (RFC 4380): the server address in bits 32-63 and
//     the client address, XORed with 0xff bytes, in the last 32 bits.
//
// ISATAP (an interface identifier ::5efe:a.b.c.d under any /64) is left
// out: it is routed as IPv4 only by a host with an ISATAP interface, and
// treating every /64 as a carrier would refuse most IPv6 allowed_ips.
var embeddings = []embedding{
	{"IPv4-compatible", ipv4Compatible, [4]uint8{12, 13, 14, 15}, 0},
	{"SIIT IPv4-translated", netip.MustParsePrefix("::ffff:0:0:0/96"), [4]uint8{12, 13, 14, 15}, 0},
	{"NAT64", netip.MustParsePrefix("64:ff9b::/96"), [4]uint8{12, 13, 14, 15}, 0},
	{"NAT64 local-use /96", netip.MustParsePrefix("64:ff9b:1::/48"), [4]uint8{12, 13, 14, 15}, 0},
	{"NAT64 local-use /64", netip.MustParsePrefix("64:ff9b:1::/48"), [4]uint8{9, 10, 11, 12}, 0},
	{"NAT64 local-use /56", netip.MustParsePrefix("64:ff9b:1::/48"), [4]uint8{7, 9, 10, 11}, 0},
	{"NAT64 local-use /48", netip.MustParsePrefix("64:ff9b:1::/48"), [4]uint8{6, 7, 9, 10}, 0},
	{"6to4", netip.MustParsePrefix("2002::/16"), [4]uint8{2, 3, 4, 5}, 0},
	{"Teredo server", netip.MustParsePrefix("2001::/32"), [4]uint8{4, 5, 6, 7}, 0},
	{"Teredo client", netip.MustParsePrefix("2001::/32"), [4]uint8{12, 13, 14, 15}, 0xff},
}

// extract returns the IPv4 address e carries in a (a must be in e.carrier).
func (e *embedding) extract(a netip.Addr) netip.Addr {
	b := a.As16()
	return netip.AddrFrom4([4]byte{b[e.at[0]] ^ e.xor, b[e.at[1]] ^ e.xor, b[e.at[2]] ^ e.xor, b[e.at[3]] ^ e.xor})
}

// maxForms bounds the forms of one address: itself and the four layouts
// of the local-use NAT64 prefix (the carriers are otherwise disjoint, and
// Teredo has two).
const maxForms = 5

// addrForms is an address and the IPv4 addresses it may stand for (see
// embeddings), with the name of each form: fixed arrays, so the
// per-request address checks allocate nothing.
type addrForms struct {
	n     int
	addr  [maxForms]netip.Addr
	names [maxForms]string
}

// withEmbedded returns the unmapped address and every IPv4 address it
// carries: the addresses a rule that denies destinations must see.
func withEmbedded(a netip.Addr) addrForms {
	a = a.Unmap().WithZone("")
	f := addrForms{n: 1}
	f.addr[0] = a
	if !a.Is6() {
		return f
	}
	for i := range embeddings {
		e := &embeddings[i]
		if !e.carrier.Contains(a) || e.carrier == ipv4Compatible && (a == netip.IPv6Unspecified() || a == netip.IPv6Loopback()) {
			continue
		}
		if f.n < maxForms {
			f.addr[f.n], f.names[f.n] = e.extract(a), e.name
			f.n++
		}
	}
	return f
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

// rangeSet is a list of ranges with the first octets of the IPv4
// addresses they hold: most addresses a request dials (public ones) are
// in none of the lists, and are found so without a Contains per prefix.
type rangeSet struct {
	prefixes []netip.Prefix
	octets   [256]bool
}

func newRangeSet(ps []netip.Prefix) *rangeSet {
	s := &rangeSet{prefixes: ps}
	for _, p := range ps {
		if !p.Addr().Is4() {
			continue
		}
		first := int(p.Masked().Addr().As4()[0])
		span := 1 // first octets the prefix covers
		if p.Bits() < 8 {
			span = 1 << (8 - p.Bits())
		}
		for i := first; i < first+span; i++ {
			s.octets[i] = true
		}
	}
	return s
}

var (
	thisNetworkSet          = newRangeSet(thisNetwork)
	loopbackSet             = newRangeSet(loopback)
	linkLocalSet            = newRangeSet(linkLocal)
	multicastOrBroadcastSet = newRangeSet(multicastOrBroadcast)
	privateRangesSet        = newRangeSet(privateRanges)
)

// inAny reports whether a prefix of s holds a.
func inAny(a netip.Addr, s *rangeSet) bool {
	if a.Is4() && !s.octets[a.As4()[0]] {
		return false
	}
	for _, p := range s.prefixes {
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
	// Kinds in order of importance, each over every form, so a metadata
	// address is named as such even when another layout of the same
	// carrier reads as some other denied range.
	for k := 0; k < len(deniedKinds); k++ {
		for i := 0; i < forms.n; i++ {
			a := forms.addr[i]
			var hit bool
			switch k {
			case 0:
				hit = isMetadataAddr(a)
			case 1:
				hit = inAny(a, thisNetworkSet)
			case 2:
				hit = inAny(a, loopbackSet) && (!devAllowLoopback || i > 0)
			case 3:
				hit = inAny(a, linkLocalSet)
			case 4:
				hit = inAny(a, multicastOrBroadcastSet)
			}
			if hit {
				// The description is built only on a denial: allowed
				// requests pass this check without allocating.
				return deniedKinds[k] + " " + describeForm(forms, i), true
			}
		}
	}
	return "", false
}

var deniedKinds = [...]string{
	"cloud metadata address",
	"unspecified address",
	"loopback address",
	"link-local address",
	"multicast, broadcast or reserved address",
}

// describeForm names form i, saying which form of which address it is.
func describeForm(forms addrForms, i int) string {
	if i == 0 {
		return forms.addr[0].String()
	}
	return fmt.Sprintf("%s (%s form of %s)", forms.addr[0], forms.names[i], forms.addr[i])
}

// IsPrivate reports whether addr is in a private, shared or special-purpose
// range (RFC 1918, CGNAT 100.64/10, ULA fc00::/7, TEST-NETs and
// documentation, benchmarking 198.18/15, …), directly or through its
// IPv4-mapped, IPv4-compatible or NAT64 form. Such a destination is allowed only by an
// endpoint whose allowed_ips covers it — even when the endpoint names an
// exact hostname (a divergence from OpenShell). AlwaysDenied is checked
// first; IsPrivate says nothing about the ranges it denies.
func IsPrivate(addr netip.Addr) bool {
	forms := withEmbedded(addr)
	for i := 0; i < forms.n; i++ {
		if inAny(forms.addr[i], privateRangesSet) {
			return true
		}
	}
	return false
}

// AllowedIPsOverlap reports whether an allowed_ips prefix overlaps a range
// that no policy may open (unspecified, loopback, link-local), directly or
// through an IPv6 form that carries an IPv4 address of such a range
// (IPv4-mapped ::ffff:0:0/96 and every embedding AlwaysDenied sees:
// IPv4-compatible, SIIT, NAT64, 6to4, Teredo), and which range.
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
	for _, g := range groups {
		for _, r := range g.ranges {
			if r.Overlaps(p) {
				return fmt.Sprintf("%s overlaps %s range %s", p, g.name, r), true
			}
		}
	}
	if !p.Addr().Is6() {
		return "", false
	}
	for _, g := range groups {
		for _, r := range g.ranges {
			if !r.Addr().Is4() {
				continue
			}
			for i := range carriers {
				if e := &carriers[i]; e.carries(p, r) {
					return fmt.Sprintf("%s overlaps %s range %s (its %s form)", p, g.name, r, e.name), true
				}
			}
		}
	}
	return "", false
}

// carriers are the embeddings plus the IPv4-mapped range, which addresses
// lose when unmapped but prefixes keep.
var carriers = append([]embedding{
	{"IPv4-mapped", netip.MustParsePrefix("::ffff:0:0/96"), [4]uint8{12, 13, 14, 15}, 0},
}, embeddings...)

// pins reports whether the IPv6 prefix p fixes every bit of the IPv4
// address e carries.
func (e *embedding) pins(p netip.Prefix) bool {
	for _, at := range e.at {
		if int(at)*8+8 > p.Bits() {
			return false
		}
	}
	return true
}

// carries reports whether the IPv6 prefix p holds an address of e whose
// carried IPv4 address lies in the IPv4 prefix r: p must overlap e's
// carrier, and every bit of r's prefix must either fall beyond p's fixed
// bits or agree with p there.
func (e *embedding) carries(p, r netip.Prefix) bool {
	if !p.Overlaps(e.carrier) {
		return false
	}
	pb, rb := p.Addr().As16(), r.Addr().As4()
	for i := 0; i < r.Bits(); i++ {
		byteAt := int(e.at[i/8])
		pos := byteAt*8 + i%8
		if pos >= p.Bits() {
			continue
		}
		mask := byte(0x80) >> (i % 8)
		if (pb[byteAt]^e.xor)&mask != rb[i/8]&mask {
			return false
		}
	}
	return true
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
