package gateway_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"

	"github.com/portcullis-dev/portcullis/gateway"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

// TestCloudEventsSDKDefaultClient: the official CloudEvents Go SDK's
// default HTTP client, unmodified but for the bearer token, sends binary
// content mode (ce-* headers, data as the body); the intake takes it and
// stores the event. It used to answer 415.
func TestCloudEventsSDKDefaultClient(t *testing.T) {
	e := startSentry(t, "sqlite")
	c, err := cloudevents.NewClientHTTP(cloudevents.WithTarget(e.gw.URL+gateway.SentryEventsPath), cloudevents.WithHeader("Authorization", "Bearer "+e.token))
	if err != nil {
		t.Fatal(err)
	}
	ev := cloudevents.NewEvent()
	ev.SetID("sdk-1")
	ev.SetSource(watchdogSource)
	ev.SetType("portcullis.sentry.v1.tool_access")
	ev.SetSubject("support")
	ev.SetExtension("sequence", 1)
	// The SDK sends header values as they are, without the binding's
	// percent-encoding: UTF-8 and quotes are taken as sent (a '%' not
	// starting an escape is not: the binding says to encode it).
	ev.SetExtension("note", `héllo "wörld"`)
	if err := ev.SetData(cloudevents.ApplicationJSON, map[string]any{
		"severity": "low", "tool_call": map[string]any{"server": "orders", "tool": "refund"},
	}); err != nil {
		t.Fatal(err)
	}
	if res := c.Send(t.Context(), ev); !cloudevents.IsACK(res) {
		t.Fatalf("the SDK's default client: %v", res)
	}
	got := e.events(t, watchdogSource)
	if len(got) != 1 {
		t.Fatalf("%d events stored, want 1", len(got))
	}
	g := got[0]
	if g.GetId() != "sdk-1" || g.GetSubject() != "support" || g.GetSequence() != 1 {
		t.Fatalf("stored %v", g)
	}
	// The default client sets the time (WithTimeNow).
	if !slices.Equal(g.GetFlags(), []string{"extension"}) || g.GetTime().AsTime().After(g.GetReceivedAt().AsTime()) {
		t.Fatalf("flags %v time %v received %v, want [extension] and the client's time", g.GetFlags(), g.GetTime().AsTime(), g.GetReceivedAt().AsTime())
	}
	var doc map[string]any
	if err := json.Unmarshal([]byte(g.GetDocument()), &doc); err != nil {
		t.Fatal(err)
	}
	if doc["note"] != `héllo "wörld"` || doc["datacontenttype"] != "application/json" {
		t.Fatalf("document %s", g.GetDocument())
	}
}

// TestCloudEventsBinaryMode: the HTTP binding's binary mode, rule by
// rule; a refusal answers 400 naming the attribute and stores nothing.
func TestCloudEventsBinaryMode(t *testing.T) {
	e := startSentry(t, "sqlite")
	data := `{"severity":"low","tool_call":{"server":"orders","tool":"refund"}}`
	base := func() http.Header {
		return http.Header{
			"Ce-Specversion": {"1.0"}, "Ce-Id": {"b1"}, "Ce-Source": {watchdogSource},
			"Ce-Type": {"portcullis.sentry.v1.tool_access"}, "Ce-Subject": {"support"}, "Ce-Sequence": {"1"},
			"Content-Type": {"application/json"},
		}
	}
	send := func(h http.Header, body string) (int, answer) {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, e.gw.URL+gateway.SentryEventsPath, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header = h
		req.Header.Set("Authorization", "Bearer "+e.token)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		raw, _ := io.ReadAll(res.Body)
		var a answer
		if err := json.Unmarshal(raw, &a); err != nil {
			t.Fatalf("answer %d is not JSON: %q", res.StatusCode, raw)
		}
		return res.StatusCode, a
	}
	for _, tc := range []struct {
		name   string
		edit   func(h http.Header)
		body   string
		reason string
	}{
		{"data in a header", func(h http.Header) { h.Set("Ce-Data", "{}") }, data, "data: "},
		{"datacontenttype in a header", func(h http.Header) { h.Set("Ce-Datacontenttype", "application/json") }, data, "datacontenttype: "},
		{"no Content-Type", func(h http.Header) { h.Del("Content-Type") }, data, "datacontenttype: "},
		{"text data", func(h http.Header) { h.Set("Content-Type", "text/plain") }, data, "datacontenttype: "},
		{"latin-1 data", func(h http.Header) { h.Set("Content-Type", "application/json; charset=iso-8859-1") }, data, "datacontenttype: "},
		{"body not JSON", nil, "severity=low", "data: "},
		{"bad percent-encoding", func(h http.Header) { h.Set("Ce-Note", "100%") }, data, "note: "},
		{"percent-encoded non-UTF-8", func(h http.Header) { h.Set("Ce-Note", "%FF") }, data, "note: "},
		{"attribute twice", func(h http.Header) { h.Add("Ce-Note", "a"); h.Add("Ce-Note", "b") }, data, "note: "},
		{"bad time", func(h http.Header) { h.Set("Ce-Time", "yesterday") }, data, "time: "},
		{"no id", func(h http.Header) { h.Del("Ce-Id") }, data, "id: "},
		{"bad extension name", func(h http.Header) { h.Set("Ce-Trace-Parent", "x") }, data, "trace-parent: "},
	} {
		h := base()
		if tc.edit != nil {
			tc.edit(h)
		}
		code, a := send(h, tc.body)
		if code != http.StatusBadRequest || !strings.HasPrefix(a.Error, tc.reason) {
			t.Errorf("%s: %d %q, want 400 %q…", tc.name, code, a.Error, tc.reason)
		}
	}
	if n := len(e.events(t, "")); n != 0 {
		t.Fatalf("%d events stored from refused requests", n)
	}
	// Accepted: a JSON media type with a charset, a +json type, RFC 3339's
	// lower-case t and z, a leap second, percent-encoded values; without
	// ce-time but for the two.
	for i, tc := range []func(h http.Header){
		func(h http.Header) { h.Set("Content-Type", "application/json; charset=utf-8") },
		func(h http.Header) { h.Set("Content-Type", "application/vnd.example+json") },
		func(h http.Header) { h.Set("Ce-Time", "2026-12-01t19:00:00.25z") },
		func(h http.Header) { h.Set("Ce-Time", "2016-12-31T23:59:60Z") },
		func(h http.Header) { h.Set("Ce-Note", "a%20b%22c%25%C3%A9") },
	} {
		h := base()
		tc(h)
		h.Set("Ce-Id", "ok"+string(rune('a'+i)))
		h.Set("Ce-Sequence", string(rune('1'+i)))
		if code, a := send(h, data); code != http.StatusOK || a.Stored != 1 {
			t.Errorf("accepted case %d: %d %+v", i, code, a)
		}
	}
	got := e.events(t, "")
	if len(got) != 5 {
		t.Fatalf("%d events stored, want 5", len(got))
	}
	byID := map[string]*portcullisv1.StoredSentryEvent{}
	for _, g := range got {
		byID[g.GetId()] = g
	}
	// Sent without a time: given the time received, and flagged.
	if a := byID["oka"]; !slices.Contains(a.GetFlags(), "time_defaulted") || !a.GetTime().AsTime().Equal(a.GetReceivedAt().AsTime()) {
		t.Errorf("no time: flags %v, time %v, received %v", a.GetFlags(), a.GetTime().AsTime(), a.GetReceivedAt().AsTime())
	}
	if a := byID["okc"]; slices.Contains(a.GetFlags(), "time_defaulted") {
		t.Errorf("a time sent, flags %v", a.GetFlags())
	}
	if want := time.Date(2026, 12, 1, 19, 0, 0, 25e7, time.UTC); !byID["okc"].GetTime().AsTime().Equal(want) {
		t.Errorf("lower-case time read as %v", byID["okc"].GetTime().AsTime())
	}
	if want := time.Date(2017, 1, 1, 0, 0, 0, 0, time.UTC); !byID["okd"].GetTime().AsTime().Equal(want) {
		t.Errorf("leap second read as %v", byID["okd"].GetTime().AsTime())
	}
	if !bytes.Contains([]byte(byID["oke"].GetDocument()), []byte(`"note":"a b\"c%é"`)) {
		t.Errorf("percent-decoded note: %s", byID["oke"].GetDocument())
	}
}
