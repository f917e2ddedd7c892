package sentryintake_test

import (
	"testing"

	"github.com/portcullis-dev/portcullis/gateway/sentryintake"
	"github.com/portcullis-dev/portcullis/sentry"
)

// Notable: what a security team sees of a watchdog's stream.
func TestNotable(t *testing.T) {
	finding := &sentry.Finding{Title: "t"}
	for _, c := range []struct {
		name string
		ev   sentry.Event
		want bool
	}{
		{"quarantine", sentry.Event{Class: sentry.ClassQuarantine, Payload: sentry.Payload{Severity: sentry.SeverityLow, Processing: sentry.ProcessingRemediate, Finding: finding}}, true},
		{"breach stored only", sentry.Event{Class: sentry.ClassBoundaryBreach, Payload: sentry.Payload{Severity: sentry.SeverityInfo, Processing: sentry.ProcessingStoreOnly, Finding: finding}}, true},
		{"finding on a tool access", sentry.Event{Class: sentry.ClassToolAccess, Payload: sentry.Payload{Severity: sentry.SeverityInfo, Finding: finding}}, true},
		{"high", sentry.Event{Class: sentry.ClassIdentityCheck, Payload: sentry.Payload{Severity: sentry.SeverityHigh}}, true},
		{"critical", sentry.Event{Class: sentry.ClassPolicyDecision, Payload: sentry.Payload{Severity: sentry.SeverityCritical}}, true},
		{"medium", sentry.Event{Class: sentry.ClassToolAccess, Payload: sentry.Payload{Severity: sentry.SeverityMedium}}, false},
		{"info", sentry.Event{Class: sentry.ClassToolAccess, Payload: sentry.Payload{Severity: sentry.SeverityInfo}}, false},
		{"heartbeat", sentry.Event{Class: sentry.ClassHeartbeat, Payload: sentry.Payload{Severity: sentry.SeverityCritical, Finding: finding}}, false},
		{"unknown type", sentry.Event{Type: "com.example.other"}, false},
	} {
		if got := sentryintake.Notable(c.ev); got != c.want {
			t.Errorf("%s: Notable = %v, want %v", c.name, got, c.want)
		}
	}
}
