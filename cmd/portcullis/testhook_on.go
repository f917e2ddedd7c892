//go:build portcullis_testhook

package main

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"strings"

	"github.com/portcullis-dev/portcullis/dataplane"
	"github.com/portcullis-dev/portcullis/policy"
)

// applyTestHooks, in test builds only (-tags portcullis_testhook), fills
// the proxy's test seams from the environment, so end-to-end tests can
// drive a real proxy process:
//
//   - PORTCULLIS_TEST_REFUSE=NAME refuses a policy naming a network policy
//     NAME, as a proxy too old for a new feature would (a NACK travelling
//     from a real proxy process to proxies list);
//   - PORTCULLIS_TEST_RESOLVER=ADDR resolves names through the DNS server
//     at ADDR (UDP), so a test's resolver stands for the host's;
//   - PORTCULLIS_TEST_HOSTS=name=addr,name=addr answers those names, so an
//     upstream with a public-looking name can live on loopback (with
//     --dev-allow-loopback); other names are resolved as usual.
func applyTestHooks(cfg *dataplane.Config) {
	if name := os.Getenv("PORTCULLIS_TEST_REFUSE"); name != "" && cfg.Gateway != nil {
		cfg.Gateway.Refuse = func(p *policy.Policy) error {
			if _, ok := p.NetworkPolicies[name]; ok {
				return errors.New("this proxy cannot compile network policy " + strings.TrimSpace(name) + " (test refusal)")
			}
			return nil
		}
	}
	if server := os.Getenv("PORTCULLIS_TEST_RESOLVER"); server != "" {
		r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "udp", server)
		}}
		cfg.Resolve = func(ctx context.Context, host string) ([]netip.Addr, error) {
			return r.LookupNetIP(ctx, "ip4", host)
		}
	}
	if hosts := os.Getenv("PORTCULLIS_TEST_HOSTS"); hosts != "" {
		next := cfg.Resolve
		cfg.Resolve = func(ctx context.Context, host string) ([]netip.Addr, error) {
			if addrs, ok := testHosts(hosts, host); ok {
				return addrs, nil
			}
			if next != nil {
				return next(ctx, host)
			}
			return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		}
	}
}

// testHosts answers host from a PORTCULLIS_TEST_HOSTS list.
func testHosts(list, host string) ([]netip.Addr, bool) {
	for _, pair := range strings.Split(list, ",") {
		name, addr, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if !ok || !strings.EqualFold(name, strings.TrimSuffix(host, ".")) {
			continue
		}
		if a, err := netip.ParseAddr(addr); err == nil {
			return []netip.Addr{a}, true
		}
	}
	return nil, false
}
