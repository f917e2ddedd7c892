//go:build linux

package netnstest

import (
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"testing"

	"github.com/vishvananda/netlink"
)

// needRoot skips without root, except in CI, where it fails.
func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("network namespaces need root (CI=true: not skipped)")
	}
	t.Skip("network namespaces need root")
}

func TestHostServesOverVeth(t *testing.T) {
	needRoot(t)
	link := fmt.Sprintf("pcnt%d", os.Getpid()%100000)
	h, err := New(link, netip.MustParsePrefix("198.18.0.1/28"), netip.MustParsePrefix("198.18.0.10/28"))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := h.Listen("tcp", "198.18.0.10:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		fmt.Fprintf(c, "hello from %s", c.LocalAddr())
		c.Close()
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(c)
	c.Close()
	if want := "hello from " + ln.Addr().String(); string(got) != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	// The namespace's listener is not the caller's: nothing listens on
	// that port here.
	if _, err := net.Listen("tcp", ln.Addr().String()); err == nil {
		t.Fatal("the host's address is bound in the caller's namespace too")
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := netlink.LinkByName(link); err == nil {
		t.Fatalf("link %s remains after Close", link)
	}
}

func TestAddressOutsidePrefixRefused(t *testing.T) {
	_, err := New("pcntx", netip.MustParsePrefix("198.18.0.1/28"), netip.MustParsePrefix("198.51.100.10/24"))
	if err == nil || err.Error() != "netnstest: 198.51.100.10/24 is outside 198.18.0.0/28" {
		t.Fatalf("err = %v", err)
	}
	if _, err := netlink.LinkByName("pcntx"); err == nil {
		t.Fatal("a refused host left a link")
	}
}
