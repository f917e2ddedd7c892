package notify_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/portcullis-dev/portcullis/gateway/notify"
	"github.com/portcullis-dev/portcullis/internal/events"
	"github.com/portcullis-dev/portcullis/store"
)

// TestVerifyWebhook: the signature covers the timestamp and the body.
func TestVerifyWebhook(t *testing.T) {
	body := []byte(`{"text":"x"}`)
	m := hmac.New(sha256.New, []byte("k"))
	m.Write([]byte("1700000000." + string(body)))
	sig := "sha256=" + hex.EncodeToString(m.Sum(nil))
	if !notify.VerifyWebhook([]byte("k"), sig, "1700000000", body) {
		t.Fatal("a correct signature did not verify")
	}
	for name, ok := range map[string]bool{
		"other key":       notify.VerifyWebhook([]byte("K"), sig, "1700000000", body),
		"other timestamp": notify.VerifyWebhook([]byte("k"), sig, "1700000001", body),
		"other body":      notify.VerifyWebhook([]byte("k"), sig, "1700000000", []byte(`{"text":"y"}`)),
		"no prefix":       notify.VerifyWebhook([]byte("k"), strings.TrimPrefix(sig, "sha256="), "1700000000", body),
	} {
		if ok {
			t.Errorf("%s: verified", name)
		}
	}
}

// received is one webhook call a test receiver accepted.
type received struct {
	Text  string         `json:"text"`
	Event map[string]any `json:"event"`
}

// TestCallNotifications: a held call pages a person with its sandbox,
// what it calls, the digest of its arguments (never the arguments), its
// deadline and a link to it in the console; its decision follows.
func TestCallNotifications(t *testing.T) {
	got := make(chan received, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if !notify.VerifyWebhook([]byte("k"), r.Header.Get("X-Portcullis-Signature"), r.Header.Get("X-Portcullis-Timestamp"), body) {
			t.Errorf("a call whose signature does not verify: %s", body)
		}
		var n received
		if err := json.Unmarshal(body, &n); err != nil {
			t.Errorf("body %s: %v", body, err)
		}
		got <- n
	}))
	defer srv.Close()
	n := notify.New(notify.Config{URL: srv.URL, Secret: "k", ConsoleURL: "https://portcullis.example.com/"}, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); n.Run(ctx) }()
	defer func() { cancel(); <-done }()

	deadline := time.Date(2026, 12, 5, 12, 2, 0, 0, time.UTC)
	call := store.HeldCall{ID: 9, Sandbox: "orders", ProxyID: "p-1", Host: "orders.example.com", Port: 443, Method: "POST", Path: "/mcp",
		MCPMethod: "tools/call", Tool: "refund", ArgumentsJSON: `{"card":"4111111111111111","amount":12.50}`,
		ArgumentsDigest: "sha256:" + strings.Repeat("ab", 32), PolicyVersion: 4, Status: store.CallHeld, Deadline: deadline}
	n.Handle(events.CallHeld{Call: call})
	held := <-got
	link := "https://portcullis.example.com/#/call/9"
	want := map[string]any{"kind": "call.held", "call": float64(9), "sandbox": "orders", "tool": "refund", "mcp_method": "tools/call",
		"host": "orders.example.com", "port": float64(443), "arguments_digest": call.ArgumentsDigest, "deadline": "2026-12-05T12:02:00Z",
		"status": "held", "url": link, "policy_version": float64(4)}
	for k, v := range want {
		if held.Event[k] != v {
			t.Errorf("call.held event[%q] = %v, want %v (event %v)", k, held.Event[k], v, held.Event)
		}
	}
	for _, s := range []string{"Call 9 of sandbox orders is held", "tools/call refund at orders.example.com:443", call.ArgumentsDigest, "2026-12-05T12:02:00Z", link} {
		if !strings.Contains(held.Text, s) {
			t.Errorf("call.held text %q: want %q in it", held.Text, s)
		}
	}
	whole, _ := json.Marshal(held)
	if strings.Contains(string(whole), "4111111111111111") || strings.Contains(string(whole), "12.50") {
		t.Errorf("the webhook carried the call's arguments: %s", whole)
	}

	call.Status, call.DecidedBy, call.Reason, call.ProposalID = store.CallApproved, "olive", "refund agreed", 12
	n.Handle(events.CallDecided{Call: call})
	decided := <-got
	if decided.Event["kind"] != "call.decided" || decided.Event["status"] != "approved" || decided.Event["decided_by"] != "olive" ||
		decided.Event["proposal"] != float64(12) || decided.Event["url"] != link ||
		!strings.Contains(decided.Text, "Call 9 of sandbox orders (tools/call refund at orders.example.com:443) is approved by olive: refund agreed") {
		t.Errorf("call.decided: %+v", decided)
	}
	if strings.Contains(decided.Text+fmt.Sprint(decided.Event), "4111111111111111") {
		t.Errorf("the decision carried the call's arguments: %+v", decided)
	}
}
