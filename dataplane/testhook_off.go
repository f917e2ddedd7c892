//go:build !portcullis_testhook

package dataplane

import (
	"net/netip"

	"github.com/portcullis-dev/portcullis/policy"
)

// testRefusal and testResolve do nothing in real builds; see
// testhook_on.go.
func testRefusal(*policy.Policy) error { return nil }

func testResolve(string) ([]netip.Addr, bool) { return nil, false }
