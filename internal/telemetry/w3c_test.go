package telemetry

import (
	"testing"

	"go.opentelemetry.io/otel/trace"
)

func TestTraceparentRoundTrip(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	sc, ok := ParseTraceparent(tp)
	if !ok {
		t.Fatal("a valid traceparent was refused")
	}
	if got := sc.TraceID().String(); got != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("trace id = %s", got)
	}
	if got := sc.SpanID().String(); got != "00f067aa0ba902b7" {
		t.Errorf("span id = %s", got)
	}
	if !sc.IsSampled() || !sc.IsRemote() {
		t.Errorf("sampled %v, remote %v: want both", sc.IsSampled(), sc.IsRemote())
	}
	if got := Traceparent(sc); got != tp {
		t.Errorf("Traceparent = %q, want %q", got, tp)
	}
	if got := Traceparent(trace.SpanContext{}); got != "" {
		t.Errorf("Traceparent of no span = %q, want empty", got)
	}
}

func TestParseTraceparentRefuses(t *testing.T) {
	for _, s := range []string{
		"",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0",        // short
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra", // version 00 has no more fields
		"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",       // version ff
		"00-00000000000000000000000000000000-00f067aa0ba902b7-01",       // zero trace id
		"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",       // zero span id
		"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",       // upper case
		"00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",       // separator
		"00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",       // not hex
		"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",      // later version, bad tail
	} {
		if _, ok := ParseTraceparent(s); ok {
			t.Errorf("ParseTraceparent(%q) accepted it", s)
		}
	}
	// A later version with more fields is read as 00.
	if _, ok := ParseTraceparent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what"); !ok {
		t.Error("a later version with more fields was refused")
	}
}

func TestParseTraceparentAllocatesNothing(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	if n := testing.AllocsPerRun(100, func() { ParseTraceparent(tp) }); n != 0 {
		t.Errorf("ParseTraceparent allocates %v times", n)
	}
}
