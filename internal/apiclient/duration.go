package apiclient

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// DurationFlag is a command-line flag (a pflag.Value) for an optional
// duration of a request: nil until set. It takes Go durations (90m, 12h)
// and whole days (30d). Whether it may be zero or negative is the
// gateway's to say.
type DurationFlag struct{ D *durationpb.Duration }

// Set parses s.
func (f *DurationFlag) Set(s string) error {
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil {
			return err
		}
		if n < 0 || int64(n) > math.MaxInt64/int64(24*time.Hour) {
			return fmt.Errorf("%s: out of range", s)
		}
		f.D = durationpb.New(time.Duration(n) * 24 * time.Hour)
		return nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	f.D = durationpb.New(d)
	return nil
}

// String is the duration set, or "" for none.
func (f *DurationFlag) String() string {
	if f.D == nil {
		return ""
	}
	return f.D.AsDuration().String()
}

// Type names the value in help.
func (f *DurationFlag) Type() string { return "duration" }

// A TimeFlagError is a time flag's value that is neither an RFC 3339 time
// nor a duration that fits (a usage error).
type TimeFlagError struct{ Msg string }

func (e *TimeFlagError) Error() string { return e.Msg }

// parseTimeFlag reads a time flag's value (--since, --until): an RFC 3339
// time (at), or else a duration (d) in Go's syntax or as whole days, "7d"
// (1 to 3650); ok is false for neither.
func parseTimeFlag(s string) (at *time.Time, d time.Duration, ok bool) {
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return &t, 0, true
	}
	if days, isDays := strings.CutSuffix(s, "d"); isDays {
		n, err := strconv.Atoi(days)
		if err != nil || n < 1 || n > 3650 {
			return nil, 0, false
		}
		return nil, time.Duration(n) * 24 * time.Hour, true
	}
	d, err := time.ParseDuration(s)
	return nil, d, err == nil
}

// Since reads --since: an RFC 3339 time, or a positive duration before
// now (Go syntax, plus whole days as "7d"). Its errors are TimeFlagErrors.
func Since(s string, now time.Time) (time.Time, error) {
	at, d, ok := parseTimeFlag(s)
	switch {
	case at != nil:
		return *at, nil
	case !ok:
		return time.Time{}, &TimeFlagError{fmt.Sprintf("--since must be an RFC 3339 time or a duration (90m, 24h, 7d), got %q", s)}
	case d <= 0:
		return time.Time{}, &TimeFlagError{fmt.Sprintf("--since %q: give a positive duration", s)}
	}
	return now.Add(-d), nil
}

// SinceTimestamp is --since as a request's bound (Since at now), nil when
// not given.
func SinceTimestamp(s string, now time.Time) (*timestamppb.Timestamp, error) {
	if s == "" {
		return nil, nil
	}
	from, err := Since(s, now)
	if err != nil {
		return nil, err
	}
	return timestamppb.New(from), nil
}

// Until reads --until: an RFC 3339 time in the future, or a positive
// duration from now (Go syntax, plus whole days as "7d"). Its errors are
// TimeFlagErrors.
func Until(s string, now time.Time) (time.Time, error) {
	at, d, ok := parseTimeFlag(s)
	switch {
	case at != nil && !at.After(now):
		return time.Time{}, &TimeFlagError{fmt.Sprintf("--until %s is in the past", s)}
	case at != nil:
		return *at, nil
	case !ok:
		return time.Time{}, &TimeFlagError{fmt.Sprintf("--until must be an RFC 3339 time or a duration (8h, 7d), got %q", s)}
	case d <= 0:
		return time.Time{}, &TimeFlagError{fmt.Sprintf("--until must be in the future, got %q", s)}
	}
	return now.Add(d), nil
}
