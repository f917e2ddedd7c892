package apiclient

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
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
