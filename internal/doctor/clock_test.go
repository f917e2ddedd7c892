package doctor

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/portcullis-dev/portcullis/internal/apiclient"
)

// The gateway's Date is compared with this host's clock at the middle of
// the request: within MaxSkew passes, beyond it fails naming the skew and
// NTP; an answer without a Date fails.
func TestClock(t *testing.T) {
	sent := time.Date(2026, 12, 5, 10, 0, 0, 200e6, time.UTC)
	for _, tc := range []struct {
		name   string
		date   time.Time
		ok     bool
		detail string
	}{
		{"same second", sent.Truncate(time.Second), true, "0s ahead"},
		{"ahead within", sent.Add(29 * time.Second).Truncate(time.Second), true, "29s ahead"},
		{"behind beyond", sent.Add(-45 * time.Second).Truncate(time.Second), false, "45s behind"},
		{"ahead beyond", sent.Add(2 * time.Minute).Truncate(time.Second), false, "2m0s ahead"},
		{"no date", time.Time{}, false, "no Date header"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &run{cfg: Config{MaxSkew: DefaultMaxSkew}, w: io.Discard}
			r.clock(apiclient.Readiness{Ready: true, Date: tc.date, Sent: sent, Received: sent.Add(100 * time.Millisecond)})
			c := r.checks[0]
			if c.OK != tc.ok || !strings.Contains(c.Detail, tc.detail) || (!c.OK && c.Fix == "") {
				t.Errorf("clock check = %+v, want ok %v with %q (and a fix when failing)", c, tc.ok, tc.detail)
			}
		})
	}
}
