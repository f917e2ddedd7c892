package gateway_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/portcullis-dev/portcullis/gateway"
	"github.com/portcullis-dev/portcullis/gateway/notify"
)

// webhookSink records the webhook calls it accepts; it fails the first
// failFirst calls with 503.
type webhookSink struct {
	mu        sync.Mutex
	secret    string
	failFirst int
	calls     int
	events    []map[string]any
	texts     []string
	bad       []string // calls whose signature did not verify
}

func (w *webhookSink) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.calls++
	if w.calls <= w.failFirst {
		rw.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	if !notify.VerifyWebhook([]byte(w.secret), r.Header.Get("X-Portcullis-Signature"), r.Header.Get("X-Portcullis-Timestamp"), body) {
		w.bad = append(w.bad, string(body))
		rw.WriteHeader(http.StatusUnauthorized)
		return
	}
	var n struct {
		Text  string         `json:"text"`
		Event map[string]any `json:"event"`
	}
	if err := json.Unmarshal(body, &n); err != nil {
		w.bad = append(w.bad, string(body))
		return
	}
	w.texts = append(w.texts, n.Text)
	w.events = append(w.events, n.Event)
}

// find returns the first recorded event of kind whose fields match.
func (w *webhookSink) find(kind string, match func(map[string]any) bool) map[string]any {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, ev := range w.events {
		if ev["kind"] == kind && match(ev) {
			return ev
		}
	}
	return nil
}

// TestWebhook: the people's webhook hears of proposals, each message
// linking to its page in the console; the audit head goes only to the
// audit webhook.
func TestWebhook(t *testing.T) {
	sink := &webhookSink{secret: "s3cret", failFirst: 2}
	srv := httptest.NewServer(sink)
	defer srv.Close()
	archive := &webhookSink{secret: "s3cret"}
	archiveSrv := httptest.NewServer(archive)
	defer archiveSrv.Close()
	const console = "https://portcullis.example.com/"
	e := startAdvisor(t, "sqlite", func(c *gateway.Config) {
		c.WebhookURL, c.WebhookSecret, c.WebhookBackoff = srv.URL, "s3cret", 10*time.Millisecond
		c.AuditWebhookURL, c.ExternalURL = archiveSrv.URL, console
	})
	olive := e.operator(t, "olive")
	p := e.mustSubmit(t, trackShipment)
	id := float64(p.GetId())
	// The first two calls fail: the event arrives on a retry, signed.
	waitFor(t, "the needs-human notification", func() bool {
		return sink.find(notify.EventNeedsHuman, func(ev map[string]any) bool { return ev["proposal"] == id }) != nil
	})
	ev := sink.find(notify.EventNeedsHuman, func(ev map[string]any) bool { return ev["proposal"] == id })
	if ev["sandbox"] != "support" || ev["approvals_required"] != float64(1) || !strings.Contains(strings.Join(sink.texts, "\n"), "new_mcp_tool") {
		t.Fatalf("needs-human event %v, texts %q", ev, sink.texts)
	}
	link := fmt.Sprintf("https://portcullis.example.com/#/proposal/%d", p.GetId())
	if ev["url"] != link || !strings.Contains(strings.Join(sink.texts, "\n"), link) {
		t.Fatalf("needs-human event %v, texts %q: want the link %s in both", ev, sink.texts, link)
	}
	// A newer proposal for the same endpoint supersedes it: announced.
	newer := e.mustSubmit(t, strings.Replace(trackShipment, "tool: track_shipment }", "tool: track_shipment }\n        - allow: { method: tools/call, tool: list_carriers }", 1))
	waitFor(t, "the superseded notification", func() bool {
		return sink.find(notify.EventDecided, func(ev map[string]any) bool { return ev["proposal"] == id && ev["status"] == "superseded" }) != nil
	})
	p, id = newer, float64(newer.GetId())
	if _, err := approve(t, olive, p); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the decided notification", func() bool {
		return sink.find(notify.EventDecided, func(ev map[string]any) bool {
			return ev["proposal"] == id && ev["status"] == "applied" && ev["applied_version"] == float64(2) && ev["decided_by"] == "olive"
		}) != nil
	})
	if ev := sink.find(notify.EventDecided, func(ev map[string]any) bool { return ev["proposal"] == id }); ev["url"] != fmt.Sprintf("https://portcullis.example.com/#/proposal/%d", newer.GetId()) {
		t.Errorf("decided event %v: want its console link", ev)
	}
	// The audit head moved with those changes, and is announced to the
	// archive, never to the people's channel.
	waitFor(t, "an audit head notification", func() bool {
		return archive.find(notify.EventAuditHead, func(ev map[string]any) bool { return ev["hash"] != "" }) != nil
	})
	if ev := sink.find(notify.EventAuditHead, func(map[string]any) bool { return true }); ev != nil {
		t.Errorf("the people's webhook got an audit head: %v", ev)
	}
	for _, s := range []*webhookSink{sink, archive} {
		s.mu.Lock()
		bad := s.bad
		s.mu.Unlock()
		if len(bad) > 0 {
			t.Fatalf("calls with a bad signature or body: %q", bad)
		}
	}
}

// TestWebhookNeverBlocks: a webhook that always fails (or hangs) never
// holds up a decision.
func TestWebhookNeverBlocks(t *testing.T) {
	hang := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-hang:
		case <-r.Context().Done():
		}
		w.WriteHeader(http.StatusInternalServerError)
	}))
	defer srv.Close()
	defer close(hang)
	e := startAdvisor(t, "sqlite", func(c *gateway.Config) { c.WebhookURL, c.WebhookBackoff = srv.URL, time.Hour })
	olive := e.operator(t, "olive")
	start := time.Now()
	for _, doc := range []string{trackShipment, strings.Replace(trackShipment, "track_shipment", "list_carriers", 1)} {
		p := e.mustSubmit(t, doc)
		if r, err := approve(t, olive, p); err != nil || r.GetStatus() != "applied" {
			t.Fatalf("approve with a stuck webhook: %v, %v", r, err)
		}
	}
	// No timing threshold: the decisions above returned although every
	// webhook call hangs until the test ends.
	t.Logf("two submissions and approvals with a stuck webhook took %v", time.Since(start))
}
