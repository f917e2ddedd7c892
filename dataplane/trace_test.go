package dataplane

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/portcullis-dev/portcullis/dataplane/decision"
)

// Without a tracer the tracing hooks on the request path cost nothing: no
// allocation, the request and its context untouched, nothing written.
func TestTracingOffCostsNothing(t *testing.T) {
	p := newProxy(Config{})
	r := httptest.NewRequest(http.MethodGet, "http://example.com/x", nil)
	r.Header.Set("Traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	out := &http.Request{Header: http.Header{}}
	rec := decision.Record{}
	allocs := testing.AllocsPerRun(200, func() {
		r2, end := p.traceRequest(r, "http", dest{host: "example.com", port: 80})
		if r2 != r {
			t.Fatal("the request was wrapped")
		}
		p.traceDecision(r2, &rec)
		ctx, done := p.traceUpstream(r2.Context(), out, "example.com")
		if ctx != r.Context() {
			t.Fatal("the upstream context was wrapped")
		}
		done(nil, nil)
		end()
	})
	if allocs != 0 {
		t.Errorf("tracing off allocates %v times a request", allocs)
	}
	if rec.TraceID != "" || out.Header.Get("Traceparent") != "" {
		t.Errorf("tracing off wrote trace id %q, upstream traceparent %q", rec.TraceID, out.Header.Get("Traceparent"))
	}
}
