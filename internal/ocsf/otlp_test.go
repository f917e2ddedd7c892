package ocsf_test

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	collogpb "go.opentelemetry.io/proto/otlp/collector/logs/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	logpb "go.opentelemetry.io/proto/otlp/logs/v1"
	"google.golang.org/protobuf/proto"

	"github.com/portcullis-dev/portcullis/decision"
	"github.com/portcullis-dev/portcullis/internal/ocsf"
	"github.com/portcullis-dev/portcullis/internal/ocsf/ocsftest"
)

// gotLog is one log record an OTLP receiver decoded, with its resource's
// service name and its scope.
type gotLog struct {
	service, scope string
	rec            *logpb.LogRecord
}

func (g gotLog) attr(key string) *commonpb.AnyValue {
	for _, kv := range g.rec.GetAttributes() {
		if kv.GetKey() == key {
			return kv.GetValue()
		}
	}
	return nil
}

// event decodes the record's body, the OCSF event.
func (g gotLog) event(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(g.rec.GetBody().GetStringValue()), &m); err != nil {
		t.Fatalf("body %v: %v", g.rec.GetBody(), err)
	}
	return m
}

// receiver is an in-process OTLP/HTTP logs endpoint: it decodes each
// ExportLogsServiceRequest and keeps the records.
type receiver struct {
	mu   sync.Mutex
	logs []gotLog
	bad  []string // requests it could not take
	got  chan struct{}
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var req collogpb.ExportLogsServiceRequest
	if r.URL.Path != "/otel/v1/logs" || r.Header.Get("Content-Type") != "application/x-protobuf" || proto.Unmarshal(body, &req) != nil {
		rc.mu.Lock()
		rc.bad = append(rc.bad, r.Method+" "+r.URL.Path+" "+r.Header.Get("Content-Type"))
		rc.mu.Unlock()
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	rc.mu.Lock()
	for _, rl := range req.GetResourceLogs() {
		var service string
		for _, kv := range rl.GetResource().GetAttributes() {
			if kv.GetKey() == "service.name" {
				service = kv.GetValue().GetStringValue()
			}
		}
		for _, sl := range rl.GetScopeLogs() {
			for _, lr := range sl.GetLogRecords() {
				rc.logs = append(rc.logs, gotLog{service: service, scope: sl.GetScope().GetName(), rec: lr})
			}
		}
	}
	rc.mu.Unlock()
	b, _ := proto.Marshal(&collogpb.ExportLogsServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(b)
	select {
	case rc.got <- struct{}{}:
	default:
	}
}

func (rc *receiver) wait(t *testing.T, n int) []gotLog {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		rc.mu.Lock()
		if len(rc.logs) >= n {
			out := append([]gotLog(nil), rc.logs...)
			rc.mu.Unlock()
			return out
		}
		rc.mu.Unlock()
		select {
		case <-rc.got:
		case <-deadline:
			t.Fatalf("receiver has %d log records, want %d", len(rc.logs), n)
		}
	}
}

func runEmitter(t *testing.T, em *ocsf.Emitter) (wrote chan struct{}) {
	t.Helper()
	wrote = make(chan struct{}, 1)
	ocsf.AfterWrite(em, func() {
		select {
		case wrote <- struct{}{}:
		default:
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { em.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return wrote
}

// A denial reaches an OTLP/HTTP receiver as one log record: the whole
// OCSF event as the body (valid against the vendored schema), severity
// from severity_id, the timestamp from time, the class, category and
// type as attributes, and the decision's trace id as the record's.
func TestOTLPDenial(t *testing.T) {
	rc := &receiver{got: make(chan struct{}, 1)}
	srv := httptest.NewServer(rc)
	defer srv.Close()
	sink, err := ocsf.NewOTLP(ocsf.OTLPConfig{Endpoint: srv.URL + "/otel/", ServiceName: "portcullis-proxy", ServiceVersion: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if sink.Name() != "otlp:"+srv.URL+"/otel/v1/logs" {
		t.Errorf("Name() = %q", sink.Name())
	}
	em := ocsf.NewEmitter(sink, ocsf.Config{Queue: 16, Rest: time.Nanosecond, Product: ocsf.Proxy})
	runEmitter(t, em)

	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	em.Emit(func() ocsf.Event {
		return ocsf.FromDecision(decision.Record{Time: at, Host: "api.example.com", Port: 443, HTTPMethod: "POST", Path: "/v1/charge",
			Decision: "deny", Reason: "no rule allows it", DenialID: "dn_otlp", TraceID: traceID}, ocsf.Proxy)
	})
	em.Emit(func() ocsf.Event {
		return ocsf.FromDecision(decision.Record{Time: at.Add(time.Second), Host: "api.example.com", Port: 443, HTTPMethod: "GET", Path: "/v1/ok",
			Decision: "allow"}, ocsf.Proxy)
	})
	logs := rc.wait(t, 2)
	if len(logs) != 2 {
		t.Fatalf("%d records, want 2", len(logs))
	}
	rc.mu.Lock()
	if len(rc.bad) != 0 {
		t.Errorf("requests the receiver refused: %v", rc.bad)
	}
	rc.mu.Unlock()

	var denial gotLog
	for _, l := range logs {
		if err := ocsftest.Validate([]byte(l.rec.GetBody().GetStringValue())); err != nil {
			t.Errorf("body does not validate: %v\n%s", err, l.rec.GetBody().GetStringValue())
		}
		if l.service != "portcullis-proxy" || l.scope != ocsf.ScopeName {
			t.Errorf("service %q scope %q", l.service, l.scope)
		}
		if unmapped(l.event(t), "denial_id") == "dn_otlp" {
			denial = l
		}
	}
	if denial.rec == nil {
		t.Fatalf("no denial among %v", logs)
	}
	r, ev := denial.rec, denial.event(t)
	if ev["class_uid"] != float64(4002) || ev["action_id"] != float64(2) || dig(ev, "metadata", "version") != ocsf.Version {
		t.Errorf("denial event %v", ev)
	}
	if got := time.Unix(0, int64(r.GetTimeUnixNano())); !got.Equal(at) {
		t.Errorf("timestamp %v, want %v", got, at)
	}
	if r.GetObservedTimeUnixNano() == 0 {
		t.Error("no observed timestamp")
	}
	if r.GetSeverityNumber() != logpb.SeverityNumber_SEVERITY_NUMBER_WARN2 || r.GetSeverityText() != "Medium" {
		t.Errorf("severity %v %q, want WARN2 Medium (OCSF 3)", r.GetSeverityNumber(), r.GetSeverityText())
	}
	for k, want := range map[string]int64{"ocsf.class_uid": 4002, "ocsf.category_uid": 4, "ocsf.type_uid": 400206} {
		if v := denial.attr(k); v.GetIntValue() != want {
			t.Errorf("attribute %s = %v, want %d", k, v, want)
		}
	}
	if v := denial.attr("ocsf.version"); v.GetStringValue() != ocsf.Version {
		t.Errorf("ocsf.version %v", v)
	}
	if got := hex.EncodeToString(r.GetTraceId()); got != traceID {
		t.Errorf("trace id %q, want %s", got, traceID)
	}
	for _, l := range logs {
		if l.rec != r && len(l.rec.GetTraceId()) != 0 {
			t.Errorf("the allowed call without a trace id got %x", l.rec.GetTraceId())
		}
	}
}

// While the receiver refuses connections every event is dropped and
// counted and Emit never blocks; once it is back the emitter writes the
// drop report.
func TestOTLPDownThenRecovers(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var target atomic.Value
	target.Store(ln.Addr().String())
	ln.Close()

	rc := &receiver{got: make(chan struct{}, 1)}
	srv := httptest.NewServer(rc)
	defer srv.Close()
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, target.Load().(string))
		},
	}}
	sink, err := ocsf.NewOTLP(ocsf.OTLPConfig{Endpoint: "http://collector.test/otel/v1/logs", Client: client})
	if err != nil {
		t.Fatal(err)
	}
	em := ocsf.NewEmitter(sink, ocsf.Config{Queue: 16, Rest: time.Nanosecond, Product: ocsf.Proxy})
	wrote := runEmitter(t, em)

	for i := range 100 {
		em.Emit(denial(i))
	}
	deadline := time.After(10 * time.Second)
	for em.Dropped() < 100 {
		select {
		case <-wrote:
		case <-deadline:
			t.Fatalf("dropped %d of 100 while the receiver refused", em.Dropped())
		}
	}
	if em.Written() != 0 {
		t.Fatalf("written %d while down", em.Written())
	}

	target.Store(srv.Listener.Addr().String())
	em.Emit(denial(1))
	logs := rc.wait(t, 2)
	var report, ev map[string]any
	for _, l := range logs {
		e := l.event(t)
		if err := ocsftest.Validate([]byte(l.rec.GetBody().GetStringValue())); err != nil {
			t.Error(err)
		}
		if l.service != "portcullis" {
			t.Errorf("service %q, want the default portcullis", l.service)
		}
		if e["class_uid"] == float64(ocsf.ClassApplicationError) {
			report = e
			if l.attr("ocsf.class_uid").GetIntValue() != ocsf.ClassApplicationError {
				t.Errorf("report's attributes %v", l.rec.GetAttributes())
			}
		} else {
			ev = e
		}
	}
	if ev == nil || report == nil {
		t.Fatalf("want the event and a drop report, got %d records", len(logs))
	}
	if n := unmapped(report, "dropped"); n != float64(100) {
		t.Errorf("report says %v dropped, want 100", n)
	}
	if s := unmapped(report, "sink"); s != "otlp:http://collector.test/otel/v1/logs" {
		t.Errorf("report names sink %v", s)
	}
}

// A receiver answering with an error fails the batch; a bad endpoint is
// refused before anything is sent.
func TestOTLPRefused(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		http.Error(w, "unauthorized", http.StatusUnauthorized)
	}))
	defer srv.Close()
	sink, err := ocsf.NewOTLP(ocsf.OTLPConfig{Endpoint: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(denial(0)())
	if err := sink.Write(context.Background(), [][]byte{b}); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("err = %v, want the 401", err)
	}
	if calls.Load() != 1 {
		t.Errorf("%d requests, want 1 (no retry)", calls.Load())
	}
	// An event that is not JSON is refused before anything is sent.
	if err := sink.Write(context.Background(), [][]byte{[]byte("not json")}); err == nil {
		t.Error("a non-JSON event was accepted")
	}
	if calls.Load() != 1 {
		t.Errorf("%d requests after a bad event, want still 1", calls.Load())
	}
	if err := sink.Close(); err != nil {
		t.Error(err)
	}
	for _, bad := range []string{"", "ftp://collector:4318", "localhost:4318", "http://"} {
		if s, err := ocsf.NewOTLP(ocsf.OTLPConfig{Endpoint: bad}); err == nil || s != nil {
			t.Errorf("endpoint %q: sink %v, err %v; want refused", bad, s, err)
		}
	}
}

func unmapped(e map[string]any, k string) any { return dig(e, "unmapped", k) }

// dig follows keys through nested objects (nil where one is missing).
func dig(e map[string]any, keys ...string) any {
	var v any = e
	for _, k := range keys {
		m, _ := v.(map[string]any)
		v = m[k]
	}
	return v
}
