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
