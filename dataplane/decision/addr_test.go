package decision

import (
	"net/netip"
	"testing"
)

// AddrText is the address's String whatever the host, and the host itself
// only when that is the same text.
func TestAddrText(t *testing.T) {
	for _, c := range []struct{ host, addr string }{
		{"127.0.0.1", "127.0.0.1"},
		{"93.184.216.34", "93.184.216.34"},
		{"93.184.216.34", "93.184.216.35"},
		{"127.000.0.1", "127.0.0.1"},
		{"127.1", "127.0.0.1"},
		{"2130706433", "127.0.0.1"},
		{"::ffff:127.0.0.1", "127.0.0.1"},
		{"::ffff:127.0.0.1", "::ffff:127.0.0.1"},
		{"example.com", "93.184.216.34"},
		{"", "10.0.0.1"},
		{"::1", "::1"},
		{"0:0::1", "::1"},
		{"fe80::1%eth0", "fe80::1%eth0"},
		{"2606:4700::1111", "2606:4700::1111"},
	} {
		a := netip.MustParseAddr(c.addr)
		if got, want := AddrText(c.host, a), a.String(); got != want {
			t.Errorf("AddrText(%q, %s) = %q, want %q", c.host, c.addr, got, want)
		}
	}
}
