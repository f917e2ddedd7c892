package apitext

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
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
