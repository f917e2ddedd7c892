package main

import (
	"fmt"
	"net"
	"net/netip"
	"os"

	"github.com/portcullis-dev/portcullis/internal/netnstest"
)

// The transparent path: the same proxy process as the portcullis path,
// reached through its --transparent-listen by a load generator that
// `portcullis run` has put in a network namespace whose only way out is
// that listener, making plain requests to the upstream's own address (no
// proxy settings). So the upstream must be where an agent in that
// namespace could address it: not loopback (which stays the namespace's
// own), but a network namespace of its own at the end of a veth pair,
// 198.18.0.2 (RFC 2544's benchmarking range, in a /30: the machine's
// own services, its module proxy included, may live in the TEST-NETs),
// which every path of the run then uses.

const transparentUpstreamHost = "198.18.0.2"

// upstreamNetwork is where the upstream listens: on 127.0.0.1, or, when
// transparent, in a namespace of its own (closed by the returned func).
func upstreamNetwork(transparent bool) (listen func(network, addr string) (net.Listener, error), host string, closeNet func(), err error) {
	if !transparent {
		return net.Listen, "127.0.0.1", func() {}, nil
	}
	if os.Geteuid() != 0 {
		return nil, "", nil, fmt.Errorf("the transparent path needs root: it makes network namespaces (the upstream's, and portcullis run's)")
	}
	h, err := netnstest.New(fmt.Sprintf("pcpl%d", os.Getpid()%100000), netip.MustParsePrefix("198.18.0.1/30"), netip.MustParsePrefix(transparentUpstreamHost+"/30"))
	if err != nil {
		return nil, "", nil, err
	}
	return h.Listen, transparentUpstreamHost, func() { h.Close() }, nil
}

// startTransparentLoad starts a second load generator under `bin run
// --proxy addr`, with the one target the transparent path is.
func startTransparentLoad(bin, addr, upstream string, spec targetSpec, maxConcurrency int) (*loadProc, error) {
	return startLoadProcUnder([]string{bin, "run", "--proxy", addr, "--"}, upstream, []targetSpec{spec}, maxConcurrency)
}
