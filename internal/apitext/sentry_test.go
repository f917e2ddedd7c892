package apitext

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
	"github.com/portcullis-dev/portcullis/store"
)

func mustTime(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// A source's gaps as sentry gaps lists them, and an action's time from
// ingest to the last ACK as sentry actions does.
func TestSentryCells(t *testing.T) {
	gap := func(from, to uint64) *portcullisv1.SequenceGap { return &portcullisv1.SequenceGap{From: from, To: to} }
	for _, tt := range []struct {
		gaps []*portcullisv1.SequenceGap
		more uint64
		want string
	}{
		{nil, 0, "none"},
		{[]*portcullisv1.SequenceGap{gap(6, 7)}, 0, "6-7"},
		{[]*portcullisv1.SequenceGap{gap(6, 7), gap(10, 10), gap(12, 20)}, 0, "6-7, 10, 12-20"},
		{[]*portcullisv1.SequenceGap{gap(6, 7)}, 42, "6-7 (+42 more)"},
	} {
		if got := GapsCell(tt.gaps, tt.more); got != tt.want {
			t.Errorf("GapsCell(%v, %d) = %q, want %q", tt.gaps, tt.more, got, tt.want)
		}
	}

	at := func(s string) *timestamppb.Timestamp { return timestamppb.New(mustTime(t, s)) }
	received := at("2026-12-01T19:00:00Z")
	for _, tt := range []struct {
		a    *portcullisv1.SentryAction
		want string
	}{
		{&portcullisv1.SentryAction{ReceivedAt: received}, "-"},
		{&portcullisv1.SentryAction{ReceivedAt: received, AckedAt: timestamppb.New(received.AsTime().Add(12345 * time.Microsecond))}, "12.3ms"},
		{&portcullisv1.SentryAction{ReceivedAt: received, AckedAt: at("2026-12-01T19:00:02Z")}, "2s"},
		{&portcullisv1.SentryAction{ReceivedAt: received, AckedAt: at("2026-12-01T18:00:00Z")}, "-"},
	} {
		if got := IngestToAck(tt.a); got != tt.want {
			t.Errorf("IngestToAck(%v) = %q, want %q", tt.a, got, tt.want)
		}
	}
}

// TestSentryStatusesAreTheStores: --status takes exactly the statuses the
// store gives a Sentry action.
func TestSentryStatusesAreTheStores(t *testing.T) {
	want := []string{store.SentryFrozen, store.SentryHeld, store.SentryDryRun, store.SentryNoop,
		store.SentryFailed, store.SentryDismissed, store.SentryApplied, store.SentryStale}
	if !slices.Equal(sentryStatuses, want) {
		t.Fatalf("sentryStatuses = %v, the store's are %v", sentryStatuses, want)
	}
	if err := CheckSentryStatuses([]string{"held", "frozen"}); err != nil {
		t.Fatal(err)
	}
	if err := CheckSentryStatuses([]string{"held", "froze"}); err == nil || !strings.Contains(err.Error(), `got "froze"`) {
		t.Fatalf("a wrong status: %v", err)
	}
}

func TestSentryDecision(t *testing.T) {
	for _, tt := range []struct {
		id              string
		freeze, dismiss bool
		reason, want    string
	}{
		{"7", true, false, "on-call", "7 freeze"},
		{"8", false, true, "load test", "8 dismiss"},
		{"0", true, false, "r", `ID must be a sentry action id (1 or more), got "0"`},
		{"07", true, false, "r", `ID must be a sentry action id (1 or more), got "07"`},
		{"7", true, true, "r", "give --freeze or --dismiss, not both"},
		{"7", false, false, "r", "portcullis sentry decide needs --freeze or --dismiss"},
		{"7", true, false, " ", "portcullis sentry decide needs --reason"},
	} {
		id, decision, err := SentryDecision(tt.id, tt.freeze, tt.dismiss, tt.reason)
		got := fmt.Sprintf("%d %s", id, decision)
		if err != nil {
			got = err.Error()
		}
		if got != tt.want {
			t.Errorf("SentryDecision(%q, %v, %v, %q) = %s, want %s", tt.id, tt.freeze, tt.dismiss, tt.reason, got, tt.want)
		}
	}
}
