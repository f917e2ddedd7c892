package gatewayocsf_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/portcullis-dev/portcullis/internal/ocsf"
	"github.com/portcullis-dev/portcullis/internal/ocsf/gatewayocsf"
	"github.com/portcullis-dev/portcullis/internal/ocsf/ocsftest"
	"github.com/portcullis-dev/portcullis/sentry"
	"github.com/portcullis-dev/portcullis/store"
)

var at = time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC)

func encode(t *testing.T, e ocsf.Event) []byte {
	t.Helper()
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

const policyHash = "9e7835665063aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"

// readSentry reads one event as the gateway's intake does.
func readSentry(t *testing.T, doc string) sentry.Event {
	t.Helper()
	ev, err := sentry.ParseCloudEvent([]byte(doc))
	if err != nil {
		t.Fatalf("parse %s: %v", doc, err)
	}
	return ev
}

// Every Sentry mapping validates against the vendored class definitions
// (Detection Finding 2004, Remediation Activity 7001) with the numbers a
// SIEM files it by.
func TestSentryEventsValidate(t *testing.T) {
	quarantine := readSentry(t, `{"specversion": "1.0", "id": "q-1", "source": "sentry://dpu-7", "sequence": 4,
	  "type": "portcullis.sentry.v1.quarantine", "subject": "orders", "time": "2026-11-20T10:00:00Z",
	  "data": {"severity": "critical", "processing": "remediate",
	    "agent": {"id": "agent-9", "name": "billing bot", "delegated_scope": ["orders:read"]},
	    "process": {"pid": 4242, "executable": "/usr/bin/python3", "executable_digest": "sha256:`+strings.Repeat("ab", 32)+`"},
	    "node": {"id": "host-3", "dpu": "bf3-0"},
	    "policy": {"version": 3, "hash": "`+policyHash+`"},
	    "correlation": {"denial_id": "dn_1", "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736", "jsonrpc_id": 7},
	    "finding": {"title": "agent exfiltrating order data", "confidence": 0.98}}}`)
	toolAccess := readSentry(t, `{"specversion": "1.0", "id": "t-1", "source": "sentry://dpu-7", "sequence": 5,
	  "type": "portcullis.sentry.v1.tool_access", "subject": "orders", "time": "2026-11-20T10:00:00Z",
	  "data": {"severity": "high", "tool_call": {"server": "orders-mcp", "tool": "refund", "arguments_digest": "sha256:`+strings.Repeat("cd", 32)+`"}}}`)
	stored := store.SentryEvent{Source: "sentry://dpu-7", ID: "t-1", Type: sentry.ClassToolAccess.Type(), Subject: "orders",
		Time: at, ReceivedAt: at, Severity: "high", PolicyHash: policyHash, TraceID: "4bf92f3577b34da6a3ce929d0e0e4736"}
	action := func(status, reason string, version int64) store.SentryAction {
		return store.SentryAction{ID: 17, Source: "sentry://dpu-7", EventID: "q-1", Sandbox: "orders", Type: sentry.ClassQuarantine.Type(),
			Status: status, Reason: reason, Version: version, ReceivedAt: at, CreatedAt: at.Add(40 * time.Millisecond)}
	}
	decided := action(store.SentryApplied, "budget spent — applied by alice: confirmed", 5)
	when := at.Add(time.Minute)
	decided.DecidedBy, decided.DecidedAt = "alice", &when

	cases := []struct {
		name                           string
		ev                             ocsf.Event
		class, activity, severity, sts int
		disposition                    int
		wantInMessage                  string
	}{
		{"quarantine", gatewayocsf.FromSentryEvent(quarantine, at.Add(time.Second), ocsf.Gateway), 2004, 1, 5, 0, 0, "agent exfiltrating order data (remediate)"},
		{"tool access", gatewayocsf.FromSentryEvent(toolAccess, at, ocsf.Gateway), 2004, 1, 4, 0, 0, "Sentry high tool_access from sentry://dpu-7 about sandbox orders"},
		{"drift", gatewayocsf.FromSentryFinding(store.SentryDrift, stored, "", at.Add(2*time.Second), ocsf.Gateway), 2004, 1, 3, 0, 0, "Policy drift in sandbox orders"},
		{"unmediated", gatewayocsf.FromSentryFinding(store.SentryUnmediated, stored, "refund", at.Add(2*time.Second), ocsf.Gateway), 2004, 1, 4, 0, 0, "refund called, and no proxy decided it"},
		{"frozen", gatewayocsf.FromSentryAction(action(store.SentryFrozen, "frozen at version 4", 4), "sentry:sentry://dpu-7", ocsf.Gateway), 7001, 1, 4, 1, 4, "sandbox orders frozen (version 4)"},
		{"held", gatewayocsf.FromSentryAction(action(store.SentryHeld, "quarantine budget spent", 0), "sentry:sentry://dpu-7", ocsf.Gateway), 7001, 1, 4, 99, 14, "held"},
		{"dry run", gatewayocsf.FromSentryAction(action(store.SentryDryRun, "dry run", 0), "sentry:sentry://dpu-7", ocsf.Gateway), 7001, 1, 3, 99, 17, "dry_run"},
		{"already frozen", gatewayocsf.FromSentryAction(action(store.SentryNoop, `sandbox "orders" is already frozen`, 0), "sentry:sentry://dpu-7", ocsf.Gateway), 7001, 1, 2, 1, 16, "already_frozen"},
		{"failed", gatewayocsf.FromSentryAction(action(store.SentryFailed, "freeze: database is locked", 0), "sentry:sentry://dpu-7", ocsf.Gateway), 7001, 1, 4, 6, 27, "failed"},
		{"no sandbox", gatewayocsf.FromSentryAction(action(store.SentryFailed, `sandbox "orders" not found`, 0), "sentry:sentry://dpu-7", ocsf.Gateway), 7001, 1, 4, 3, 27, "failed"},
		{"applied", gatewayocsf.FromSentryAction(decided, "alice", ocsf.Gateway), 7001, 1, 4, 1, 4, "applied (version 5)"},
		{"dismissed", gatewayocsf.FromSentryAction(action(store.SentryDismissed, "left alone", 0), "alice", ocsf.Gateway), 7001, 1, 2, 99, 16, "dismissed"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := encode(t, c.ev)
			if err := ocsftest.Validate(b); err != nil {
				t.Fatalf("%v\n%s", err, b)
			}
			if c.ev.ClassUID != c.class || c.ev.ActivityID != c.activity || c.ev.SeverityID != c.severity || c.ev.StatusID != c.sts || c.ev.DispositionID != c.disposition {
				t.Errorf("class %d activity %d severity %d status %d disposition %d; want %d %d %d %d %d", c.ev.ClassUID, c.ev.ActivityID,
					c.ev.SeverityID, c.ev.StatusID, c.ev.DispositionID, c.class, c.activity, c.severity, c.sts, c.disposition)
			}
			if !strings.Contains(c.ev.Message, c.wantInMessage) {
				t.Errorf("message %q lacks %q", c.ev.Message, c.wantInMessage)
			}
			if testing.Verbose() {
				t.Logf("%s", b)
			}
		})
	}
}

// The fields a SIEM joins and alerts on: the event's key on the finding
// and on the remediation it caused, the version the freeze committed, the
// watchdog's confidence; digests, never arguments.
func TestSentryMappingFields(t *testing.T) {
	ev := readSentry(t, `{"specversion": "1.0", "id": "q-1", "source": "sentry://dpu-7", "sequence": 4,
	  "type": "portcullis.sentry.v1.boundary_breach", "subject": "orders", "time": "2026-11-20T10:00:00Z",
	  "data": {"severity": "high", "processing": "remediate", "finding": {"title": "breach", "confidence": 0.5},
	    "tool_call": {"server": "s", "tool": "refund", "arguments_digest": "sha256:`+strings.Repeat("ef", 32)+`"}}}`)
	f := gatewayocsf.FromSentryEvent(ev, at, ocsf.Gateway)
	if f.Metadata.UID != "sentry://dpu-7/q-1" || f.FindingInfo.UID != f.Metadata.UID || f.FindingInfo.Types[0] != "boundary_breach" ||
		f.Metadata.Sequence != 4 || f.Metadata.EventCode != "portcullis.sentry.v1.boundary_breach" || f.Metadata.LoggedTime != at.UnixMilli() || f.IsAlert == nil || !*f.IsAlert {
		t.Errorf("finding: metadata %+v info %+v alert %v", f.Metadata, f.FindingInfo, f.IsAlert)
	}
	if f.ConfidenceID != 2 || f.ConfidenceScore == nil || *f.ConfidenceScore != 50 {
		t.Errorf("confidence %d %v, want 2 and 50", f.ConfidenceID, f.ConfidenceScore)
	}
	if len(f.Resources) != 2 || f.Resources[0].Name != "orders" || f.Resources[1].Name != "refund" ||
		f.Resources[1].Data["arguments_digest"] != "sha256:"+strings.Repeat("ef", 32) {
		t.Errorf("resources %+v", f.Resources)
	}
	b, _ := json.Marshal(f)
	if strings.Contains(string(b), `"arguments"`) {
		t.Errorf("the finding names arguments: %s", b)
	}
	r := gatewayocsf.FromSentryAction(store.SentryAction{ID: 9, Source: "sentry://dpu-7", EventID: "q-1", Sandbox: "orders", Type: ev.Type,
		Status: store.SentryFrozen, Reason: "frozen at version 4", Version: 4, ReceivedAt: at, CreatedAt: at}, "sentry:sentry://dpu-7", ocsf.Gateway)
	if r.Metadata.CorrelationUID != f.Metadata.UID || r.CommandUID != "9" || r.Policy == nil || r.Policy.Version != "4" || r.Policy.Name != "orders" ||
		r.Countermeasures[0].Tactic.Name != "Isolate" || r.Remediation.Desc != "frozen at version 4" || r.Unmapped["actor"] != "sentry:sentry://dpu-7" {
		t.Errorf("remediation: %+v policy %+v", r, r.Policy)
	}
}

// The validator holds Remediation Activity to its class: command_uid is
// required, and status_id takes the class's values (3-6) beside the
// dictionary's, nothing else.
func TestValidateRemediation(t *testing.T) {
	good := encode(t, gatewayocsf.FromSentryAction(store.SentryAction{ID: 1, Source: "s", EventID: "e", Sandbox: "orders",
		Status: store.SentryFailed, Reason: `sandbox "orders" not found`, ReceivedAt: at, CreatedAt: at}, "sentry:s", ocsf.Gateway))
	if err := ocsftest.Validate(good); err != nil {
		t.Fatal(err)
	}
	edit := func(f func(m map[string]any)) []byte {
		var m map[string]any
		json.Unmarshal(good, &m)
		f(m)
		b, _ := json.Marshal(m)
		return b
	}
	for name, b := range map[string][]byte{
		"no command_uid":       edit(func(m map[string]any) { delete(m, "command_uid") }),
		"status 7":             edit(func(m map[string]any) { m["status_id"] = 7 }),
		"disposition 42":       edit(func(m map[string]any) { m["disposition_id"] = 42 }),
		"no remediation.desc":  edit(func(m map[string]any) { m["remediation"] = map[string]any{} }),
		"activity 6":           edit(func(m map[string]any) { m["activity_id"] = 6; m["type_uid"] = 700106 }),
		"countermeasure empty": edit(func(m map[string]any) { m["countermeasures"] = []any{map[string]any{}} }),
	} {
		if err := ocsftest.Validate(b); err == nil {
			t.Errorf("%s: validated %s", name, b)
		}
	}
}
