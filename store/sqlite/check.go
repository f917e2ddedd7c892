package sqlite

import (
	"fmt"
	"math"
	"time"

	"github.com/portcullis-dev/portcullis/store"
)

// Input checks of the push methods beyond store's (which both engines
// run): SQLite keeps times as int64 nanoseconds, so times it cannot hold
// are refused before the database is touched.

func checkProxyStatuses(statuses []store.ProxyStatus) error {
	if err := store.CheckProxyStatuses(statuses); err != nil {
		return err
	}
	for i, st := range statuses {
		for _, t := range []*time.Time{&st.ConnectedAt, &st.LastSeenAt, st.LastAckAt, st.LastNackAt} {
			if t != nil && !inNanos(*t) {
				return fmt.Errorf("invalid proxy status %d (sandbox %q): time %v out of range", i, st.Sandbox, *t)
			}
		}
	}
	return nil
}

func checkDecisions(records []store.Decision) error {
	if err := store.CheckDecisions(records); err != nil {
		return err
	}
	for i, d := range records {
		if !inNanos(d.Time) {
			return fmt.Errorf("invalid decision record %d (sandbox %q): time %v out of range", i, d.Sandbox, d.Time)
		}
	}
	return nil
}

// Times int64 nanoseconds since the epoch can hold (years 1678 to 2262).
var (
	minNanos = time.Unix(0, math.MinInt64)
	maxNanos = time.Unix(0, math.MaxInt64)
)

// inNanos reports whether t is the zero time (stored as NULL) or fits in
// int64 nanoseconds.
func inNanos(t time.Time) bool {
	return t.IsZero() || (!t.Before(minNanos) && !t.After(maxNanos))
}
