package sentry

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

const (
	testHash   = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
	testDigest = "sha256:" + testHash
)

// sample returns a valid event of class c as a JSON object; tests edit it.
func sample(c Class) map[string]any {
	data := map[string]any{"severity": "high"}
	switch c {
	case ClassIdentityCheck:
		data["agent"] = map[string]any{"id": "agent-7", "name": "coder", "delegated_scope": []any{"repo:read", "mcp:orders"}}
	case ClassToolAccess:
		data["tool_call"] = map[string]any{"server": "orders", "tool": "refund", "arguments_digest": testDigest}
		data["correlation"] = map[string]any{"denial_id": "d-1", "session": "s-1", "jsonrpc_id": 7, "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736"}
	case ClassPolicyDecision:
		data["policy"] = map[string]any{"version": 3, "hash": testHash}
	case ClassBoundaryBreach, ClassQuarantine:
		data["processing"] = "remediate"
		data["finding"] = map[string]any{"title": "exfiltration to an unlisted host", "confidence": 0.97}
		data["process"] = map[string]any{"pid": 4242, "executable": "/usr/bin/curl", "executable_digest": testDigest}
		data["node"] = map[string]any{"id": "node-3", "dpu": "bf4-0"}
	case ClassHeartbeat:
		data["severity"] = "info"
	}
	ev := map[string]any{
		"specversion":     "1.0",
		"id":              "ev-1",
		"source":          "sentry://node-3",
		"type":            c.Type(),
		"time":            "2026-12-01T19:00:00.123Z",
		"subject":         "sandbox-a",
		"sequence":        "1",
		"datacontenttype": "application/json",
		"data":            data,
	}
	if c == ClassHeartbeat {
		delete(ev, "subject")
	}
	return ev
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParseCloudEventClasses(t *testing.T) {
	for _, c := range Classes() {
		t.Run(string(c), func(t *testing.T) {
			ev, err := ParseCloudEvent(mustJSON(t, sample(c)))
			if err != nil {
				t.Fatal(err)
			}
			if ev.Class != c || ev.Sequence != 1 || ev.Flags != 0 || len(ev.Unknown) != 0 {
				t.Fatalf("class %q sequence %d flags %b unknown %v", ev.Class, ev.Sequence, ev.Flags, ev.Unknown)
			}
			if ev.Time.UnixMilli() != 1796151600123 {
				t.Errorf("time %v", ev.Time)
			}
		})
	}
}

func TestParseCloudEventFields(t *testing.T) {
	ev, err := ParseCloudEvent(mustJSON(t, sample(ClassToolAccess)))
	if err != nil {
		t.Fatal(err)
	}
	p := ev.Payload
	if p.Severity != SeverityHigh || p.Processing != ProcessingStoreOnly {
		t.Errorf("severity %q processing %q", p.Severity, p.Processing)
	}
	if *p.ToolCall != (ToolCall{Server: "orders", Tool: "refund", ArgumentsDigest: testDigest}) {
		t.Errorf("tool call %+v", p.ToolCall)
	}
	if *p.Correlation != (Correlation{DenialID: "d-1", Session: "s-1", JSONRPCID: "7", TraceID: "4bf92f3577b34da6a3ce929d0e0e4736"}) {
		t.Errorf("correlation %+v", p.Correlation)
	}
	q, err := ParseCloudEvent(mustJSON(t, sample(ClassQuarantine)))
	if err != nil {
		t.Fatal(err)
	}
	if q.Payload.Processing != ProcessingRemediate || q.Payload.Process.PID != 4242 || q.Payload.Node.DPU != "bf4-0" || *q.Payload.Finding.Confidence != 0.97 {
		t.Errorf("quarantine payload %+v", q.Payload)
	}
	ic, err := ParseCloudEvent(mustJSON(t, sample(ClassIdentityCheck)))
	if err != nil {
		t.Fatal(err)
	}
	if a := ic.Payload.Agent; a.ID != "agent-7" || strings.Join(a.DelegatedScope, ",") != "repo:read,mcp:orders" {
		t.Errorf("agent %+v", a)
	}
	pd, err := ParseCloudEvent(mustJSON(t, sample(ClassPolicyDecision)))
	if err != nil {
		t.Fatal(err)
	}
	if *pd.Payload.Policy != (PolicySeen{Version: 3, Hash: testHash}) {
		t.Errorf("policy %+v", pd.Payload.Policy)
	}
}

// TestUnknownKept: unknown types, payload fields and extensions are kept
// verbatim and flagged, never dropped.
func TestUnknownKept(t *testing.T) {
	ev := sample(ClassToolAccess)
	ev["data"].(map[string]any)["gpu"] = map[string]any{"uuid": "GPU-1"}
	ev["data"].(map[string]any)["tool_call"].(map[string]any)["latency_ms"] = 12
	ev["traceparent"] = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	got, err := ParseCloudEvent(mustJSON(t, ev))
	if err != nil {
		t.Fatal(err)
	}
	if got.Flags != FlagUnknownField|FlagExtension {
		t.Errorf("flags %b", got.Flags)
	}
	if u := strings.Join(got.Unknown, ","); u != "data.gpu,data.tool_call.latency_ms,traceparent" {
		t.Errorf("unknown %s", u)
	}
	if !strings.Contains(string(got.Data), `"gpu":{"uuid":"GPU-1"}`) || string(got.Extensions["traceparent"]) != `"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"` {
		t.Errorf("data %s extensions %v", got.Data, got.Extensions)
	}

	other := sample(ClassHeartbeat)
	other["type"] = "com.example.watchdog.gpu_fault"
	other["data"] = map[string]any{"anything": []any{1, "two"}, "severity": 99}
	got, err = ParseCloudEvent(mustJSON(t, other))
	if err != nil {
		t.Fatal(err)
	}
	if got.Class != "" || got.Flags != FlagUnknownType || got.Unknown[0] != "type" || string(got.Data) != `{"anything":[1,"two"],"severity":99}` {
		t.Errorf("unknown type: class %q flags %b unknown %v data %s", got.Class, got.Flags, got.Unknown, got.Data)
	}
}

// refusal is one invalid event: edit breaks sample(class); field is the
// path the refusal must name. schema says whether the JSON Schema can say
// it too (sizes, duplicate keys and UTF-8 it cannot).
type refusal struct {
	name   string
	class  Class
	edit   func(ev, data map[string]any)
	field  string
	reason string
}

func refusals() []refusal {
	long := strings.Repeat("x", 257)
	return []refusal{
		{"no specversion", ClassHeartbeat, func(ev, _ map[string]any) { delete(ev, "specversion") }, "specversion", "is required"},
		{"specversion 0.3", ClassHeartbeat, func(ev, _ map[string]any) { ev["specversion"] = "0.3" }, "specversion", `"1.0"`},
		{"no id", ClassHeartbeat, func(ev, _ map[string]any) { delete(ev, "id") }, "id", "is required"},
		{"empty id", ClassHeartbeat, func(ev, _ map[string]any) { ev["id"] = "" }, "id", "1-256"},
		{"long id", ClassHeartbeat, func(ev, _ map[string]any) { ev["id"] = long }, "id", "1-256"},
		{"id with newline", ClassHeartbeat, func(ev, _ map[string]any) { ev["id"] = "a\nb" }, "id", "control"},
		{"numeric id", ClassHeartbeat, func(ev, _ map[string]any) { ev["id"] = 7 }, "id", "string"},
		{"no source", ClassHeartbeat, func(ev, _ map[string]any) { delete(ev, "source") }, "source", "is required"},
		{"no type", ClassHeartbeat, func(ev, _ map[string]any) { delete(ev, "type") }, "type", "is required"},
		{"empty time", ClassHeartbeat, func(ev, _ map[string]any) { ev["time"] = "" }, "time", "1-64 bytes"},
		{"leap second not at a minute's end", ClassHeartbeat, func(ev, _ map[string]any) { ev["time"] = "2016-12-31T23:58:60Z" }, "time", "RFC 3339"},
		{"leap second not at a UTC day's end", ClassHeartbeat, func(ev, _ map[string]any) { ev["time"] = "2016-12-31T05:59:60Z" }, "time", "RFC 3339"},
		{"leap second not at a UTC day's end, in an offset", ClassHeartbeat, func(ev, _ map[string]any) { ev["time"] = "2016-12-31T23:59:60+01:00" }, "time", "RFC 3339"},
		{"time without offset", ClassHeartbeat, func(ev, _ map[string]any) { ev["time"] = "2016-12-31T23:58:00" }, "time", "RFC 3339"},
		{"extension object", ClassHeartbeat, func(ev, _ map[string]any) { ev["traceparent"] = map[string]any{"a": 1} }, "traceparent", "not an object"},
		{"extension array", ClassHeartbeat, func(ev, _ map[string]any) { ev["myext"] = []any{"a"} }, "myext", "not an array"},
		{"extension null", ClassHeartbeat, func(ev, _ map[string]any) { ev["myext"] = nil }, "myext", "not null"},
		{"extension fraction", ClassHeartbeat, func(ev, _ map[string]any) { ev["myext"] = 1.5 }, "myext", "integer"},
		{"extension beyond 32 bits", ClassHeartbeat, func(ev, _ map[string]any) { ev["myext"] = 1 << 31 }, "myext", "integer"},
		{"datacontenttype latin-1", ClassHeartbeat, func(ev, _ map[string]any) { ev["datacontenttype"] = "application/json; charset=iso-8859-1" }, "datacontenttype", "JSON media type"},
		{"datacontenttype text", ClassHeartbeat, func(ev, _ map[string]any) { ev["datacontenttype"] = "text/plain" }, "datacontenttype", "JSON media type"},
		{"bad time", ClassHeartbeat, func(ev, _ map[string]any) { ev["time"] = "yesterday" }, "time", "RFC 3339"},
		{"no subject", ClassQuarantine, func(ev, _ map[string]any) { delete(ev, "subject") }, "subject", "is required"},
		{"no sequence", ClassHeartbeat, func(ev, _ map[string]any) { delete(ev, "sequence") }, "sequence", "is required"},
		{"sequence 0", ClassHeartbeat, func(ev, _ map[string]any) { ev["sequence"] = 0 }, "sequence", "integer"},
		{"sequence leading zero", ClassHeartbeat, func(ev, _ map[string]any) { ev["sequence"] = "01" }, "sequence", "integer"},
		{"sequence fraction", ClassHeartbeat, func(ev, _ map[string]any) { ev["sequence"] = 1.5 }, "sequence", "integer"},
		{"sequence too big", ClassHeartbeat, func(ev, _ map[string]any) { ev["sequence"] = "1000000000000000000" }, "sequence", "integer"},
		{"datacontenttype xml", ClassHeartbeat, func(ev, _ map[string]any) { ev["datacontenttype"] = "text/xml" }, "datacontenttype", "JSON media type"},
		{"data_base64", ClassHeartbeat, func(ev, _ map[string]any) { ev["data_base64"] = "AAAA" }, "data_base64", "binary"},
		{"no data", ClassHeartbeat, func(ev, _ map[string]any) { delete(ev, "data") }, "data", "is required"},
		{"data not an object", ClassHeartbeat, func(ev, _ map[string]any) { ev["data"] = "hello" }, "data", "object"},
		{"short signature", ClassHeartbeat, func(ev, _ map[string]any) { ev["signature"] = "AAAA" }, "signature", "64-byte"},
		{"bad extension name", ClassHeartbeat, func(ev, _ map[string]any) { ev["Trace-Parent"] = "x" }, "Trace-Parent", "lower-case"},
		{"no severity", ClassHeartbeat, func(_, d map[string]any) { delete(d, "severity") }, "data.severity", "is required"},
		{"bad severity", ClassHeartbeat, func(_, d map[string]any) { d["severity"] = "urgent" }, "data.severity", "one of"},
		{"bad processing", ClassQuarantine, func(_, d map[string]any) { d["processing"] = "execute" }, "data.processing", "one of"},
		{"remediate a heartbeat", ClassHeartbeat, func(_, d map[string]any) { d["processing"] = "remediate" }, "data.processing", "only for quarantine"},
		{"remediate a tool access", ClassToolAccess, func(_, d map[string]any) { d["processing"] = "remediate" }, "data.processing", "only for quarantine"},
		{"identity check without agent", ClassIdentityCheck, func(_, d map[string]any) { delete(d, "agent") }, "data.agent", "required for identity_check"},
		{"agent without id", ClassIdentityCheck, func(_, d map[string]any) { delete(d["agent"].(map[string]any), "id") }, "data.agent.id", "is required"},
		{"scope not strings", ClassIdentityCheck, func(_, d map[string]any) { d["agent"].(map[string]any)["delegated_scope"] = []any{"a", 2} }, "data.agent.delegated_scope[1]", "string"},
		{"tool access without tool call", ClassToolAccess, func(_, d map[string]any) { delete(d, "tool_call") }, "data.tool_call", "required for tool_access"},
		{"raw tool arguments", ClassToolAccess, func(_, d map[string]any) {
			d["tool_call"].(map[string]any)["arguments"] = map[string]any{"amount": 100}
		}, "data.tool_call.arguments", "raw tool arguments are refused"},
		{"tool call without tool", ClassToolAccess, func(_, d map[string]any) { delete(d["tool_call"].(map[string]any), "tool") }, "data.tool_call.tool", "is required"},
		{"bad arguments digest", ClassToolAccess, func(_, d map[string]any) { d["tool_call"].(map[string]any)["arguments_digest"] = "md5:abc" }, "data.tool_call.arguments_digest", "sha256:"},
		{"zero trace id", ClassToolAccess, func(_, d map[string]any) {
			d["correlation"].(map[string]any)["trace_id"] = strings.Repeat("0", 32)
		}, "data.correlation.trace_id", "all zero"},
		{"upper-case trace id", ClassToolAccess, func(_, d map[string]any) {
			d["correlation"].(map[string]any)["trace_id"] = "4BF92F3577B34DA6A3CE929D0E0E4736"
		}, "data.correlation.trace_id", "32 lower-case"},
		{"jsonrpc id object", ClassToolAccess, func(_, d map[string]any) { d["correlation"].(map[string]any)["jsonrpc_id"] = map[string]any{} }, "data.correlation.jsonrpc_id", "string or an integer"},
		{"policy decision without policy", ClassPolicyDecision, func(_, d map[string]any) { delete(d, "policy") }, "data.policy", "required for policy_decision"},
		{"short policy hash", ClassPolicyDecision, func(_, d map[string]any) { d["policy"].(map[string]any)["hash"] = "abc" }, "data.policy.hash", "64 lower-case"},
		{"policy version 0", ClassPolicyDecision, func(_, d map[string]any) { d["policy"].(map[string]any)["version"] = 0 }, "data.policy.version", "integer from 1"},
		{"quarantine without finding", ClassQuarantine, func(_, d map[string]any) { delete(d, "finding") }, "data.finding", "required for quarantine"},
		{"breach without finding", ClassBoundaryBreach, func(_, d map[string]any) { delete(d, "finding") }, "data.finding", "required for boundary_breach"},
		{"finding without title", ClassQuarantine, func(_, d map[string]any) { delete(d["finding"].(map[string]any), "title") }, "data.finding.title", "is required"},
		{"confidence above 1", ClassQuarantine, func(_, d map[string]any) { d["finding"].(map[string]any)["confidence"] = 1.5 }, "data.finding.confidence", "0 to 1"},
		{"pid 0", ClassQuarantine, func(_, d map[string]any) { d["process"].(map[string]any)["pid"] = 0 }, "data.process.pid", "integer from 1"},
		{"pid string", ClassQuarantine, func(_, d map[string]any) { d["process"].(map[string]any)["pid"] = "4242" }, "data.process.pid", "integer from 1"},
		{"bad executable digest", ClassQuarantine, func(_, d map[string]any) { d["process"].(map[string]any)["executable_digest"] = testHash }, "data.process.executable_digest", "sha256:"},
		{"node not an object", ClassQuarantine, func(_, d map[string]any) { d["node"] = "node-3" }, "data.node", "object"},
	}
}

func (tc refusal) body(t testing.TB) []byte {
	ev := sample(tc.class)
	data, _ := ev["data"].(map[string]any)
	tc.edit(ev, data)
	return mustJSON(t, ev)
}

func TestRefusals(t *testing.T) {
	for _, tc := range refusals() {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseCloudEvent(tc.body(t))
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("err = %v, want a *FieldError", err)
			}
			if fe.Field != tc.field || !strings.Contains(fe.Reason, tc.reason) {
				t.Fatalf("refused %q: %q, want %q: …%s…", fe.Field, fe.Reason, tc.field, tc.reason)
			}
		})
	}
}

// TestRefusalsRaw covers what only the raw bytes can show.
func TestRefusalsRaw(t *testing.T) {
	valid := string(mustJSON(t, sample(ClassHeartbeat)))
	deep := strings.Repeat(`{"a":`, 40) + "1" + strings.Repeat("}", 40)
	for _, tc := range []struct {
		name, body, field, reason string
	}{
		{"duplicate envelope key", strings.Replace(valid, `"id":"ev-1"`, `"id":"ev-1","id":"ev-2"`, 1), "id", "duplicate key"},
		{"duplicate payload key", strings.Replace(valid, `"severity":"info"`, `"severity":"info","severity":"high"`, 1), "data.severity", "duplicate key"},
		{"invalid UTF-8", strings.Replace(valid, `"sentry://node-3"`, "\"sentry://node\xff3\"", 1), "source", "invalid UTF-8"},
		{"invalid UTF-8 in data", strings.Replace(valid, `"info"`, "\"in\xc3fo\"", 1), "data.severity", "invalid UTF-8"},
		{"lone surrogate", strings.Replace(valid, `"ev-1"`, `"ev-\ud800"`, 1), "id", "lone UTF-16 surrogate"},
		{"too deep", strings.Replace(valid, `"severity":"info"`, `"severity":"info","x":`+deep, 1), "data.x" + strings.Repeat(".a", 31), "nested deeper"},
		{"number beyond a double", strings.Replace(valid, `"severity":"info"`, `"severity":"info","big":1e400`, 1), "data.big", "range of a double"},
		{"trailing data", valid + " {}", "", "trailing data"},
		{"not an object", `[1]`, "", "JSON object"},
		{"too large", strings.Replace(valid, `"info"`, `"info","pad":"`+strings.Repeat("x", MaxEventBytes)+`"`, 1), "", "larger than 65536"},
		{"truncated", valid[:len(valid)-1], "", "invalid JSON"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseCloudEvent([]byte(tc.body))
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("err = %v, want a *FieldError", err)
			}
			if fe.Field != tc.field || !strings.Contains(fe.Reason, tc.reason) {
				t.Fatalf("refused %q: %q, want %q: …%s…", fe.Field, fe.Reason, tc.field, tc.reason)
			}
		})
	}
	// A surrogate pair is a valid escape.
	if _, err := ParseCloudEvent([]byte(strings.Replace(valid, `"ev-1"`, `"ev-\ud83d\ude00"`, 1))); err != nil {
		t.Fatalf("surrogate pair: %v", err)
	}
}

func TestParseBatch(t *testing.T) {
	var events []any
	for i, c := range Classes() {
		ev := sample(c)
		ev["id"] = fmt.Sprintf("ev-%d", i)
		ev["sequence"] = i + 1
		events = append(events, ev)
	}
	bad := sample(ClassToolAccess)
	bad["id"] = "ev-raw"
	bad["data"].(map[string]any)["tool_call"].(map[string]any)["arguments"] = "rm -rf /"
	events = append(events[:2], append([]any{bad, "not an event"}, events[2:]...)...)

	b, err := ParseBatch(mustJSON(t, events))
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Events) != len(Classes()) {
		t.Fatalf("%d valid events, want %d", len(b.Events), len(Classes()))
	}
	for i, ev := range b.Events {
		if ev.Sequence != uint64(i+1) {
			t.Errorf("event %d has sequence %d: batch order lost", i, ev.Sequence)
		}
	}
	want := []string{
		"event 2: data.tool_call.arguments: raw tool arguments are refused; send arguments_digest",
		"event 3: an event must be a JSON object",
	}
	if len(b.Refused) != 2 || b.Refused[0].Error() != want[0] || b.Refused[1].Error() != want[1] || b.Refused[0].ID != "ev-raw" || b.Refused[1].ID != "" {
		t.Fatalf("refused %+v, want %q", b.Refused, want)
	}
}

func TestParseBatchWhole(t *testing.T) {
	one := string(mustJSON(t, sample(ClassHeartbeat)))
	for name, body := range map[string]string{
		"object":     one,
		"empty":      "",
		"truncated":  "[" + one,
		"too many":   "[" + strings.Repeat(one+",", MaxBatchEvents) + one + "]",
		"too large":  "[" + strings.Repeat(" ", MaxBatchBytes) + "]",
		"not json":   "[nope]",
		"whitespace": "   ",
	} {
		if _, err := ParseBatch([]byte(body)); !errors.Is(err, ErrBatch) {
			t.Errorf("%s: err = %v, want ErrBatch", name, err)
		}
	}
	full := "[" + strings.Repeat(one+",", MaxBatchEvents-1) + one + "]"
	if b, err := ParseBatch([]byte(full)); err != nil || len(b.Events) != MaxBatchEvents {
		t.Fatalf("a full batch: %d events, %v", len(b.Events), err)
	}
	if b, err := ParseBatch([]byte("[]")); err != nil || len(b.Events)+len(b.Refused) != 0 {
		t.Fatalf("an empty batch: %+v, %v", b, err)
	}
}

// TestManyKeys: a duplicate among many keys is still found (the lexer
// moves from a list to a map past 32 keys).
func TestManyKeys(t *testing.T) {
	var sb strings.Builder
	for i := range 100 {
		fmt.Fprintf(&sb, `,"k%d":%d`, i, i)
	}
	valid := string(mustJSON(t, sample(ClassHeartbeat)))
	many := strings.Replace(valid, `"severity":"info"`, `"severity":"info"`+sb.String(), 1)
	ev, err := ParseCloudEvent([]byte(many))
	if err != nil || len(ev.Unknown) != 100 {
		t.Fatalf("100 unknown keys: %v, unknown %d", err, len(ev.Unknown))
	}
	for _, dup := range []string{`,"k3":0`, `,"k77":0`, `,"severity":"low"`} {
		_, err := ParseCloudEvent([]byte(strings.Replace(many, `"k99":99`, `"k99":99`+dup, 1)))
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Reason != "duplicate key" {
			t.Errorf("%s: %v", dup, err)
		}
	}
}

// TestParseBatchPaths: a batch the one-pass reader gives up on (an event
// the strict lexer refuses) is read event by event, with the same result
// for the other events.
func TestParseBatchPaths(t *testing.T) {
	var events []string
	for i, c := range Classes() {
		ev := sample(c)
		ev["id"] = fmt.Sprintf("ev-%d", i)
		ev["sequence"] = i + 1
		events = append(events, string(mustJSON(t, ev)))
	}
	clean := []byte("[" + strings.Join(events, ",") + "]")
	dup := strings.Replace(events[1], `"severity":`, `"severity":"low","severity":`, 1)
	slow := []byte("[" + strings.Join(append([]string{events[0], dup}, events[2:]...), " ,\n") + "]")

	fast, err := ParseBatch(clean)
	if err != nil || len(fast.Events) != len(events) || len(fast.Refused) != 0 {
		t.Fatalf("clean batch: %d events, %v, %v", len(fast.Events), fast.Refused, err)
	}
	read, err := ParseBatch(slow)
	if err != nil || len(read.Refused) != 1 || read.Refused[0].Index != 1 || read.Refused[0].Err.Reason != "duplicate key" {
		t.Fatalf("batch with a duplicate key: %+v, %v", read.Refused, err)
	}
	want := slices.Delete(slices.Clone(fast.Events), 1, 2)
	for i, ev := range read.Events {
		w := want[i]
		if ev.ID != w.ID || ev.Sequence != w.Sequence || ev.Class != w.Class || !reflect.DeepEqual(ev.Payload, w.Payload) || !bytes.Equal(ev.Raw, w.Raw) {
			t.Errorf("event %s read event by event differs from the one-pass read:\n%+v\n%+v", w.ID, ev, w)
		}
	}
}

// TestEnvelopeAccepted: what CloudEvents allows of the envelope is
// accepted: no time (defaulted later, and flagged), RFC 3339's lower-case
// "t" and "z" and leap second, extension values of the CloudEvents types,
// and every JSON media type.
func TestEnvelopeAccepted(t *testing.T) {
	for _, tc := range []struct {
		name  string
		edit  func(ev map[string]any)
		check func(t *testing.T, ev Event)
	}{
		{"no time", func(ev map[string]any) { delete(ev, "time") }, func(t *testing.T, ev Event) {
			if !ev.Time.IsZero() || ev.Flags&FlagTimeDefaulted == 0 {
				t.Errorf("time %v flags %b", ev.Time, ev.Flags)
			}
		}},
		{"lower-case t and z", func(ev map[string]any) { ev["time"] = "2026-12-01t19:00:00.5z" }, func(t *testing.T, ev Event) {
			if want := time.Date(2026, 12, 1, 19, 0, 0, 5e8, time.UTC); !ev.Time.Equal(want) || ev.Flags != 0 {
				t.Errorf("time %v flags %b", ev.Time, ev.Flags)
			}
		}},
		{"leap second", func(ev map[string]any) { ev["time"] = "2016-12-31T23:59:60Z" }, func(t *testing.T, ev Event) {
			if want := time.Date(2017, 1, 1, 0, 0, 0, 0, time.UTC); !ev.Time.Equal(want) {
				t.Errorf("time %v", ev.Time)
			}
		}},
		{"leap second in an offset", func(ev map[string]any) { ev["time"] = "1990-12-31T15:59:60-08:00" }, func(t *testing.T, ev Event) {
			if want := time.Date(1991, 1, 1, 0, 0, 0, 0, time.UTC); !ev.Time.Equal(want) {
				t.Errorf("time %v", ev.Time)
			}
		}},
		{"leap second in a half-hour offset", func(ev map[string]any) { ev["time"] = "2017-01-01T05:29:60+05:30" }, func(t *testing.T, ev Event) {
			if want := time.Date(2017, 1, 1, 0, 0, 0, 0, time.UTC); !ev.Time.Equal(want) {
				t.Errorf("time %v", ev.Time)
			}
		}},
		{"extensions of every type", func(ev map[string]any) {
			ev["str"], ev["num"], ev["neg"], ev["flag"], ev["numstr"] = "x", 2147483647, -2147483648, true, "42"
		}, func(t *testing.T, ev Event) {
			if len(ev.Extensions) != 5 || ev.Flags&FlagExtension == 0 {
				t.Errorf("extensions %v flags %b", ev.Extensions, ev.Flags)
			}
		}},
		{"json with charset", func(ev map[string]any) { ev["datacontenttype"] = "application/json; charset=utf-8" }, nil},
		{"json with upper-case charset", func(ev map[string]any) { ev["datacontenttype"] = "Application/JSON;charset=UTF-8" }, nil},
		{"+json type", func(ev map[string]any) { ev["datacontenttype"] = "application/vnd.portcullis.event+json" }, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ev := sample(ClassHeartbeat)
			tc.edit(ev)
			got, err := ParseCloudEvent(mustJSON(t, ev))
			if err != nil {
				t.Fatal(err)
			}
			if tc.check != nil {
				tc.check(t, got)
			}
			// The batch reader says the same.
			b, err := ParseBatch(mustJSON(t, []any{ev}))
			if err != nil || len(b.Events) != 1 {
				t.Fatalf("in a batch: %+v, %v", b, err)
			}
		})
	}
}
