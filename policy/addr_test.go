package policy

import (
	"net/netip"
	"strings"
	"testing"
)

func TestParseHostIP(t *testing.T) {
	tests := []struct {
		host string
		want string // "" = not an IP literal
	}{
		{"169.254.169.254", "169.254.169.254"},
		{"2852039166", "169.254.169.254"},
		{"0xA9FEA9FE", "169.254.169.254"},
		{"0xa9fea9fe", "169.254.169.254"},
		{"0xa9.0xfe.0xa9.0xfe", "169.254.169.254"},
		{"0XA9.0XFE.0XA9.0XFE", "169.254.169.254"},
		{"0251.0376.0251.0376", "169.254.169.254"},
		{"0251.254.0xa9.254", "169.254.169.254"},
		{"169.254.43518", "169.254.169.254"},
		{"169.16689662", "169.254.169.254"},
		{"127.1", "127.0.0.1"},
		{"127.0.1", "127.0.0.1"},
		{"0", "0.0.0.0"},
		{"0x", "0.0.0.0"},
		{"017700000001", "127.0.0.1"},
		{"127.0.0.1.", "127.0.0.1"},
		{" 127.0.0.1 ", "127.0.0.1"},
		{"１２７．０．０．１", "127.0.0.1"},
		{"[::1]", "::1"},
		{"::1", "::1"},
		{"[fe80::1%25eth0]", "fe80::1"},
		{"fe80::1%eth0", "fe80::1"},
		{"[::ffff:169.254.169.254]", "169.254.169.254"},
		{"::ffff:a9fe:a9fe", "169.254.169.254"},
		{"[FD00:EC2::254]", "fd00:ec2::254"},
		{"[64:ff9b::a9fe:a9fe]", "64:ff9b::a9fe:a9fe"},
		{"256.1.1.1", ""},
		{"1.2.3.4.5", ""},
		{"4294967296", ""},
		{"1.16777216", ""},
		{"08.1.1.1", ""},
		{"1..1", ""},
		{"example.com", ""},
		{"1e100.net", ""},
		{"deadbeef", ""},
		{"", ""},
		{"127.0.0.1..", ""},
		{"[127.0.0.1]", ""},
		{"-1", ""},
		{"+1", ""},
		{"1_0", ""},
	}
	for _, tt := range tests {
		got, ok := ParseHostIP(tt.host)
		if tt.want == "" {
			if ok {
				t.Errorf("ParseHostIP(%q) = %v, want not an IP", tt.host, got)
			}
			continue
		}
		if !ok || got != netip.MustParseAddr(tt.want) {
			t.Errorf("ParseHostIP(%q) = %v, %v; want %s", tt.host, got, ok, tt.want)
		}
	}
}

func TestIsMetadataHost(t *testing.T) {
	yes := []string{
		"169.254.169.254", "2852039166", "0xA9FEA9FE", "0xa9.0xfe.0xa9.0xfe", "0251.0376.0251.0376",
		"169.254.43518", "169.254.169.254.", "[::ffff:169.254.169.254]", "::ffff:a9fe:a9fe",
		"[64:ff9b::169.254.169.254]", "64:ff9b::a9fe:a9fe",
		"169.254.170.2", "2852039170", "[::ffff:a9fe:aa02]",
		"169.254.170.23", "169.254.43543",
		"fd00:ec2::254", "[FD00:EC2:0::254]", "[fd00:ec2::23]",
		"100.100.100.200", "0x646464c8", "[64:ff9b::100.100.100.200]",
		"168.63.129.16", "2822734096", "[::ffff:168.63.129.16]",
		"metadata.google.internal", "METADATA.Google.Internal.", "metadata.azure.internal",
		"metadata", "instance-data",
	}
	for _, h := range yes {
		if !IsMetadataHost(h) {
			t.Errorf("IsMetadataHost(%q) = false, want true", h)
		}
	}
	no := []string{
		"169.254.169.253", "example.com", "metadata.google.internal.evil.com",
		"xmetadata.google.internal", "10.0.0.1", "fd00:ec2::255", "",
	}
	for _, h := range no {
		if IsMetadataHost(h) {
			t.Errorf("IsMetadataHost(%q) = true, want false", h)
		}
	}
}

func TestAlwaysDenied(t *testing.T) {
	tests := []struct {
		addr    string
		dev     bool
		denied  bool
		contain string
	}{
		{"127.0.0.1", false, true, "loopback"},
		{"127.255.0.9", false, true, "loopback"},
		{"::1", false, true, "loopback"},
		{"::ffff:127.0.0.1", false, true, "loopback"},
		{"64:ff9b::7f00:1", false, true, "loopback"},
		{"127.0.0.1", true, false, ""},
		{"::1", true, false, ""},
		{"::ffff:127.0.0.1", true, false, ""},
		{"64:ff9b::7f00:1", true, true, "NAT64"},
		{"169.254.1.1", false, true, "link-local"},
		{"::ffff:169.254.1.1", false, true, "link-local"},
		{"fe80::1", false, true, "link-local"},
		{"febf::1", false, true, "link-local"},
		{"0.0.0.0", false, true, "unspecified"},
		{"0.1.2.3", false, true, "unspecified"},
		{"::", false, true, "unspecified"},
		{"::ffff:0.0.0.0", false, true, "unspecified"},
		{"224.0.0.1", false, true, "multicast"},
		{"239.255.255.250", false, true, "multicast"},
		{"255.255.255.255", false, true, "broadcast"},
		{"240.0.0.1", false, true, "reserved"},
		{"ff02::1", false, true, "multicast"},
		{"169.254.169.254", true, true, "metadata"},
		{"169.254.170.2", false, true, "metadata"},
		{"169.254.170.23", false, true, "metadata"},
		{"fd00:ec2::254", false, true, "metadata"},
		{"fd00:ec2::23", false, true, "metadata"},
		{"100.100.100.200", false, true, "metadata"},
		{"168.63.129.16", false, true, "metadata"},
		{"::ffff:168.63.129.16", false, true, "metadata"},
		{"64:ff9b::a83f:8110", false, true, "metadata"},
		{"64:ff9b:1::a9fe:a9fe", false, true, "metadata"},
		{"8.8.8.8", false, false, ""},
		{"10.0.0.1", false, false, ""},
		{"2606:4700::1111", false, false, ""},
		{"64:ff9b::808:808", false, false, ""},
	}
	for _, tt := range tests {
		reason, denied := AlwaysDenied(netip.MustParseAddr(tt.addr), tt.dev)
		if denied != tt.denied || !strings.Contains(reason, tt.contain) {
			t.Errorf("AlwaysDenied(%s, dev=%v) = %q, %v; want denied=%v containing %q", tt.addr, tt.dev, reason, denied, tt.denied, tt.contain)
		}
	}
	if _, denied := AlwaysDenied(netip.Addr{}, false); !denied {
		t.Error("AlwaysDenied(zero Addr) allowed, want denied")
	}
}

func TestAlwaysDeniedThroughParseHostIP(t *testing.T) {
	for _, h := range []string{"127.1", "0x7f000001", "017700000001", "2130706433", "[::ffff:7f00:1]", "0", "0x0.0", "169.254.1", "[fe80::1%25en0]"} {
		a, ok := ParseHostIP(h)
		if !ok {
			t.Errorf("ParseHostIP(%q) not an IP", h)
			continue
		}
		if _, denied := AlwaysDenied(a, false); !denied {
			t.Errorf("AlwaysDenied(ParseHostIP(%q) = %v) allowed, want denied", h, a)
		}
	}
}

func TestIsPrivate(t *testing.T) {
	yes := []string{
		"10.1.2.3", "172.16.0.1", "172.31.255.255", "192.168.1.1", "100.64.0.1", "100.127.255.255",
		"192.0.2.1", "198.51.100.7", "203.0.113.9", "198.18.0.1", "198.19.255.255", "192.0.0.8",
		"fc00::1", "fd12:3456::1", "2001:db8::1", "::ffff:10.0.0.1", "64:ff9b::a00:1", "64:ff9b:1::1",
		"fec0::1", "100::1", "3fff::1",
	}
	for _, a := range yes {
		if !IsPrivate(netip.MustParseAddr(a)) {
			t.Errorf("IsPrivate(%s) = false, want true", a)
		}
	}
	no := []string{"8.8.8.8", "172.32.0.1", "100.128.0.1", "1.1.1.1", "2606:4700::1111", "64:ff9b::808:808", "198.20.0.1"}
	for _, a := range no {
		if IsPrivate(netip.MustParseAddr(a)) {
			t.Errorf("IsPrivate(%s) = true, want false", a)
		}
	}
}

func TestDeniedPort(t *testing.T) {
	for _, p := range []int{2379, 2380, 6443, 10250, 10255} {
		if !DeniedPort(p) {
			t.Errorf("DeniedPort(%d) = false", p)
		}
	}
	for _, p := range []int{80, 443, 8443, 10251, 2378} {
		if DeniedPort(p) {
			t.Errorf("DeniedPort(%d) = true", p)
		}
	}
}

func TestAllowedIPsOverlap(t *testing.T) {
	tests := []struct {
		prefix string
		want   bool
	}{
		{"10.0.0.0/8", false},
		{"100.64.0.0/10", false},
		{"fc00::/7", false},
		{"0.0.0.0/0", true},
		{"127.0.0.0/8", true},
		{"127.0.0.1/32", true},
		{"96.0.0.0/3", true},
		{"169.254.0.0/16", true},
		{"169.254.169.254/32", true},
		{"0.0.0.0/32", true},
		{"::/0", true},
		{"::1/128", true},
		{"fe80::/10", true},
		{"::ffff:0:0/96", true},
		{"::ffff:127.0.0.1/128", true},
		{"64:ff9b::/96", true},
		{"2600::/16", false},
	}
	for _, tt := range tests {
		reason, got := AllowedIPsOverlap(netip.MustParsePrefix(tt.prefix))
		if got != tt.want {
			t.Errorf("AllowedIPsOverlap(%s) = %q, %v; want %v", tt.prefix, reason, got, tt.want)
		}
	}
}

func TestIsLoopbackName(t *testing.T) {
	for _, h := range []string{"localhost", "LOCALHOST.", "foo.localhost"} {
		if !IsLoopbackName(h) {
			t.Errorf("IsLoopbackName(%q) = false", h)
		}
	}
	for _, h := range []string{"localhost.example.com", "mylocalhost"} {
		if IsLoopbackName(h) {
			t.Errorf("IsLoopbackName(%q) = true", h)
		}
	}
}

// The IPv6 forms that carry an IPv4 address — SIIT, 6to4, Teredo (server
// and XORed client) and every layout of the local-use NAT64 prefix — are
// judged as the address they carry by every always-denied check.
func TestEmbeddedIPv4Forms(t *testing.T) {
	metadata := []string{
		"::ffff:0:a9fe:a9fe",                   // SIIT IPv4-translated 169.254.169.254
		"[::ffff:0:169.254.169.254]",           // the same, dotted
		"2002:a9fe:a9fe::",                     // 6to4 of 169.254.169.254
		"2002:a9fe:a9fe:1234::5",               // anywhere in its /48
		"2002:6464:64c8::1",                    // 6to4 of 100.100.100.200 (Alibaba)
		"2001:0:a9fe:a9fe::1",                  // Teredo server 169.254.169.254
		"2001:0:4136:e378:8000:63bf:5601:5601", // Teredo client 169.254.169.254 (XOR 0xff)
		"64:ff9b:1:a9fe:a9:fe00::",             // local-use NAT64, /48 layout
		"64:ff9b:1:a9:fe:a9fe::",               // local-use NAT64, /56 layout
		"64:ff9b:1:0:a9:fea9:fe00:0",           // local-use NAT64, /64 layout
		"64:ff9b:1::a9fe:a9fe",                 // local-use NAT64, /96 layout
	}
	for _, h := range metadata {
		if !IsMetadataHost(h) {
			t.Errorf("IsMetadataHost(%q) = false, want true", h)
		}
		a, ok := ParseHostIP(h)
		if !ok {
			t.Fatalf("ParseHostIP(%q) not an IP", h)
		}
		if reason, denied := AlwaysDenied(a, true); !denied || !strings.Contains(reason, "metadata") {
			t.Errorf("AlwaysDenied(%s) = %q, %v; want a metadata denial", h, reason, denied)
		}
	}
	denied := []struct{ addr, contain string }{
		{"::ffff:0:7f00:1", "SIIT IPv4-translated form of 127.0.0.1"},
		{"2002:7f00:1::", "6to4 form of 127.0.0.1"},
		{"2002:a9fe:101::", "link-local"},
		{"2002::", "unspecified"},
		{"2001:0:7f00:1::", "Teredo server form of 127.0.0.1"},
		{"2001:0:4136:e378:8000:63bf:80ff:fffe", "Teredo client form of 127.0.0.1"},
		{"64:ff9b:1:7f00:0:100:808:808", "NAT64 local-use"},
		{"2002:e000:1::", "multicast"},
	}
	for _, tt := range denied {
		reason, ok := AlwaysDenied(netip.MustParseAddr(tt.addr), true)
		if !ok || !strings.Contains(reason, tt.contain) {
			t.Errorf("AlwaysDenied(%s, dev) = %q, %v; want denied containing %q", tt.addr, reason, ok, tt.contain)
		}
	}
	for _, a := range []string{"2002:a00:1::", "::ffff:0:a00:1", "2001:0:a00:1::"} {
		if !IsPrivate(netip.MustParseAddr(a)) {
			t.Errorf("IsPrivate(%s) = false, want true (it carries 10.0.0.1)", a)
		}
	}
	for _, a := range []string{"2002:808:808::", "2606:4700::1111", "2a00:1450::1"} {
		if reason, ok := AlwaysDenied(netip.MustParseAddr(a), false); ok {
			t.Errorf("AlwaysDenied(%s) = %q, want allowed", a, reason)
		}
	}
	// The loopback a translator would reach stays denied with
	// --dev-allow-loopback: only the proxy host's own loopback is opened.
	if _, ok := AlwaysDenied(netip.MustParseAddr("2002:7f00:1::"), true); !ok {
		t.Error("6to4 loopback allowed with devAllowLoopback")
	}
}

func TestAllowedIPsOverlapEmbedded(t *testing.T) {
	tests := []struct {
		prefix string
		want   bool
	}{
		{"::ffff:0:0:0/96", true},                 // SIIT of everything
		{"::ffff:0:7f00:0/104", true},             // SIIT of 127/8
		{"::ffff:0:a00:0/104", false},             // SIIT of 10/8
		{"2002::/16", true},                       // 6to4 of everything
		{"2002:a9fe::/32", true},                  // 6to4 of 169.254/16
		{"2002:a9fe:a9fe::/48", true},             // 6to4 of the metadata address
		{"2002:a00::/24", false},                  // 6to4 of 10/8
		{"2001::/32", true},                       // Teredo
		{"2001:0:a00:1::/64", true},               // Teredo server 10.0.0.1, any client (loopback too)
		{"2001:0:a00:1:0:0:f5ff:fffe/128", false}, // client 10.0.0.1
		{"64:ff9b:1::/48", true},                  // local-use NAT64
		{"64:ff9b:1:a00::/56", true},              // /48 layout pins 10.0, /96 layout leaves it free
		{"2000::/3", true},                        // holds 6to4 and Teredo
		{"2600::/12", false},
	}
	for _, tt := range tests {
		reason, got := AllowedIPsOverlap(netip.MustParsePrefix(tt.prefix))
		if got != tt.want {
			t.Errorf("AllowedIPsOverlap(%s) = %q, %v; want %v", tt.prefix, reason, got, tt.want)
		}
	}
}

// A rangeSet's octet filter never hides an address a prefix holds: inAny
// agrees with trying every prefix, on each prefix's first and last IPv4
// address and its neighbours, and on addresses of every first octet.
func TestRangeSetAgreesWithPrefixes(t *testing.T) {
	for _, s := range []*rangeSet{thisNetworkSet, loopbackSet, linkLocalSet, multicastOrBroadcastSet, privateRangesSet} {
		var addrs []netip.Addr
		for _, p := range s.prefixes {
			if !p.Addr().Is4() {
				continue
			}
			first := p.Masked().Addr()
			b := first.As4()
			n := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
			last := n | (1<<(32-p.Bits()) - 1)
			for _, v := range []uint32{n - 1, n, n + 1, last - 1, last, last + 1} {
				addrs = append(addrs, netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}))
			}
		}
		for o := range 256 {
			addrs = append(addrs, netip.AddrFrom4([4]byte{byte(o), 0, 0, 0}), netip.AddrFrom4([4]byte{byte(o), 255, 255, 255}),
				netip.AddrFrom4([4]byte{byte(o), 18, 99, 2}))
		}
		for _, a := range addrs {
			want := false
			for _, p := range s.prefixes {
				want = want || p.Contains(a)
			}
			if got := inAny(a, s); got != want {
				t.Errorf("%v in %v: inAny %v, prefixes %v", a, s.prefixes, got, want)
			}
		}
	}
}
