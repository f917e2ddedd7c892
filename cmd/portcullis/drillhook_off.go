//go:build !drills

package main

import "github.com/portcullis-dev/portcullis/dataplane"

// applyDrillHooks does nothing outside drill builds; see drillhook_on.go.
func applyDrillHooks(*dataplane.Config) error { return nil }
