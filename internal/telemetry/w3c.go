package telemetry

import (
	"go.opentelemetry.io/otel/trace"
)

// W3C trace context (https://www.w3.org/TR/trace-context/), version 00:
// "00-<32 hex trace id>-<16 hex span id>-<2 hex flags>". Written and read
// here by hand: the proxy reads it on every traced request, and it is
// also the form a pushed version and a version's provenance carry.

// TraceparentHeader is the HTTP header (and gRPC metadata key) of the W3C
// trace context.
const TraceparentHeader = "Traceparent"

// ProvenanceKey is the key of a policy version's provenance that holds
// the traceparent of the span that committed it.
const ProvenanceKey = "traceparent"

// Traceparent formats sc as a traceparent value; "" when sc is not valid.
func Traceparent(sc trace.SpanContext) string {
	if !sc.IsValid() {
		return ""
	}
	const hexDigits = "0123456789abcdef"
	tid, sid, flags := sc.TraceID(), sc.SpanID(), sc.TraceFlags()
	b := make([]byte, 0, 55)
	b = append(b, "00-"...)
	for _, c := range tid {
		b = append(b, hexDigits[c>>4], hexDigits[c&0xf])
	}
	b = append(b, '-')
	for _, c := range sid {
		b = append(b, hexDigits[c>>4], hexDigits[c&0xf])
	}
	b = append(b, '-', hexDigits[flags>>4], hexDigits[flags&0xf])
	return string(b)
}

// ParseTraceparent reads a traceparent value into a remote span context;
// false when it is malformed, names the all-zero ids, or has version ff.
// A version other than 00 is read as 00 is (the specification's
// forward-compatibility rule), trailing fields ignored.
func ParseTraceparent(s string) (trace.SpanContext, bool) {
	if len(s) < 55 || (len(s) > 55 && (s[:2] == "00" || s[55] != '-')) || s[2] != '-' || s[35] != '-' || s[52] != '-' {
		return trace.SpanContext{}, false
	}
	ver, ok := hexByte(s[0], s[1])
	if !ok || ver == 0xff {
		return trace.SpanContext{}, false
	}
	var tid trace.TraceID
	var sid trace.SpanID
	for i := range tid {
		if tid[i], ok = hexByte(s[3+2*i], s[4+2*i]); !ok {
			return trace.SpanContext{}, false
		}
	}
	for i := range sid {
		if sid[i], ok = hexByte(s[36+2*i], s[37+2*i]); !ok {
			return trace.SpanContext{}, false
		}
	}
	flags, ok := hexByte(s[53], s[54])
	if !ok {
		return trace.SpanContext{}, false
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: tid, SpanID: sid, TraceFlags: trace.TraceFlags(flags) & trace.FlagsSampled, Remote: true,
	})
	return sc, sc.IsValid()
}

// hexByte reads two lower-case hex digits (the specification allows no
// upper case).
func hexByte(hi, lo byte) (byte, bool) {
	h, ok1 := hexDigit(hi)
	l, ok2 := hexDigit(lo)
	return h<<4 | l, ok1 && ok2
}

func hexDigit(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}
