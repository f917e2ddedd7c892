package policy

import (
	"fmt"
	"strings"
	"time"
)

// This file holds the checks on an allow rule's review: where it may
// stand, and its timeout.

// reviewPlaces says where review is valid, for the errors that refuse it
// elsewhere.
const reviewPlaces = "review is valid only on allow rules of protocol rest and on MCP allow rules of method tools/call"

// review checks r.Review of a rule at path on an endpoint of protocol
// proto: only on allow rules, only on REST rules and MCP tools/call rules
// (callsTools), and a timeout that is a Go duration in
// (0, MaxReviewTimeout]. A review that is not required is the same as
// none; the validator warns when it carries a timeout.
func (v *validator) review(path, proto string, r *L7Rule, allow, callsTools bool) {
	if r.Review == nil {
		return
	}
	rp := keyPath(path, "review")
	switch {
	case !allow:
		v.errorf(rp, "is only valid on allow rules (%s)", reviewPlaces)
		return
	case proto == ProtocolMCP && !callsTools:
		v.errorf(rp, "needs method: tools/call (%s)", reviewPlaces)
		return
	case proto != ProtocolREST && proto != ProtocolMCP:
		v.errorf(rp, "is not valid on protocol %s (%s)", proto, reviewPlaces)
		return
	}
	if r.Review.Timeout != "" {
		tp := keyPath(rp, "timeout")
		if _, err := ReviewTimeout(r.Review.Timeout); err != nil {
			v.errorf(tp, "%v", err)
		} else if !r.Review.Required {
			v.warnf(tp, "does nothing: the review is not required (set required: true, or remove review)")
		}
	}
}

// ReviewTimeout parses a review's timeout: a Go duration ("90s", "2m")
// above 0 and at most MaxReviewTimeout; "" is DefaultReviewTimeout.
func ReviewTimeout(s string) (time.Duration, error) {
	if s == "" {
		return DefaultReviewTimeout, nil
	}
	d, err := time.ParseDuration(s)
	switch {
	case err != nil:
		return 0, fmt.Errorf("%q is not a duration: want a Go duration such as 90s or 2m (default %s, at most %s)",
			s, FormatReviewTimeout(DefaultReviewTimeout), FormatReviewTimeout(MaxReviewTimeout))
	case d <= 0:
		return 0, fmt.Errorf("%q must be above 0 (omit it for the default, %s)", s, FormatReviewTimeout(DefaultReviewTimeout))
	case d > MaxReviewTimeout:
		return 0, fmt.Errorf("%q is longer than the most a call may be held, %s", s, FormatReviewTimeout(MaxReviewTimeout))
	}
	return d, nil
}

// FormatReviewTimeout spells a duration as the canonical form writes a
// review's timeout: Go's spelling without its zero units ("2m", "1m30s",
// "90ms", "1.5s").
func FormatReviewTimeout(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// Reviewed reports whether an allow rule holds its calls for a person's
// review, and for how long: review.required, and its timeout (the default
// filled in).
func (r *L7Rule) Reviewed() (time.Duration, bool) {
	if r == nil || r.Review == nil || !r.Review.Required {
		return 0, false
	}
	return r.Review.Wait(), true
}
