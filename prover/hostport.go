package prover

import (
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/portcullis-dev/portcullis/policy"
)

// ParseHostPort reads a destination written HOST:PORT (an IPv6 literal in
// brackets). The host is lower-cased and loses a trailing dot, as the
// proxy compares hosts; globs are refused, since a credential set with
// `sandbox credentials` is injected for one exact destination.
func ParseHostPort(s string) (HostPort, error) {
	host, n, err := splitHostPort(s)
	if err != nil {
		return HostPort{}, err
	}
	if strings.ContainsAny(host, "*?[]{}/ ") {
		return HostPort{}, fmt.Errorf("%q: the host must be exact (no globs)", s)
	}
	return HostPort{Host: host, Port: n}, nil
}

// ParseHostPattern reads a destination written PATTERN:PORT, where
// PATTERN is a host as endpoints write it (policy.ValidHostPattern: an
// exact name, `*.example.com`, `**.example.com`, `*-x.example.com`, a
// whole `*` middle label, or an IP address): the hosts a provider covers.
// ParseHostPort is the exact form.
func ParseHostPattern(s string) (HostPort, error) {
	host, n, err := splitHostPort(s)
	if err != nil {
		return HostPort{}, err
	}
	if err := policy.ValidHostPattern(host); err != nil {
		return HostPort{}, fmt.Errorf("%q: %v", s, err)
	}
	return HostPort{Host: host, Port: n}, nil
}

func splitHostPort(s string) (string, int, error) {
	host, port, err := net.SplitHostPort(strings.TrimSpace(s))
	if err != nil {
		return "", 0, fmt.Errorf("%q: want HOST:PORT", s)
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 {
		return "", 0, fmt.Errorf("%q: port must be 1-65535", s)
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if host == "" {
		return "", 0, fmt.Errorf("%q: empty host", s)
	}
	return host, n, nil
}

// String is the HOST:PORT form ParseHostPort and ParseHostPattern read.
func (h HostPort) String() string { return net.JoinHostPort(h.Host, strconv.Itoa(h.Port)) }

// Covers reports whether a request to host:port goes to this credentialed
// destination: the ports are equal and h.Host, an exact host or a host
// pattern, matches host as policy.MatchHost matches an endpoint's host
// (an IP address in any spelling the same address; a name compared after
// lower-casing and dropping a trailing dot).
func (h HostPort) Covers(host string, port int) bool {
	if h.Port != port {
		return false
	}
	ca, cIP := hostIP(h.Host)
	ra, rIP := policy.ParseHostIP(host)
	switch {
	case cIP || rIP:
		return cIP && rIP && ca == ra
	case policy.NormalizeHost(h.Host) == policy.NormalizeHost(host):
		return true
	}
	return policy.MatchHost(h.Host, host)
}
