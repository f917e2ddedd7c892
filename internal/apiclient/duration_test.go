package apiclient

import "testing"

// TestDurationFlag: Go durations and whole days are read; a count of days
// past what a duration holds, or below zero, is refused rather than
// wrapping into a short or negative time.
func TestDurationFlag(t *testing.T) {
	for in, want := range map[string]string{"90m": "5400s", "2d": "172800s", "0d": "0s"} {
		var f DurationFlag
		if err := f.Set(in); err != nil || f.D.AsDuration().String() != mustParse(t, want) {
			t.Errorf("Set(%q) = %v, %v; want %s", in, f.D.AsDuration(), err, want)
		}
	}
	for _, in := range []string{"106752d", "999999999999d", "-1d", "xd", "1y"} {
		var f DurationFlag
		if err := f.Set(in); err == nil {
			t.Errorf("Set(%q) = %v, want refused", in, f.D.AsDuration())
		}
	}
}

func mustParse(t *testing.T, s string) string {
	t.Helper()
	var f DurationFlag
	if err := f.Set(s); err != nil {
		t.Fatal(err)
	}
	return f.D.AsDuration().String()
}
