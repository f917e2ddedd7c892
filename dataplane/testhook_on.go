//go:build portcullis_testhook

package dataplane

import (
	"errors"
	"net/netip"
	"os"
	"strings"

	"github.com/portcullis-dev/portcullis/policy"
)

// testRefusal, in test builds only (-tags portcullis_testhook), refuses a
// policy naming a network policy called by PORTCULLIS_TEST_REFUSE, as a
// proxy too old for a new feature would: end-to-end tests use it to see a
// NACK travel from a real proxy process to proxies list.
func testRefusal(p *policy.Policy) error {
	name := os.Getenv("PORTCULLIS_TEST_REFUSE")
	if name == "" {
		return nil
	}
	if _, ok := p.NetworkPolicies[name]; ok {
		return errors.New("this proxy cannot compile network policy " + strings.TrimSpace(name) + " (test refusal)")
	}
	return nil
}

// testResolve, in test builds only, answers names listed in
// PORTCULLIS_TEST_HOSTS ("name=addr,name=addr"), so an end-to-end test can
// give a real proxy process an upstream with a public-looking name that
// lives on loopback (with --dev-allow-loopback).
func testResolve(host string) ([]netip.Addr, bool) {
	for _, pair := range strings.Split(os.Getenv("PORTCULLIS_TEST_HOSTS"), ",") {
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
