//go:build !portcullis_testhook

package dataplane

import "github.com/portcullis-dev/portcullis/policy"

// testRefusal is nil in real builds; see testhook_on.go.
func testRefusal(*policy.Policy) error { return nil }
