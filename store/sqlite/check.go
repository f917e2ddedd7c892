package sqlite

import (
	"fmt"
	"math"
	"time"

	"github.com/portcullis-dev/portcullis/store"
)

// Input checks beyond store's: SQLite keeps times as int64 nanoseconds,
// so times it cannot hold (in proxy statuses, decisions and proposals) are
// refused before the database is touched.

func checkProxyStatuses(statuses []store.ProxyStatus) error {
	if err := store.CheckProxyStatuses(statuses); err != nil {
		return err
	}
	for i, st := range statuses {
		what := fmt.Sprintf("proxy status %d (sandbox %q)", i, st.Sandbox)
		if err := checkTimes(what, st.ConnectedAt, st.LastSeenAt, orZero(st.LastAckAt), orZero(st.LastNackAt)); err != nil {
			return err
		}
	}
	return nil
}

func checkDecisions(records []store.Decision) error {
	if err := store.CheckDecisions(records); err != nil {
		return err
	}
	for i, d := range records {
		if err := checkTimes(fmt.Sprintf("decision record %d (sandbox %q)", i, d.Sandbox), d.Time); err != nil {
			return err
		}
	}
	return nil
}

// checkTimes refuses times int64 nanoseconds cannot hold (what names
// their owner in the error).
func checkTimes(what string, times ...time.Time) error {
	for _, t := range times {
		if !inNanos(t) {
			return fmt.Errorf("invalid %s: time %v out of range", what, t)
		}
	}
	return nil
}

func orZero(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return *t
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
