//go:build !portcullis_testhook

package main

import "github.com/portcullis-dev/portcullis/dataplane"

// applyTestHooks does nothing in real builds; see testhook_on.go.
func applyTestHooks(*dataplane.Config) {}
