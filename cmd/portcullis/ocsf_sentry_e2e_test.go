package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

// Sentry as OCSF with the real gateway: a watchdog with a sentry token
// posts a quarantine (remediate), then a bulk batch. The gateway's
// --ocsf-file has the quarantine as a Detection Finding and the freeze
// it caused as a Remediation Activity (Isolate, the deny-all version),
// once each (the watchdog resends it) and joined by the event's key; the batch's high-severity
// event is a finding too, its heartbeat and plain info event are not;
// the drift the gateway derives from the batch's policy hash is a
// finding. Every line validates.
func TestOCSFSentryEndToEnd(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "gateway.ocsf.jsonl")
	gw := startGatewayProcess(t, []string{"PORTCULLIS_BOOTSTRAP_TOKEN=" + pushAdminToken, "PORTCULLIS_DATABASE_URL="},
		"--data-dir", filepath.Join(dir, "gateway"), "--ocsf-file", file)
	gatewayURL := "http://" + gw.addr
	api := newPushAPI(gatewayURL)
	if _, err := api.sandbox.CreateSandbox(t.Context(), &portcullisv1.CreateSandboxRequest{Name: "agent-1", Policy: pushDoc(8080, "v1")}); err != nil {
		t.Fatal(err)
	}
	admin := []string{"--gateway", gatewayURL, "--token", pushAdminToken}
	stdout, stderr, code := runCLI(t, append(admin, "token", "create", "--role", "sentry", "--name", "sentry://dpu-7", "-o", "json")...)
	if code != exitOK {
		t.Fatalf("token create --role sentry: exit %d: %s", code, stderr)
	}
	var watchdog struct{ Token string }
	if err := json.Unmarshal([]byte(stdout), &watchdog); err != nil || watchdog.Token == "" {
		t.Fatalf("token create answered %s: %v", stdout, err)
	}
	post := func(media, body string) {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, gatewayURL+"/v1/sentry/events", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", media)
		req.Header.Set("Authorization", "Bearer "+watchdog.Token)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK || strings.Contains(string(b), `"refused":[{`) {
			t.Fatalf("POST /v1/sentry/events: %d %s", res.StatusCode, b)
		}
	}
	now := time.Now().UTC().Format(time.RFC3339Nano)
	event := func(id string, seq int, class, data string) string {
		return fmt.Sprintf(`{"specversion": "1.0", "id": %q, "source": "sentry://dpu-7", "sequence": %d,
		  "type": "portcullis.sentry.v1.%s", "subject": "agent-1", "time": %q, "data": %s}`, id, seq, class, now, data)
	}
	quarantine := event("q-0001", 1, "quarantine",
		`{"severity": "critical", "processing": "remediate", "finding": {"title": "agent exfiltrating order data", "confidence": 0.98},
		  "correlation": {"trace_id": "4bf92f3577b34da6a3ce929d0e0e4736"}}`)
	post("application/cloudevents+json", quarantine)
	post("application/cloudevents+json", quarantine) // a resend: neither stored nor acted on again
	hash := strings.Repeat("ab", 32)
	post("application/cloudevents-batch+json", "["+strings.Join([]string{
		event("h-0002", 2, "heartbeat", `{"severity": "info"}`),
		event("p-0003", 3, "policy_decision", `{"severity": "info", "policy": {"version": 1, "hash": "`+hash+`"}}`),
		event("t-0004", 4, "tool_access", `{"severity": "high", "tool_call": {"server": "orders", "tool": "refund", "arguments_digest": "sha256:`+strings.Repeat("cd", 32)+`"}}`),
	}, ",")+"]")

	// The drift is derived two seconds after ingest; the rest is emitted
	// as it happens.
	waitOCSF(t, file, func(e map[string]any) bool { return dig(e, "finding_info", "uid") == "drift:sentry://dpu-7/p-0003" })
	waitOCSF(t, file, func(e map[string]any) bool { return unmapped(e, "action") == "sentry.action" })
	gw.stop(t)

	var findings, remediations, drifts, toolAccess, quiet int
	for _, e := range readOCSF(t, file) {
		switch uid, _ := dig(e, "metadata", "uid").(string); {
		case e["class_uid"] == float64(2004) && uid == "sentry://dpu-7/q-0001":
			findings++
			if e["severity_id"] != float64(5) || dig(e, "finding_info", "title") != "agent exfiltrating order data" ||
				dig(e, "finding_info", "types") == nil || e["is_alert"] != true || e["confidence_score"] != float64(98) ||
				dig(e, "metadata", "correlation_uid") != "4bf92f3577b34da6a3ce929d0e0e4736" {
				t.Errorf("the quarantine's finding: %v", e)
			}
		case e["class_uid"] == float64(7001):
			remediations++
			if e["activity_id"] != float64(1) || e["status_id"] != float64(1) || e["disposition_id"] != float64(4) ||
				dig(e, "policy", "version") != "2" || dig(e, "policy", "name") != "agent-1" ||
				dig(e, "metadata", "correlation_uid") != "sentry://dpu-7/q-0001" || unmapped(e, "status") != "frozen" {
				t.Errorf("the quarantine's remediation: %v", e)
			}
		case uid == "drift:sentry://dpu-7/p-0003":
			drifts++
		case uid == "sentry://dpu-7/t-0004":
			toolAccess++
			if s, _ := json.Marshal(e); strings.Contains(string(s), `"arguments":`) {
				t.Errorf("the tool access finding names arguments: %s", s)
			}
		case strings.HasPrefix(uid, "sentry://dpu-7/"):
			quiet++
			t.Errorf("an event that is not notable was emitted: %v", e)
		}
	}
	if findings != 1 || remediations != 1 || drifts != 1 || toolAccess != 1 || quiet != 0 {
		t.Errorf("gateway file: %d quarantine findings, %d remediations, %d drifts, %d tool access findings, %d others; want 1, 1, 1, 1, 0",
			findings, remediations, drifts, toolAccess, quiet)
	}
}
