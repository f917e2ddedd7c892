package prover

import (
	"fmt"
	"net"
	"strconv"
	"strings"
)

// ParseHostPort reads a destination written HOST:PORT (an IPv6 literal in
// brackets). The host is lower-cased and loses a trailing dot, as the
// proxy compares hosts; globs are refused, since a credential is injected
// for one exact destination.
func ParseHostPort(s string) (HostPort, error) {
	host, port, err := net.SplitHostPort(strings.TrimSpace(s))
	if err != nil {
		return HostPort{}, fmt.Errorf("%q: want HOST:PORT", s)
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 {
		return HostPort{}, fmt.Errorf("%q: port must be 1-65535", s)
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if host == "" {
		return HostPort{}, fmt.Errorf("%q: empty host", s)
	}
	if strings.ContainsAny(host, "*?[]{}/ ") {
		return HostPort{}, fmt.Errorf("%q: the host must be exact (no globs)", s)
	}
	return HostPort{Host: host, Port: n}, nil
}

// String is the HOST:PORT form ParseHostPort reads.
func (h HostPort) String() string { return net.JoinHostPort(h.Host, strconv.Itoa(h.Port)) }
