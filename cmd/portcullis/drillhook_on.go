//go:build drills

package main

import (
	"fmt"
	"os"
	"time"

	"github.com/portcullis-dev/portcullis/dataplane"
)

// envDrillClockOffset names the proxy's clock offset in drill builds.
const envDrillClockOffset = "PORTCULLIS_DRILL_CLOCK_OFFSET"

// applyDrillHooks, in drill builds only (-tags drills, built by the fault
// drills in drills/), fills the proxy's seams the drills need from the
// environment:
//
//   - PORTCULLIS_DRILL_CLOCK_OFFSET=DURATION (e.g. -5m) sets the proxy's
//     clock (Config.Now: expires_at, records, and the subscription's view
//     of the gateway's clock) that far from the host's, as a host whose
//     clock is wrong would; Go binaries read the clock without libc, so
//     libfaketime cannot do it.
//
// The shipped binary holds none of this (drillhook_off.go; a test in
// cmd/portcullis checks).
func applyDrillHooks(cfg *dataplane.Config) error {
	if v := os.Getenv(envDrillClockOffset); v != "" {
		offset, err := time.ParseDuration(v)
		if err != nil {
			return fmt.Errorf("%s: %w", envDrillClockOffset, err)
		}
		cfg.Now = func() time.Time { return time.Now().Add(offset) }
	}
	return nil
}
