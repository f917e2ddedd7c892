package gateway_test

import (
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/portcullis-dev/portcullis/gateway"
	"github.com/portcullis-dev/portcullis/gateway/notify"
	"github.com/portcullis-dev/portcullis/internal/ocsf"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

// TestWebhookHeldCall: a call a proxy files pages the people's webhook
// with a link to it in the console, its digest and never its arguments;
// its decision follows.
func TestWebhookHeldCall(t *testing.T) {
	sink := &webhookSink{secret: "s3cret"}
	srv := httptest.NewServer(sink)
	defer srv.Close()
	c := newCalls(t, "sqlite", func(cfg *gateway.Config) {
		cfg.WebhookURL, cfg.WebhookSecret, cfg.WebhookBackoff = srv.URL, "s3cret", 10*time.Millisecond
		cfg.ExternalURL = "https://portcullis.example.com"
	})
	st, filed := c.hold(t, toHold("k-webhook", `{"order_id":"A-1","card":"4111111111111111"}`))
	id := float64(filed.GetId())
	link := fmt.Sprintf("https://portcullis.example.com/#/call/%d", filed.GetId())
	waitFor(t, "the call.held notification", func() bool {
		return sink.find(notify.EventCallHeld, func(ev map[string]any) bool { return ev["call"] == id }) != nil
	})
	ev := sink.find(notify.EventCallHeld, func(ev map[string]any) bool { return ev["call"] == id })
	if ev["sandbox"] != "orders" || ev["tool"] != "refund_order" || ev["url"] != link || !strings.HasPrefix(fmt.Sprint(ev["arguments_digest"]), "sha256:") {
		t.Errorf("call.held event %v", ev)
	}
	if _, err := c.operator.DenyCall(t.Context(), &portcullisv1.DenyCallRequest{Id: filed.GetId(), Reason: "no"}); err != nil {
		t.Fatal(err)
	}
	awaitDecision(t, st)
	waitFor(t, "the call.decided notification", func() bool {
		return sink.find(notify.EventCallDecided, func(ev map[string]any) bool {
			return ev["call"] == id && ev["status"] == "denied" && ev["decided_by"] == "olive"
		}) != nil
	})
	sink.mu.Lock()
	defer sink.mu.Unlock()
	all, _ := json.Marshal(sink.events)
	if texts := strings.Join(sink.texts, "\n"); strings.Contains(string(all)+texts, "4111111111111111") || !strings.Contains(texts, link) {
		t.Errorf("webhook calls carried the arguments, or no link: %s\n%s", all, texts)
	}
	if len(sink.bad) > 0 {
		t.Errorf("calls with a bad signature or body: %q", sink.bad)
	}
}

// TestHeldCallOCSF: a held call and its approval reach the OCSF emitters
// as Detection Findings, valid, with the digest and never the arguments.
func TestHeldCallOCSF(t *testing.T) {
	col := &ocsfCollector{}
	c := newCalls(t, "sqlite", func(cfg *gateway.Config) { cfg.OCSF = col.emit })
	st, filed := c.hold(t, toHold("k-ocsf", `{"order_id":"A-1","card":"4111111111111111"}`))
	if _, err := c.operator.ApproveCall(t.Context(), &portcullisv1.ApproveCallRequest{Id: filed.GetId(), Reason: "fine"}); err != nil {
		t.Fatal(err)
	}
	awaitDecision(t, st)
	want := []string{fmt.Sprintf("call-%d-approved", filed.GetId()), fmt.Sprintf("call-%d-held", filed.GetId())}
	var got []string
	waitFor(t, "the held call's OCSF events", func() bool {
		got = nil
		for _, uid := range col.uids(t, ocsf.ClassDetectionFinding) {
			if strings.HasPrefix(uid, "call-") {
				got = append(got, uid)
			}
		}
		return slices.Equal(got, want)
	})
	col.mu.Lock()
	defer col.mu.Unlock()
	all, _ := json.Marshal(col.events)
	if strings.Contains(string(all), "4111111111111111") {
		t.Errorf("OCSF events carried the arguments: %s", all)
	}
}
