package dataplane_test

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/portcullis-dev/portcullis/dataplane"
	"github.com/portcullis-dev/portcullis/dataplane/dataplanetest"
	"github.com/portcullis-dev/portcullis/policy"
)

// TestConnectSpans: a CONNECT is a span of its own (proxy.connect), the
// child of the client's traceparent, lasting the L4 tunnel's life; a
// denied CONNECT's span is an error naming the denial; both decision
// records carry their trace id.
func TestConnectSpans(t *testing.T) {
	raw := startRawServer(t, "220 hello\r\n")
	rec := tracetest.NewSpanRecorder()
	p := newAgent(t, dataplane.Config{
		DevAllowLoopback: true,
		Resolve: func(_ context.Context, host string) ([]netip.Addr, error) {
			return []netip.Addr{netip.MustParseAddr(rawAddr)}, nil
		},
		Logger: slog.New(slog.DiscardHandler),
		Tracer: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)),
	})
	pol, _, err := policy.Parse(fmt.Appendf(nil, "version: 1\nnetwork_policies:\n  raw:\n    endpoints:\n      - { host: smtp.good.test, port: %d }\n", raw.port))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.SetPolicy(pol, "v1"); err != nil {
		t.Fatal(err)
	}
	pu := dataplanetest.Serve(t, p)
	const (
		clientTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
		clientSpan  = "00f067aa0ba902b7"
	)
	connect := func(authority string) (int, net.Conn, *bufio.Reader) {
		t.Helper()
		conn, err := net.Dial("tcp", pu.Host)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\nHost: %s\r\nTraceparent: 00-%s-%s-01\r\n\r\n", authority, authority, clientTrace, clientSpan)
		br := bufio.NewReader(conn)
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		return res.StatusCode, conn, br
	}

	code, conn, br := connect("smtp.good.test:" + strconv.Itoa(raw.port))
	if code != http.StatusOK {
		t.Fatalf("allowed CONNECT = %d", code)
	}
	if line, err := br.ReadString('\n'); err != nil || line != "220 hello\r\n" {
		t.Fatalf("through the tunnel: %q, %v", line, err)
	}
	for _, s := range rec.Ended() {
		if s.Name() == "proxy.connect" {
			t.Fatal("the tunnel's span ended while the tunnel was open")
		}
	}
	conn.Close()
	code, denied, _ := connect("smtp.bad.test:" + strconv.Itoa(raw.port))
	denied.Close()
	if code != http.StatusForbidden {
		t.Fatalf("denied CONNECT = %d", code)
	}

	var spans []sdktrace.ReadOnlySpan
	deadline := time.Now().Add(10 * time.Second) // a guard, not a measure
	for len(spans) < 2 && time.Now().Before(deadline) {
		spans = spans[:0]
		for _, s := range rec.Ended() {
			if s.Name() == "proxy.connect" {
				spans = append(spans, s)
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	if len(spans) != 2 {
		t.Fatalf("%d proxy.connect spans ended, want 2", len(spans))
	}
	attr := func(s sdktrace.ReadOnlySpan, key string) string {
		for _, kv := range s.Attributes() {
			if string(kv.Key) == key {
				return kv.Value.String()
			}
		}
		return ""
	}
	for _, s := range spans {
		if s.SpanContext().TraceID().String() != clientTrace || s.Parent().SpanID().String() != clientSpan {
			t.Errorf("span %s: trace %s parent %s; want the client's %s/%s", attr(s, "server.address"), s.SpanContext().TraceID(), s.Parent().SpanID(), clientTrace, clientSpan)
		}
	}
	byHost := map[string]sdktrace.ReadOnlySpan{attr(spans[0], "server.address"): spans[0], attr(spans[1], "server.address"): spans[1]}
	if s := byHost["smtp.good.test"]; s == nil || attr(s, "portcullis.decision") != "allow" || s.Status().Code == codes.Error {
		t.Errorf("the tunnel's span: %v", s)
	}
	if s := byHost["smtp.bad.test"]; s == nil || attr(s, "portcullis.decision") != "deny" || attr(s, "portcullis.denial_id") == "" || s.Status().Code != codes.Error {
		t.Errorf("the denied CONNECT's span: %v", s)
	}
	recs := p.Decisions()
	if len(recs) != 2 {
		t.Fatalf("%d decision records, want 2", len(recs))
	}
	for _, r := range recs {
		if r.TraceID != clientTrace {
			t.Errorf("record %s %s: trace id %q, want %s", r.Decision, r.Host, r.TraceID, clientTrace)
		}
	}
}
