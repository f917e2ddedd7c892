package main

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/portcullis-dev/portcullis/gateway"
	"github.com/portcullis-dev/portcullis/gateway/gatewaytest"
)

// watchdog is the event source of the tests' sentry token.
const watchdog = "sentry://node-3"

// cloudEvent is one Sentry event in its CloudEvents JSON form (shapes as
// in gateway/sentry_test.go).
type cloudEvent map[string]any

func toolAccessEvent(id string, seq uint64, subject, at string) cloudEvent {
	return cloudEvent{
		"specversion": "1.0", "id": id, "source": watchdog, "sequence": seq,
		"type": "portcullis.sentry.v1.tool_access", "subject": subject, "time": at,
		"data": map[string]any{"severity": "low", "tool_call": map[string]any{"server": "orders", "tool": "refund"}},
	}
}

func quarantineEvent(id string, seq uint64, subject, at string) cloudEvent {
	return cloudEvent{
		"specversion": "1.0", "id": id, "source": watchdog, "sequence": seq,
		"type": "portcullis.sentry.v1.quarantine", "subject": subject, "time": at,
		"data": map[string]any{"severity": "critical", "processing": "remediate", "finding": map[string]any{"title": "exfiltration", "confidence": 0.97}},
	}
}

// intakeAnswer is the HTTP intake's answer.
type intakeAnswer struct {
	Stored        int         `json:"stored"`
	Duplicates    int         `json:"duplicates"`
	AckedSequence uint64      `json:"acked_sequence"`
	Gaps          [][2]uint64 `json:"gaps"`
	Refused       []any       `json:"refused"`
}

// postEvents sends a batch to a gateway's HTTP intake with a sentry token
// and requires it stored whole.
func postEvents(t *testing.T, gatewayURL, token string, events ...cloudEvent) intakeAnswer {
	t.Helper()
	body, err := json.Marshal(events)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, gatewayURL+gateway.SentryEventsPath, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/cloudevents-batch+json")
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	var a intakeAnswer
	if err := json.Unmarshal(raw, &a); err != nil || res.StatusCode != http.StatusOK || len(a.Refused) != 0 {
		t.Fatalf("POST %s: %d %s", gateway.SentryEventsPath, res.StatusCode, raw)
	}
	return a
}

// sentryToken creates a sentry token for the watchdog with the CLI, as
// admin.
func sentryToken(t *testing.T, gatewayURL, admin string) string {
	t.Helper()
	stdout, stderr, code := runCLI(t, "--gateway", gatewayURL, "--token", admin,
		"token", "create", "--role", "sentry", "--name", watchdog, "-o", "json")
	ok(t, code, stderr)
	tok, _ := decodeJSON(t, stdout)["token"].(string)
	if tok == "" {
		t.Fatalf("no token in %s", stdout)
	}
	return tok
}

// rowWith is the one line of a table holding every word, "" if none does.
func rowWith(t *testing.T, table string, words ...string) string {
	t.Helper()
	var found []string
	for _, l := range lines(table) {
		all := true
		for _, w := range words {
			all = all && strings.Contains(l, w)
		}
		if all {
			found = append(found, l)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d rows with %q, want 1:\n%s", len(found), words, table)
	}
	return found[0]
}

// TestSentryCommands: the operator's Sentry commands against a real
// gateway (quarantine budget 1, so a second quarantine is held), events
// sent as a watchdog would.
func TestSentryCommands(t *testing.T) {
	// Derived findings are checked long after the test: the flags shown
	// are the reader's alone.
	// The events' times are fixed, the gateway's clock too: no max age.
	g := startGateway(t, func(c *gateway.Config) { c.QuarantineBudget, c.SentrySettle, c.SentryMaxAge = 1, time.Hour, -1 })
	admin := gatewaytest.AdminToken
	g.must(t, admin, "sandbox", "create", "orders", "-f", "testdata/quickstart.yaml")
	g.must(t, admin, "sandbox", "create", "shipping", "-f", "testdata/quickstart.yaml")
	tok := sentryToken(t, g.url, admin)

	// Sequence 3 is missing; e4 freezes orders (the budget's one), e5 is
	// held; e1 is a day earlier than the rest.
	unknown := toolAccessEvent("e2", 2, "orders", "2026-12-01T19:00:00Z")
	unknown["data"].(map[string]any)["x_vendor"] = "kept"
	a := postEvents(t, g.url, tok,
		toolAccessEvent("e1", 1, "orders", "2026-11-30T19:00:00Z"),
		unknown,
		quarantineEvent("e4", 4, "orders", "2026-12-01T19:01:00Z"),
		quarantineEvent("e5", 5, "shipping", "2026-12-01T19:02:00Z"),
	)
	if a.Stored != 4 || a.AckedSequence != 2 {
		t.Fatalf("intake answered %+v", a)
	}

	t.Run("events", func(t *testing.T) {
		out := g.must(t, admin, "sentry", "events")
		ls := lines(out)
		if len(ls) != 5 || !strings.HasPrefix(ls[0], "TIME") {
			t.Fatalf("want a header and four rows, oldest first:\n%s", out)
		}
		for _, col := range []string{"SOURCE", "SEQ", "ID", "TYPE", "SUBJECT", "SEVERITY", "PROCESSING", "FLAGS"} {
			if !strings.Contains(ls[0], col) {
				t.Errorf("header lacks %s: %q", col, ls[0])
			}
		}
		if !strings.HasPrefix(ls[1], "2026-11-30T19:00:00Z") || !strings.Contains(ls[1], " e1 ") {
			t.Errorf("first row %q, want e1 (the oldest)", ls[1])
		}
		q := rowWith(t, out, "portcullis.sentry.v1.quarantine", "shipping")
		for _, w := range []string{"2026-12-01T19:02:00Z", watchdog, " 5 ", " e5 ", "critical", "remediate"} {
			if !strings.Contains(q, w) {
				t.Errorf("quarantine row %q lacks %q", q, w)
			}
		}
		if r := rowWith(t, out, " 2 ", "tool_access"); !strings.Contains(r, "unknown_field") {
			t.Errorf("event 2 row %q does not show its unknown_field flag", r)
		}
		if r := rowWith(t, out, " 1 ", "tool_access"); !strings.HasSuffix(strings.TrimSpace(r), "-") {
			t.Errorf("event 1 row %q: no flags should print -", r)
		}

		// The sandbox, a class for --type, --since, --limit.
		if n := len(lines(g.must(t, admin, "sentry", "events", "orders"))); n != 4 {
			t.Errorf("events orders: %d lines, want a header and 3 rows", n)
		}
		out = g.must(t, admin, "sentry", "events", "--type", "quarantine")
		if ls := lines(out); len(ls) != 3 || strings.Contains(out, "tool_access") {
			t.Errorf("events --type quarantine:\n%s", out)
		}
		if ls := lines(g.must(t, admin, "sentry", "events", "--since", "2026-12-01T00:00:00Z")); len(ls) != 4 {
			t.Errorf("events --since: %v, want the three of 2026-12-01", ls)
		}
		if ls := lines(g.must(t, admin, "sentry", "events", "--limit", "1")); len(ls) != 2 || !strings.Contains(ls[1], "shipping") {
			t.Errorf("events --limit 1: %v, want the newest", ls)
		}

		m := g.json(t, admin, "sentry", "events", "orders", "--source", watchdog)
		evs, _ := m["events"].([]any)
		if len(m) != 1 || len(evs) != 3 {
			t.Fatalf("json = %v, want {\"events\": [three]}", m)
		}
		first := evs[0].(map[string]any)
		hasKeys(t, first, "source", "id", "sequence", "type", "subject", "time", "received_at", "severity", "document")
		if first["id"] != "e1" || first["sequence"] != 1.0 {
			// protojson writes uint64 as a string.
			t.Errorf("first event %v", first)
		}
		var doc map[string]any
		if err := json.Unmarshal([]byte(first["document"].(string)), &doc); err != nil || doc["id"] != "e1" {
			t.Errorf("document is not the event as received: %v %v", first["document"], err)
		}
	})

	t.Run("gaps", func(t *testing.T) {
		out := g.must(t, admin, "sentry", "gaps")
		ls := lines(out)
		if len(ls) != 2 || !strings.HasPrefix(ls[0], "SOURCE") || strings.Join(strings.Fields(ls[1]), " ") != watchdog+" 2 3" {
			t.Fatalf("gaps:\n%s", out)
		}
		m := g.json(t, admin, "sentry", "gaps", "--source", watchdog)
		srcs, _ := m["sources"].([]any)
		if len(srcs) != 1 {
			t.Fatalf("json = %v", m)
		}
		src := srcs[0].(map[string]any)
		gaps, _ := src["gaps"].([]any)
		if src["source"] != watchdog || src["acked_sequence"] != 2.0 || len(gaps) != 1 || gaps[0].(map[string]any)["from"] != 3.0 || gaps[0].(map[string]any)["to"] != 3.0 {
			t.Errorf("json source = %v", src)
		}
	})

	t.Run("actions", func(t *testing.T) {
		out := g.must(t, admin, "sentry", "actions")
		ls := lines(out)
		if len(ls) != 3 || !strings.HasPrefix(ls[0], "ID") || !strings.Contains(ls[0], "INGEST TO ACK") {
			t.Fatalf("want a header and two rows:\n%s", out)
		}
		if !strings.Contains(ls[1], "shipping") {
			t.Errorf("newest first: first row %q, want shipping's", ls[1])
		}
		frozen := rowWith(t, out, "orders", "frozen", "e4")
		// No proxy is connected: the version is committed, never ACKed.
		if f := strings.Fields(frozen); len(f) < 7 || f[5] != "2" || f[6] != "-" {
			t.Errorf("frozen row %q: want version 2 and no ACK time", frozen)
		}
		if held := rowWith(t, out, "shipping", "held", "e5"); !strings.Contains(held, "quarantine budget spent") {
			t.Errorf("held row %q lacks the reason", held)
		}

		m := g.json(t, admin, "sentry", "actions", "--status", "held")
		acts, _ := m["actions"].([]any)
		if len(m) != 1 || len(acts) != 1 {
			t.Fatalf("json = %v, want {\"actions\": [one]}", m)
		}
		held := acts[0].(map[string]any)
		hasKeys(t, held, "id", "source", "event_id", "sandbox", "type", "status", "reason", "received_at", "created_at")
		if held["sandbox"] != "shipping" || held["status"] != "held" || held["event_id"] != "e5" {
			t.Errorf("held action %v", held)
		}
		if ls := lines(g.must(t, admin, "sentry", "actions", "orders")); len(ls) != 2 {
			t.Errorf("actions orders: %v, want one row", ls)
		}
		if ls := lines(g.must(t, admin, "sentry", "actions", "--status", "held", "--status", "frozen")); len(ls) != 3 {
			t.Errorf("two --status: %v, want both rows", ls)
		}
	})

	t.Run("sandbox get names the quarantine", func(t *testing.T) {
		out := g.must(t, admin, "sandbox", "get", "orders")
		if got := field(t, out, "quarantine event"); got != "e4 from "+watchdog {
			t.Errorf("quarantine event %q:\n%s", got, out)
		}
		if !strings.Contains(field(t, out, "frozen reason"), "e4") {
			t.Errorf("frozen reason does not name the event:\n%s", out)
		}
		m := g.json(t, admin, "sandbox", "get", "orders")
		if m["quarantine_source"] != watchdog || m["quarantine_event_id"] != "e4" {
			t.Errorf("json = %v", m)
		}
		// A person's freeze names no event.
		g.must(t, admin, "sandbox", "create", "billing", "-f", "testdata/quickstart.yaml")
		g.must(t, admin, "sandbox", "freeze", "billing", "--reason", "by hand")
		if out := g.must(t, admin, "sandbox", "get", "billing"); strings.Contains(out, "quarantine") {
			t.Errorf("a freeze by hand shows a quarantine:\n%s", out)
		}
	})

	t.Run("decide", func(t *testing.T) {
		m := g.json(t, admin, "sentry", "actions", "--status", "held")
		id := fmt.Sprint(m["actions"].([]any)[0].(map[string]any)["id"])
		for _, tt := range []struct {
			args []string
			want string
		}{
			{[]string{id, "--freeze"}, "--reason"},
			{[]string{id, "--freeze", "--reason", " "}, "--reason"},
			{[]string{id, "--freeze", "--dismiss", "--reason", "r"}, "not both"},
			{[]string{id, "--reason", "r"}, "--freeze or --dismiss"},
			{[]string{"0", "--dismiss", "--reason", "r"}, "action id"},
			{[]string{"x7", "--dismiss", "--reason", "r"}, "action id"},
		} {
			_, stderr, code := g.cli(t, admin, append([]string{"sentry", "decide"}, tt.args...)...)
			if code != exitInvalid || !strings.Contains(stderr, tt.want) {
				t.Errorf("decide %v: exit %d, stderr %q; want a usage error about %s", tt.args, code, stderr, tt.want)
			}
		}
		if len(g.json(t, admin, "sentry", "actions", "--status", "held")["actions"].([]any)) != 1 {
			t.Fatal("a refused decide changed the action")
		}

		out := g.must(t, admin, "sentry", "decide", id, "--freeze", "--reason", "confirmed by on-call")
		if want := "sentry action " + id + " applied: sandbox shipping frozen, deny-all is version 2\n"; out != want {
			t.Errorf("decide --freeze printed %q, want %q", out, want)
		}
		sb := g.json(t, admin, "sandbox", "get", "shipping")
		if sb["frozen"] != true || sb["quarantine_event_id"] != "e5" {
			t.Errorf("after decide --freeze: %v", sb)
		}
		if _, stderr, code := g.cli(t, admin, "sentry", "decide", id, "--dismiss", "--reason", "again"); code != exitConflict || !strings.Contains(stderr, "not held") {
			t.Errorf("deciding twice: exit %d, %q; want a conflict", code, stderr)
		}

		// A second held action, dismissed, with -o json.
		g.must(t, admin, "sandbox", "create", "billing-2", "-f", "testdata/quickstart.yaml")
		postEvents(t, g.url, tok, quarantineEvent("e6", 6, "billing-2", "2026-12-01T19:03:00Z"))
		m = g.json(t, admin, "sentry", "actions", "--status", "held")
		id = fmt.Sprint(m["actions"].([]any)[0].(map[string]any)["id"])
		res := g.json(t, admin, "sentry", "decide", id, "--dismiss", "--reason", "false positive")
		act, _ := res["action"].(map[string]any)
		if act["status"] != "dismissed" || !strings.HasSuffix(fmt.Sprint(act["reason"]), "dismissed by admin: false positive") || act["decided_by"] == nil {
			t.Errorf("decide --dismiss json = %v", res)
		}
	})

	t.Run("timeline", func(t *testing.T) {
		out := g.must(t, admin, "sentry", "timeline", "orders", "--since", "2026-11-01T00:00:00Z")
		ls := lines(out)
		if len(ls) < 5 || !strings.HasPrefix(ls[0], "TIME") || !strings.Contains(ls[0], "KIND") {
			t.Fatalf("want a header and the sandbox's history:\n%s", out)
		}
		ev := rowWith(t, out, "sentry_event", "quarantine from "+watchdog)
		if !strings.Contains(ev, "critical, remediate") {
			t.Errorf("quarantine row %q", ev)
		}
		act := rowWith(t, out, "sentry_action", "e4: frozen")
		if !strings.Contains(act, "committed version 2") {
			t.Errorf("action row %q does not link the version it committed", act)
		}
		if f := strings.Fields(rowWith(t, out, "version", "version 2 committed (freeze)")); f[1] != "2" {
			t.Errorf("the freeze's row says version %s in force, want 2", f[1])
		}
		// Oldest first, the tool calls before the quarantine.
		if strings.Index(out, "tool_access from") > strings.Index(out, "quarantine from") {
			t.Errorf("not in time order:\n%s", out)
		}
		m := g.json(t, admin, "sentry", "timeline", "orders", "--since", "2026-11-01T00:00:00Z")
		entries, _ := m["entries"].([]any)
		if len(m) != 1 || len(entries) != len(ls)-1 {
			t.Fatalf("json has %d entries, the table %d rows: %v", len(entries), len(ls)-1, m)
		}
		hasKeys(t, entries[0].(map[string]any), "time", "kind", "summary")
		_, stderr, code := g.cli(t, admin, "sentry", "timeline")
		if code != exitInvalid {
			t.Errorf("timeline without a sandbox: exit %d, %q", code, stderr)
		}
		if _, stderr, code := g.cli(t, admin, "sentry", "timeline", "nope"); code != exitNo || !strings.Contains(stderr, "not found") {
			t.Errorf("timeline of an unknown sandbox: exit %d, %q", code, stderr)
		}
		if _, _, code := g.cli(t, admin, "sentry", "timeline", "orders", "--limit", "5001"); code != exitInvalid {
			t.Errorf("--limit 5001: exit %d", code)
		}
	})

	t.Run("list refusals", func(t *testing.T) {
		for _, tt := range []struct {
			args []string
			want string
		}{
			{[]string{"events", "--limit", "0"}, "--limit"},
			{[]string{"events", "--since", "yesterday"}, "--since"},
			{[]string{"events", "--since", "-1h"}, "--since"},
			{[]string{"events", "a", "b"}, "unexpected argument"},
			{[]string{"actions", "--status", "bogus"}, "--status must be one of"},
			{[]string{"actions", "--limit", "1001"}, "--limit"},
			{[]string{"gaps", "--source", ""}, "--source is empty"},
		} {
			_, stderr, code := g.cli(t, admin, append([]string{"sentry"}, tt.args...)...)
			if code != exitInvalid || !strings.Contains(stderr, tt.want) {
				t.Errorf("sentry %v: exit %d, stderr %q; want a usage error about %s", tt.args, code, stderr, tt.want)
			}
		}
		// The sentry token reads nothing.
		if _, _, code := g.cli(t, tok, "sentry", "events"); code != exitNo {
			t.Errorf("a sentry token listed events: exit %d", code)
		}
	})
}

func TestSentryKeyCommands(t *testing.T) {
	g := startGateway(t)
	admin := gatewaytest.AdminToken
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(pub)
	fingerprint := hex.EncodeToString(sum[:])

	b64 := writeFile(t, "node.b64", base64.StdEncoding.EncodeToString(pub)+"\n")
	out := g.must(t, admin, "sentry", "key", "set", watchdog, "--public-key", b64)
	if !strings.Contains(out, "source "+watchdog+": key set") || field(t, out, "fingerprint") != "sha256 "+fingerprint {
		t.Errorf("key set printed:\n%s", out)
	}

	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	pemFile := writeFile(t, "node.pub", string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})))
	m := g.json(t, admin, "sentry", "key", "set", watchdog, "--public-key", pemFile)
	if m["source"] != watchdog || m["fingerprint"] != fingerprint {
		t.Errorf("key set from PEM, json = %v", m)
	}

	// A keyed source's unsigned events are refused: the key took.
	tok := sentryToken(t, g.url, admin)
	body, _ := json.Marshal([]cloudEvent{toolAccessEvent("u1", 1, "orders", "2026-12-01T19:00:00Z")})
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, g.url+gateway.SentryEventsPath, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/cloudevents-batch+json")
	req.Header.Set("Authorization", "Bearer "+tok)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if !strings.Contains(string(raw), `"stored":0`) || !strings.Contains(string(raw), "signature") {
		t.Errorf("unsigned event of a keyed source: %s", raw)
	}

	ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ecDER, err := x509.MarshalPKIXPublicKey(&ec.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		data []byte
		want string
	}{
		{"text", []byte("not a key\n"), "base64 of its 32 bytes or a PEM PUBLIC KEY block"},
		{"short", []byte(base64.StdEncoding.EncodeToString(pub[:16])), "base64 of 16 bytes"},
		{"ecdsa", pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: ecDER}), "not an Ed25519 public key"},
		{"certificate", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), `PEM "CERTIFICATE" block`},
		{"private", pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), "want a PUBLIC KEY block"},
	} {
		file := writeFile(t, tt.name, string(tt.data))
		_, stderr, code := g.cli(t, admin, "sentry", "key", "set", watchdog, "--public-key", file)
		if code != exitInvalid || !strings.Contains(stderr, tt.want) {
			t.Errorf("key set with a %s file: exit %d, stderr %q; want exit 2 mentioning %q", tt.name, code, stderr, tt.want)
		}
	}
	if _, stderr, code := g.cli(t, admin, "sentry", "key", "set", watchdog); code != exitInvalid || !strings.Contains(stderr, "--public-key") {
		t.Errorf("key set without --public-key: exit %d, %q", code, stderr)
	}
	// An operator may not set keys.
	op, _ := g.json(t, admin, "token", "create", "--role", "operator", "--name", "olive")["token"].(string)
	if _, _, code := g.cli(t, op, "sentry", "key", "set", watchdog, "--public-key", b64); code != exitNo {
		t.Errorf("an operator set a key: exit %d", code)
	}

	out = g.must(t, admin, "sentry", "key", "delete", watchdog)
	if out != "source "+watchdog+": key deleted; its events need no signature\n" {
		t.Errorf("key delete printed %q", out)
	}
	if _, stderr, code := g.cli(t, admin, "sentry", "key", "delete", watchdog); code != exitNo || !strings.Contains(stderr, "has no key") {
		t.Errorf("deleting a missing key: exit %d, %q", code, stderr)
	}
	g.must(t, admin, "sentry", "key", "set", watchdog, "--public-key", b64)
	if out := g.must(t, admin, "sentry", "key", "delete", watchdog, "-o", "json"); out != "{}\n" {
		t.Errorf("key delete -o json printed %q", out)
	}
}

func TestSentryCells(t *testing.T) {
	now := mustTime("2026-12-01T19:00:00Z")
	for _, tt := range []struct {
		in   string
		want time.Time
	}{
		{"2026-11-30T00:00:00Z", mustTime("2026-11-30T00:00:00Z")},
		{"90m", now.Add(-90 * time.Minute)},
		{"7d", now.Add(-7 * 24 * time.Hour)},
	} {
		if got, err := parseSince(tt.in, now); err != nil || !got.Equal(tt.want) {
			t.Errorf("parseSince(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
	for _, bad := range []string{"", "0s", "-1h", "0d", "yesterday", "7days"} {
		if _, err := parseSince(bad, now); exitCode(err) != exitInvalid {
			t.Errorf("parseSince(%q): %v, want a usage error", bad, err)
		}
	}
}
