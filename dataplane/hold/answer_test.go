package hold_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/portcullis-dev/portcullis/dataplane/hold"
	"github.com/portcullis-dev/portcullis/dataplane/mcp"
	"github.com/portcullis-dev/portcullis/dataplane/mcp/ssetest"
	"github.com/portcullis-dev/portcullis/policy"
)

const toolCall = `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"refund","arguments":{"order": 1.50},"_meta":{"progressToken":"p1"}}}`

func parse(t *testing.T, body string) *mcp.Request {
	t.Helper()
	h := http.Header{"Content-Type": {"application/json"}, "Accept": {"application/json, text/event-stream"}}
	mreq, err := mcp.Parse(h, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	return mreq
}

func request(accept string) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/mcp", nil)
	r.Header.Set("Accept", accept)
	return r
}

// events reads an event stream as an LF-only client does.
func events(t *testing.T, body string) []string {
	t.Helper()
	var data []string
	for _, d := range ssetest.LFOnlyData([]byte(body)) {
		data = append(data, string(d))
	}
	return data
}

// The server's answer after an approval, on the event stream the proxy
// opened for progress: JSON as one event, a stream's events as they are,
// an HTTP error as a JSON-RPC error.
func TestAnswerRelaysAfterProgress(t *testing.T) {
	for _, tc := range []struct {
		name, contentType string
		status            int
		body              string
		want              string // in the last event
	}{
		{"json", "application/json", 200, "{\"jsonrpc\": \"2.0\",\n \"id\": 3, \"result\": {}}", `{"jsonrpc":"2.0","id":3,"result":{}}`},
		{"event stream", "text/event-stream", 200, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{}}\n\n", `{"jsonrpc":"2.0","id":3,"result":{}}`},
		{"server error", "text/plain", 502, "bad gateway", `"code":-32005`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mreq := parse(t, toolCall)
			rec := httptest.NewRecorder()
			a := hold.NewAnswer(rec, request("application/json, text/event-stream"), mreq, []byte(toolCall))
			a.Progress(hold.Progress{ID: 9, Deadline: time.Date(2026, 12, 5, 13, 0, 0, 0, time.UTC)})
			w := a.Writer()
			w.Header().Set("Content-Type", tc.contentType)
			w.Header().Set("Mcp-Session-Id", "s1")
			w.WriteHeader(tc.status)
			io.WriteString(w, tc.body)
			a.Finish()
			if rec.Code != 200 || rec.Header().Get("Content-Type") != "text/event-stream" || rec.Header().Get("Mcp-Session-Id") != "" {
				t.Errorf("answered %d %v", rec.Code, rec.Header())
			}
			got := events(t, rec.Body.String())
			if len(got) != 2 || !strings.Contains(got[0], `"method":"notifications/progress"`) || !strings.Contains(got[0], `"progressToken":"p1"`) || !strings.Contains(got[0], "held call 9") {
				t.Fatalf("events %q", got)
			}
			if !strings.Contains(got[1], tc.want) {
				t.Errorf("last event %q, want %s", got[1], tc.want)
			}
		})
	}
}

// Without a token (or an agent that does not take event streams) the
// request just waits: the answer's writer is the request's own.
func TestAnswerWithoutProgress(t *testing.T) {
	noToken := strings.Replace(toolCall, `,"_meta":{"progressToken":"p1"}`, "", 1)
	for name, tc := range map[string]struct{ body, accept string }{
		"no token":             {noToken, "application/json, text/event-stream"},
		"no event stream":      {toolCall, "application/json"},
		"progress token null":  {strings.Replace(toolCall, `"p1"`, "null", 1), "application/json, text/event-stream"},
		"token, refused after": {toolCall, "application/json"},
	} {
		t.Run(name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			a := hold.NewAnswer(rec, request(tc.accept), parse(t, tc.body), []byte(tc.body))
			a.Progress(hold.Progress{ID: 9})
			if a.Writer() != http.ResponseWriter(rec) || rec.Body.Len() != 0 {
				t.Errorf("progress written: %q", rec.Body.String())
			}
			a.Refuse(hold.Outcome{Code: hold.ReviewTimeout, Reason: "no decision", ID: 9}, "dn_1", "7", "")
			var msg struct {
				ID    int `json:"id"`
				Error struct {
					Code int            `json:"code"`
					Data map[string]any `json:"data"`
				} `json:"error"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &msg); err != nil || rec.Code != 403 || msg.ID != 3 || msg.Error.Code != hold.RefusedCode ||
				msg.Error.Data["reason_code"] != hold.ReviewTimeout || msg.Error.Data["call_id"] != float64(9) || msg.Error.Data["denial_id"] != "dn_1" {
				t.Errorf("refusal %d %s", rec.Code, rec.Body.String())
			}
		})
	}
}

// A REST call's arguments: its body's text as sent, digested as bytes;
// a body that is not text is refused. A tools/call's
// are its arguments as sent, digested in RFC 8785 form.
func TestCallOf(t *testing.T) {
	req := &policy.Request{Host: "api.example.com", Port: 443, HTTPMethod: "POST", Path: "/v1/payouts/1", Binary: "/bin/agent"}
	d := policy.Decision{Allow: true, Entry: "api", Rule: "rules[0]", Review: time.Minute}
	for _, tc := range []struct{ body, args string }{
		{`{"amount": 12}`, `{"amount": 12}`},
		{"amount=12", "amount=12"},
		{"", ""},
	} {
		c, err := hold.CallOf(req, d, "7", nil, []byte(tc.body))
		sum := sha256.Sum256([]byte(tc.body))
		if err != nil || c.ArgumentsJSON != tc.args || c.ArgumentsDigest != "sha256:"+hex.EncodeToString(sum[:]) ||
			c.PolicyVersion != 7 || c.Timeout != time.Minute || c.Key == "" || c.Rule != "rules[0]" {
			t.Errorf("CallOf(%q) = %+v, %v", tc.body, c, err)
		}
	}
	for _, body := range []string{"\xff", "a\x00b"} {
		if c, err := hold.CallOf(req, d, "7", nil, []byte(body)); err == nil || !strings.Contains(err.Error(), "UTF-8") {
			t.Errorf("CallOf(%q) = %+v, %v; want refused", body, c, err)
		}
	}
	msg := &policy.MCPMessage{Method: "tools/call", Tool: "refund", Arguments: json.RawMessage(`{"b": 1, "a": 2}`)}
	c, err := hold.CallOf(req, d, "7", msg, nil)
	want, _ := policy.ArgumentsDigest([]byte(`{"a":2,"b":1}`))
	if err != nil || c.ArgumentsJSON != `{"b": 1, "a": 2}` || c.ArgumentsDigest != want || c.Tool != "refund" {
		t.Errorf("CallOf(tools/call) = %+v, %v", c, err)
	}
	if a, b := mustKey(t, req, d), mustKey(t, req, d); a == b {
		t.Errorf("two calls share the key %s", a)
	}
}

func mustKey(t *testing.T, req *policy.Request, d policy.Decision) string {
	c, err := hold.CallOf(req, d, "x", &policy.MCPMessage{Method: "tools/call", Tool: "t"}, nil)
	if err != nil || c.ArgumentsJSON != "{}" || c.PolicyVersion != 0 {
		t.Fatalf("CallOf without arguments = %+v, %v", c, err)
	}
	return c.Key
}

// A refusal after progress is the stream's last event: the JSON-RPC
// error, with the same fields as a 403's.
func TestAnswerRefusedOnStream(t *testing.T) {
	rec := httptest.NewRecorder()
	a := hold.NewAnswer(rec, request("text/event-stream, application/json"), parse(t, toolCall), []byte(toolCall))
	a.Progress(hold.Progress{})
	a.Refuse(hold.Outcome{Code: hold.ReviewStale, Reason: "the policy in force no longer allows the call"}, "dn_2", "8", "abc")
	got := events(t, rec.Body.String())
	if rec.Code != 200 || len(got) != 2 || !strings.Contains(got[0], "waiting to be filed") {
		t.Fatalf("answered %d, events %q", rec.Code, got)
	}
	for _, want := range []string{`"id":3`, `"code":-32004`, `"reason_code":"review_stale"`, `"denial_id":"dn_2"`, `"policy_version":"8"`, `"trace_id":"abc"`} {
		if !strings.Contains(got[1], want) {
			t.Errorf("refusal event %s lacks %s", got[1], want)
		}
	}
	if strings.Contains(got[1], "call_id") {
		t.Errorf("a call never filed has a call_id: %s", got[1])
	}
}
