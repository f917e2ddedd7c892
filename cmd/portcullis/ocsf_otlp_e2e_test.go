package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	collogpb "go.opentelemetry.io/proto/otlp/collector/logs/v1"
	logpb "go.opentelemetry.io/proto/otlp/logs/v1"
	"google.golang.org/protobuf/proto"

	"github.com/portcullis-dev/portcullis/internal/ocsf/ocsftest"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

// otlpLog is one OCSF event an OTLP/HTTP receiver decoded from a log
// record.
type otlpLog struct {
	service string
	rec     *logpb.LogRecord
	event   map[string]any
}

func (l otlpLog) intAttr(key string) int64 {
	for _, kv := range l.rec.GetAttributes() {
		if kv.GetKey() == key {
			return kv.GetValue().GetIntValue()
		}
	}
	return -1
}

// logReceiver is an in-process OTLP/HTTP logs endpoint; every record's
// body must be an OCSF event that validates.
type logReceiver struct {
	t    *testing.T
	mu   sync.Mutex
	logs []otlpLog
	got  chan struct{}
}

func (rc *logReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var req collogpb.ExportLogsServiceRequest
	if r.URL.Path != "/v1/logs" || r.Header.Get("Content-Type") != "application/x-protobuf" || proto.Unmarshal(body, &req) != nil {
		rc.t.Errorf("receiver got %s %s (%s), not an OTLP logs export", r.Method, r.URL.Path, r.Header.Get("Content-Type"))
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
				b := []byte(lr.GetBody().GetStringValue())
				if err := ocsftest.Validate(b); err != nil {
					rc.t.Errorf("record body: %v\n%s", err, b)
				}
				var ev map[string]any
				json.Unmarshal(b, &ev)
				rc.logs = append(rc.logs, otlpLog{service: service, rec: lr, event: ev})
			}
		}
	}
	rc.mu.Unlock()
	w.Header().Set("Content-Type", "application/x-protobuf")
	out, _ := proto.Marshal(&collogpb.ExportLogsServiceResponse{})
	w.Write(out)
	select {
	case rc.got <- struct{}{}:
	default:
	}
}

// wait returns the records once match finds one, with a deadline.
func (rc *logReceiver) wait(t *testing.T, what string, match func(otlpLog) bool) otlpLog {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		rc.mu.Lock()
		for _, l := range rc.logs {
			if match(l) {
				rc.mu.Unlock()
				return l
			}
		}
		n := len(rc.logs)
		rc.mu.Unlock()
		select {
		case <-rc.got:
		case <-deadline:
			t.Fatalf("no %s among the %d records received", what, n)
		}
	}
}

// --ocsf-otlp-endpoint on the gateway and the proxy, real processes: the
// sandbox's creation arrives from portcullis-gateway and a denial from
// portcullis-proxy, each an OTLP log record whose body is the OCSF
// event (validated against the vendored schema) with its severity and
// class attributes; the denial carries its denial id.
func TestOCSFOTLPEndToEnd(t *testing.T) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") }))
	defer upstream.Close()
	upPort := upstream.Listener.Addr().(*net.TCPAddr).Port
	rc := &logReceiver{t: t, got: make(chan struct{}, 1)}
	collector := httptest.NewServer(rc)
	defer collector.Close()

	dir := t.TempDir()
	gw := startGatewayProcess(t, []string{"PORTCULLIS_BOOTSTRAP_TOKEN=" + pushAdminToken, "PORTCULLIS_DATABASE_URL=", "OTEL_SERVICE_NAME="},
		"--data-dir", filepath.Join(dir, "gateway"), "--ocsf-otlp-endpoint", collector.URL)
	gatewayURL := "http://" + gw.addr
	api := newPushAPI(gatewayURL)
	created, err := api.sandbox.CreateSandbox(t.Context(), &portcullisv1.CreateSandboxRequest{Name: "agent-1", Policy: pushDoc(upPort, "v1")})
	if err != nil {
		t.Fatal(err)
	}
	create := rc.wait(t, "sandbox.create from the gateway", func(l otlpLog) bool {
		return l.service == "portcullis-gateway" && unmapped(l.event, "action") == "sandbox.create"
	})
	if create.intAttr("ocsf.class_uid") != 3004 || create.intAttr("ocsf.category_uid") != 3 || create.intAttr("ocsf.type_uid") != 300401 ||
		create.rec.GetSeverityText() != "Informational" || create.rec.GetSeverityNumber() != logpb.SeverityNumber_SEVERITY_NUMBER_INFO {
		t.Errorf("sandbox.create record: attributes %v, severity %v %q", create.rec.GetAttributes(), create.rec.GetSeverityNumber(), create.rec.GetSeverityText())
	}

	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(created.GetToken()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	px := startOCSFProxy(t, gatewayURL, tokenFile, filepath.Join(dir, "p1"), "p1", "--ocsf-otlp-endpoint", collector.URL)
	api.waitStatuses(t, []string{"p1"}, "version 1 applied", func(p *portcullisv1.ProxyStatus) bool {
		return p.GetConnected() && p.GetAppliedVersion() == 1
	})
	if got := px.get(t, upstream.URL, "/v2/denied"); got != 403 {
		t.Fatalf("/v2/denied: %d, want 403", got)
	}
	denial := waitDenial(t, api, "p1", "/v2/denied")
	got := rc.wait(t, "the denial from the proxy", func(l otlpLog) bool {
		return l.service == "portcullis-proxy" && dig(l.event, "http_request", "url", "path") == "/v2/denied"
	})
	ev := got.event
	if ev["class_uid"] != float64(4002) || ev["action_id"] != float64(2) || unmapped(ev, "denial_id") != denial.GetDenialId() ||
		dig(ev, "metadata", "version") != "1.8.0" {
		t.Errorf("denial event %v; want HTTP Activity, denied, denial id %s", ev, denial.GetDenialId())
	}
	if got.intAttr("ocsf.class_uid") != 4002 || got.intAttr("ocsf.type_uid") != int64(ev["type_uid"].(float64)) ||
		got.rec.GetSeverityNumber() != logpb.SeverityNumber_SEVERITY_NUMBER_WARN2 || got.rec.GetSeverityText() != "Medium" {
		t.Errorf("denial record: attributes %v, severity %v %q", got.rec.GetAttributes(), got.rec.GetSeverityNumber(), got.rec.GetSeverityText())
	}
	if ts := int64(got.rec.GetTimeUnixNano() / 1e6); ts != int64(ev["time"].(float64)) {
		t.Errorf("record time %d ms, event time %v", ts, ev["time"])
	}
	px.stop(t)
	gw.stop(t)
}
