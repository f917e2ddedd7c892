package dataplane

import (
	"net/netip"
	"testing"
)

// Connections are pooled per (host, checked address) and per policy
// version, never across them.
func TestUpstreamPoolsAreKeyedByHostAndAddress(t *testing.T) {
	u := newUpstreams(nil)
	a := netip.MustParseAddrPort("192.0.2.1:443")
	b := netip.MustParseAddrPort("192.0.2.2:443")
	orders := u.get(upstreamKey{"orders.example.com", a})
	if u.get(upstreamKey{"orders.example.com", a}) != orders {
		t.Fatal("the same host and address did not share a pool")
	}
	if u.get(upstreamKey{"billing.example.com", a}) == orders {
		t.Fatal("another host on the same address shared the pool (and its TLS name)")
	}
	if u.get(upstreamKey{"orders.example.com", b}) == orders {
		t.Fatal("the host resolved elsewhere reused connections to the old address")
	}
	if got := orders.TLSClientConfig.ServerName; got != "orders.example.com" {
		t.Fatalf("TLS name %q", got)
	}
	u.reset()
	if u.get(upstreamKey{"orders.example.com", a}) == orders {
		t.Fatal("a new policy version reused the old version's pool")
	}
	for i := range maxUpstreamPools + 10 {
		u.get(upstreamKey{"h.example.com", netip.AddrPortFrom(netip.AddrFrom4([4]byte{192, 0, 2, byte(i)}), uint16(1000+i))})
	}
	if n := len(u.pools); n > maxUpstreamPools {
		t.Fatalf("%d pools kept, want at most %d", n, maxUpstreamPools)
	}
}
