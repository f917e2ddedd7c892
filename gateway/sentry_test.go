package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect/v2"
	"connectrpc.com/connect/v2/connecthttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/portcullis-dev/portcullis/decision"
	"github.com/portcullis-dev/portcullis/gateway"
	"github.com/portcullis-dev/portcullis/gateway/gatewaytest"
	"github.com/portcullis-dev/portcullis/gateway/notify"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
	"github.com/portcullis-dev/portcullis/proto/portcullis/v1/portcullisv1connect"
	"github.com/portcullis-dev/portcullis/sentry"
	"github.com/portcullis-dev/portcullis/store"
)

// watchdogSource is the source of the test's sentry token.
const watchdogSource = "sentry://node-3"

type sentryEnv struct {
	gw     *gatewaytest.Gateway
	admin  api
	sentry portcullisv1connect.SentryServiceClient // as the admin
	token  string                                  // the watchdog's sentry token
}

func startSentry(t *testing.T, engine string, configure ...func(*gateway.Config)) *sentryEnv {
	t.Helper()
	gw := gatewaytest.Start(t, engine, configure...)
	e := &sentryEnv{gw: gw, admin: newConnectAPI(t, gw.URL, gatewaytest.AdminToken)}
	c := connect.NewClient(connecthttp.NewTransport(http.DefaultClient, gw.URL), gatewaytest.Bearer(gatewaytest.AdminToken))
	e.sentry = portcullisv1connect.NewSentryServiceClient(c)
	tok, err := e.admin.token.CreateToken(t.Context(), &portcullisv1.CreateTokenRequest{Name: watchdogSource, Role: "sentry"})
	if err != nil {
		t.Fatal(err)
	}
	e.token = tok.GetToken()
	return e
}

// sandboxWithPolicy creates a sandbox with a policy (freezing needs one).
func (e *sentryEnv) sandboxWithPolicy(t *testing.T, name string) {
	t.Helper()
	if _, err := e.admin.sandbox.CreateSandbox(t.Context(), &portcullisv1.CreateSandboxRequest{Name: name, Policy: pushPolicy}); err != nil {
		t.Fatalf("create sandbox %s: %v", name, err)
	}
}

// ce is one CloudEvent in its JSON form.
type ce map[string]any

func toolAccess(source, id string, seq uint64, subject string) ce {
	return ce{
		"specversion": "1.0", "id": id, "source": source, "sequence": seq,
		"type": "portcullis.sentry.v1.tool_access", "subject": subject, "time": "2026-12-01T19:00:00Z",
		"data": map[string]any{"severity": "low", "tool_call": map[string]any{"server": "orders", "tool": "refund"}},
	}
}

func quarantine(source, id string, seq uint64, subject string) ce {
	return ce{
		"specversion": "1.0", "id": id, "source": source, "sequence": seq,
		"type": "portcullis.sentry.v1.quarantine", "subject": subject, "time": time.Now().UTC().Format(time.RFC3339Nano), // fresh: --sentry-max-age
		"data": map[string]any{"severity": "critical", "processing": "remediate", "finding": map[string]any{"title": "exfiltration", "confidence": 0.97}},
	}
}

// answer is the HTTP intake's answer.
type answer struct {
	Stored        int         `json:"stored"`
	Duplicates    int         `json:"duplicates"`
	AckedSequence uint64      `json:"acked_sequence"`
	Gaps          [][2]uint64 `json:"gaps"`
	Refused       []struct {
		Index  int    `json:"index"`
		ID     string `json:"id"`
		Reason string `json:"reason"`
	} `json:"refused"`
	Error string `json:"error"`
}

// post sends body to the HTTP intake with token and media type.
func (e *sentryEnv) post(t *testing.T, token, media string, body []byte) (int, answer) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, e.gw.URL+gateway.SentryEventsPath, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", media)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
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

func (e *sentryEnv) postBatch(t *testing.T, events ...ce) answer {
	t.Helper()
	body, err := json.Marshal(events)
	if err != nil {
		t.Fatal(err)
	}
	code, a := e.post(t, e.token, "application/cloudevents-batch+json", body)
	if code != http.StatusOK {
		t.Fatalf("batch: %d %+v", code, a)
	}
	return a
}

func (e *sentryEnv) events(t *testing.T, source string) []*portcullisv1.StoredSentryEvent {
	t.Helper()
	res, err := e.sentry.ListEvents(t.Context(), &portcullisv1.ListSentryEventsRequest{Source: source, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	return res.GetEvents()
}

func (e *sentryEnv) actions(t *testing.T, sandbox string) []*portcullisv1.SentryAction {
	t.Helper()
	res, err := e.sentry.ListActions(t.Context(), &portcullisv1.ListSentryActionsRequest{Sandbox: sandbox})
	if err != nil {
		t.Fatal(err)
	}
	return res.GetActions()
}

func (e *sentryEnv) auditActions(t *testing.T, action string) []*portcullisv1.AuditEntry {
	t.Helper()
	c := connect.NewClient(connecthttp.NewTransport(http.DefaultClient, e.gw.URL), gatewaytest.Bearer(gatewaytest.AdminToken))
	res, err := portcullisv1connect.NewAuditServiceClient(c).ListAudit(t.Context(), &portcullisv1.ListAuditRequest{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var out []*portcullisv1.AuditEntry
	for _, a := range res.GetEntries() {
		if a.GetAction() == action {
			out = append(out, a)
		}
	}
	return out
}

// TestSentryIntakeIdempotentAndOrdered: the same batch sent three times is
// stored once; a gap is reported and closes when the missing events come.
func TestSentryIntakeIdempotentAndOrdered(t *testing.T) {
	for _, engine := range gatewaytest.Engines {
		t.Run(engine, func(t *testing.T) {
			e := startSentry(t, engine)
			var batch []ce
			for i := uint64(1); i <= 5; i++ {
				batch = append(batch, toolAccess(watchdogSource, fmt.Sprintf("e%d", i), i, "support"))
			}
			for try := range 3 {
				a := e.postBatch(t, batch...)
				wantStored, wantDups := 5, 0
				if try > 0 {
					wantStored, wantDups = 0, 5
				}
				if a.Stored != wantStored || a.Duplicates != wantDups || a.AckedSequence != 5 || len(a.Gaps) != 0 || len(a.Refused) != 0 {
					t.Fatalf("send %d: %+v, want stored %d duplicates %d acked 5 and no gaps", try+1, a, wantStored, wantDups)
				}
			}
			if n := len(e.events(t, watchdogSource)); n != 5 {
				t.Fatalf("%d events stored, want 5", n)
			}
			// 8 before 6 and 7: a gap, reported here, by ListGaps, and
			// closed when they arrive (out of order).
			a := e.postBatch(t, toolAccess(watchdogSource, "e8", 8, "support"))
			if a.Stored != 1 || a.AckedSequence != 5 || !slices.Equal(a.Gaps, [][2]uint64{{6, 7}}) {
				t.Fatalf("after 8: %+v, want acked 5 and gap [6,7]", a)
			}
			gaps, err := e.sentry.ListGaps(t.Context(), &portcullisv1.ListSentryGapsRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if s := gaps.GetSources(); len(s) != 1 || s[0].GetSource() != watchdogSource || len(s[0].GetGaps()) != 1 || s[0].GetGaps()[0].GetFrom() != 6 || s[0].GetGaps()[0].GetTo() != 7 {
				t.Fatalf("ListGaps = %v, want one source with gap 6-7", s)
			}
			a = e.postBatch(t, toolAccess(watchdogSource, "e7", 7, "support"), toolAccess(watchdogSource, "e6", 6, "support"))
			if a.Stored != 2 || a.AckedSequence != 8 || len(a.Gaps) != 0 {
				t.Fatalf("after 7 and 6: %+v, want acked 8 and no gaps", a)
			}
			// One event in the single-event media type.
			body, _ := json.Marshal(toolAccess(watchdogSource, "e9", 9, "support"))
			code, one := e.post(t, e.token, "application/cloudevents+json; charset=utf-8", body)
			if code != http.StatusOK || one.Stored != 1 || one.AckedSequence != 9 {
				t.Fatalf("single event: %d %+v", code, one)
			}
		})
	}
}

// TestSentryRefusals: per-event reasons, the valid events of a batch
// stored, nothing of a refused one; the intake's transport checks.
func TestSentryRefusals(t *testing.T) {
	e := startSentry(t, "sqlite")
	raw := toolAccess(watchdogSource, "raw-args", 2, "support")
	raw["data"].(map[string]any)["tool_call"].(map[string]any)["arguments"] = map[string]any{"amount": 100}
	other := toolAccess("sentry://someone-else", "spoof", 3, "support")
	a := e.postBatch(t, toolAccess(watchdogSource, "ok", 1, "support"), raw, other, ce{"id": "junk"})
	if a.Stored != 1 || len(a.Refused) != 3 {
		t.Fatalf("mixed batch: %+v, want 1 stored and 3 refused", a)
	}
	want := []struct {
		index          int
		id, substrings string
	}{
		{1, "raw-args", "data.tool_call.arguments"},
		{2, "spoof", `source: a sentry token of source "sentry://node-3" may not send events of source "sentry://someone-else"`},
		{3, "junk", "specversion"},
	}
	for i, w := range want {
		r := a.Refused[i]
		if r.Index != w.index || r.ID != w.id || !strings.Contains(r.Reason, w.substrings) {
			t.Errorf("refusal %d = %+v, want index %d id %s mentioning %q", i, r, w.index, w.id, w.substrings)
		}
	}
	ev := e.events(t, "")
	if len(ev) != 1 || ev[0].GetId() != "ok" {
		t.Fatalf("stored %v, want only event ok", ev)
	}
	// The wrong source is a security refusal: audited.
	if got := e.auditActions(t, store.ActionSentryRefused); len(got) != 1 || !strings.Contains(got[0].GetDetail()["event_0"], "spoof") {
		t.Fatalf("audit of refusals = %v, want one entry naming spoof", got)
	}

	// A single refused event is a 400 with its reason.
	body, _ := json.Marshal(raw)
	if code, one := e.post(t, e.token, "application/cloudevents+json", body); code != http.StatusBadRequest || !strings.Contains(one.Error, "arguments") {
		t.Fatalf("single refused event: %d %+v", code, one)
	}
	// Transport refusals: media type, token, role, unreadable batch.
	good, _ := json.Marshal([]ce{toolAccess(watchdogSource, "x", 9, "support")})
	for _, c := range []struct {
		name, token, media string
		body               []byte
		code               int
	}{
		{"wrong media type", e.token, "application/json", good, http.StatusUnsupportedMediaType},
		{"no token", "", "application/cloudevents-batch+json", good, http.StatusUnauthorized},
		{"admin token", gatewaytest.AdminToken, "application/cloudevents-batch+json", good, http.StatusForbidden},
		{"not an array", e.token, "application/cloudevents-batch+json", []byte(`{"id":"x"}`), http.StatusBadRequest},
	} {
		if code, _ := e.post(t, c.token, c.media, c.body); code != c.code {
			t.Errorf("%s: %d, want %d", c.name, code, c.code)
		}
	}
	if ev := e.events(t, ""); len(ev) != 1 {
		t.Fatalf("after the refused requests %d events are stored, want 1", len(ev))
	}
}

// TestSentryTokenReadsNothing: a sentry token cannot read a policy, list
// proposals or events, or send another source's events over the RPC.
func TestSentryTokenReadsNothing(t *testing.T) {
	e := startSentry(t, "sqlite")
	e.sandboxWithPolicy(t, "support")
	c := connect.NewClient(connecthttp.NewTransport(http.DefaultClient, e.gw.URL), gatewaytest.Bearer(e.token))
	if _, err := portcullisv1connect.NewPolicyServiceClient(c).GetPolicy(t.Context(), &portcullisv1.GetPolicyRequest{Sandbox: "support"}); connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Errorf("GetPolicy as sentry: %v, want PermissionDenied", err)
	}
	if _, err := portcullisv1connect.NewApprovalServiceClient(c).ListProposals(t.Context(), &portcullisv1.ApprovalServiceListProposalsRequest{}); connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Errorf("ListProposals as sentry: %v, want PermissionDenied", err)
	}
	sc := portcullisv1connect.NewSentryServiceClient(c)
	if _, err := sc.ListEvents(t.Context(), &portcullisv1.ListSentryEventsRequest{}); connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Errorf("ListEvents as sentry: %v, want PermissionDenied", err)
	}
	res, err := sc.PublishEvents(t.Context(), &portcullisv1.PublishEventsRequest{Events: []*portcullisv1.SentryEvent{
		protoEvent(t, quarantine("sentry://someone-else", "q1", 1, "support")),
	}})
	if err != nil {
		t.Fatal(err)
	}
	if res.GetStored() != 0 || len(res.GetRefused()) != 1 || !strings.HasPrefix(res.GetRefused()[0].GetReason(), "source:") {
		t.Fatalf("another source's quarantine: %v, want refused by source", res)
	}
	if sb := getSandbox(t, e.admin, "support"); sb.GetFrozen() {
		t.Fatal("another source's quarantine froze the sandbox")
	}
}

// protoEvent is the SentryEvent message of a CloudEvent.
func protoEvent(t *testing.T, c ce) *portcullisv1.SentryEvent {
	t.Helper()
	data, err := structpb.NewStruct(c["data"].(map[string]any))
	if err != nil {
		t.Fatal(err)
	}
	when, _ := time.Parse(time.RFC3339, c["time"].(string))
	out := &portcullisv1.SentryEvent{
		Specversion: "1.0", Id: c["id"].(string), Source: c["source"].(string), Type: c["type"].(string),
		Subject: c["subject"].(string), Sequence: c["sequence"].(uint64), Time: timestamppb.New(when), Data: data,
	}
	if sig, ok := c["signature"].(string); ok {
		out.Signature, _ = base64.StdEncoding.DecodeString(sig)
	}
	return out
}

func getSandbox(t *testing.T, c api, name string) *portcullisv1.Sandbox {
	t.Helper()
	sb, err := c.sandbox.GetSandbox(t.Context(), &portcullisv1.GetSandboxRequest{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	return sb
}

// sign signs a CloudEvent with key as the sentry package defines it.
func sign(t *testing.T, key ed25519.PrivateKey, c ce) ce {
	t.Helper()
	body, _ := json.Marshal(c)
	ev, err := sentry.ParseCloudEvent(body)
	if err != nil {
		t.Fatal(err)
	}
	sig, err := sentry.Sign(key, ev)
	if err != nil {
		t.Fatal(err)
	}
	c["signature"] = base64.StdEncoding.EncodeToString(sig)
	return c
}

// TestSentryQuarantine: a signed quarantine freezes its sandbox at once,
// names itself on the sandbox, and is acted on once; unsigned, badly
// signed and replayed quarantines are refused and audited.
func TestSentryQuarantine(t *testing.T) {
	for _, engine := range gatewaytest.Engines {
		t.Run(engine, func(t *testing.T) {
			e := startSentry(t, engine)
			e.sandboxWithPolicy(t, "support")
			pub, key, _ := ed25519.GenerateKey(rand.Reader)
			if _, err := e.sentry.SetSourceKey(t.Context(), &portcullisv1.SetSentrySourceKeyRequest{Source: watchdogSource, PublicKey: pub}); err != nil {
				t.Fatal(err)
			}
			_, otherKey, _ := ed25519.GenerateKey(rand.Reader)
			unsigned := quarantine(watchdogSource, "q0", 1, "support")
			forged := sign(t, otherKey, quarantine(watchdogSource, "q0", 1, "support"))
			a := e.postBatch(t, unsigned, forged)
			if a.Stored != 0 || len(a.Refused) != 2 || !strings.Contains(a.Refused[0].Reason, "signature: is required") || !strings.Contains(a.Refused[1].Reason, "does not verify") {
				t.Fatalf("unsigned and forged quarantines: %+v", a)
			}
			if getSandbox(t, e.admin, "support").GetFrozen() {
				t.Fatal("a refused quarantine froze the sandbox")
			}
			if got := e.auditActions(t, store.ActionSentryRefused); len(got) != 1 || got[0].GetDetail()["refused"] != "2" {
				t.Fatalf("audit of refusals = %v, want one entry for 2 events", got)
			}

			q := sign(t, key, quarantine(watchdogSource, "q1", 1, "support"))
			if a := e.postBatch(t, q); a.Stored != 1 || len(a.Refused) != 0 {
				t.Fatalf("signed quarantine: %+v", a)
			}
			sb := getSandbox(t, e.admin, "support")
			if !sb.GetFrozen() || sb.GetQuarantineEventId() != "q1" || sb.GetQuarantineSource() != watchdogSource || !strings.Contains(sb.GetFrozenReason(), "exfiltration") {
				t.Fatalf("sandbox after the quarantine: %v", sb)
			}
			acts := e.actions(t, "support")
			if len(acts) != 1 || acts[0].GetStatus() != store.SentryFrozen || acts[0].GetVersion() != sb.GetCurrentVersion() || acts[0].GetEventId() != "q1" {
				t.Fatalf("actions = %v, want one frozen at version %d", acts, sb.GetCurrentVersion())
			}
			// Sent again: a duplicate, no second action.
			if a := e.postBatch(t, q); a.Duplicates != 1 || len(e.actions(t, "support")) != 1 {
				t.Fatalf("resent quarantine: %+v, actions %v", a, e.actions(t, "support"))
			}
			// A new id on the used sequence is a replay.
			replay := sign(t, key, quarantine(watchdogSource, "q1-again", 1, "support"))
			if a := e.postBatch(t, replay); a.Stored != 0 || len(a.Refused) != 1 || !strings.Contains(a.Refused[0].Reason, "replayed") {
				t.Fatalf("replayed quarantine: %+v", a)
			}
			if got := e.auditActions(t, store.ActionSentryRefused); len(got) != 2 {
				t.Fatalf("%d refusal audit entries, want 2 (the replay audited)", len(got))
			}
			if got := e.auditActions(t, store.ActionSentryAction); len(got) != 1 || got[0].GetDetail()["status"] != store.SentryFrozen {
				t.Fatalf("action audit = %v", got)
			}
		})
	}
}

// TestQuarantineBudget: with a budget of 2, the third sandbox's
// quarantine is held (sandbox untouched, webhook alert) until an operator
// decides; dry run freezes nothing and records what it would have done.
func TestQuarantineBudget(t *testing.T) {
	sink := &webhookSink{secret: "s3cret"}
	hook := httptestServer(t, sink)
	e := startSentry(t, "sqlite", func(c *gateway.Config) {
		c.QuarantineBudget = 2
		c.WebhookURL, c.WebhookSecret, c.WebhookBackoff = hook, "s3cret", 10*time.Millisecond
	})
	for i, name := range []string{"a", "b", "c"} {
		e.sandboxWithPolicy(t, name)
		e.postBatch(t, quarantine(watchdogSource, "q-"+name, uint64(i+1), name))
	}
	for name, want := range map[string]bool{"a": true, "b": true, "c": false} {
		if got := getSandbox(t, e.admin, name).GetFrozen(); got != want {
			t.Errorf("sandbox %s frozen = %v, want %v", name, got, want)
		}
	}
	held := e.actions(t, "c")
	if len(held) != 1 || held[0].GetStatus() != store.SentryHeld || !strings.Contains(held[0].GetReason(), "froze 2 of at most 2 sandboxes") {
		t.Fatalf("actions of c = %v, want one held", held)
	}
	waitFor(t, "the held-quarantine alert", func() bool {
		return sink.find(notify.EventQuarantineHeld, func(ev map[string]any) bool { return ev["sandbox"] == "c" }) != nil
	})
	// With the budget spent, a quarantine of a sandbox that does not
	// exist fails; it is not held and raises no alert.
	e.postBatch(t, quarantine(watchdogSource, "q-ghost", 4, "ghost"))
	if ghost := e.actions(t, "ghost"); len(ghost) != 1 || ghost[0].GetStatus() != store.SentryFailed || !strings.Contains(ghost[0].GetReason(), "not found") {
		t.Fatalf("actions of ghost = %v, want one failed", ghost)
	}
	// An operator decides: a reason is required; freeze applies it.
	op := e.operatorSentry(t)
	if _, err := op.DecideAction(t.Context(), &portcullisv1.DecideSentryActionRequest{Id: held[0].GetId(), Decision: "freeze"}); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("decide without a reason: %v", err)
	}
	res, err := op.DecideAction(t.Context(), &portcullisv1.DecideSentryActionRequest{Id: held[0].GetId(), Decision: "freeze", Reason: "confirmed by the SOC"})
	if err != nil {
		t.Fatal(err)
	}
	if res.GetAction().GetStatus() != store.SentryApplied || res.GetAction().GetDecidedBy() != "olive" || !getSandbox(t, e.admin, "c").GetFrozen() {
		t.Fatalf("decided: %v", res.GetAction())
	}
	if _, err := op.DecideAction(t.Context(), &portcullisv1.DecideSentryActionRequest{Id: held[0].GetId(), Decision: "dismiss", Reason: "again"}); connect.CodeOf(err) != connect.CodeFailedPrecondition && connect.CodeOf(err) != connect.CodeAborted {
		t.Fatalf("deciding twice: %v", err)
	}
	if sink.find(notify.EventQuarantineHeld, func(ev map[string]any) bool { return ev["sandbox"] == "ghost" }) != nil {
		t.Error("a quarantine of an unknown sandbox raised the held alert")
	}
	// The metrics: what was stored, and what was done.
	_, body := get(t, e.gw.URL+"/metrics", gatewaytest.AdminToken)
	for _, want := range []string{
		`portcullis_sentry_events_total{result="stored"} 4`,
		`portcullis_sentry_actions_total{status="frozen"} 2`,
		`portcullis_sentry_actions_total{status="held"} 1`,
		`portcullis_sentry_actions_total{status="failed"} 1`,
		`portcullis_sentry_missing_sequences{source="sentry://node-3"} 0`,
	} {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

func TestSentryDryRun(t *testing.T) {
	e := startSentry(t, "sqlite", func(c *gateway.Config) { c.SentryDryRun = true })
	e.sandboxWithPolicy(t, "support")
	e.postBatch(t, quarantine(watchdogSource, "q1", 1, "support"))
	if sb := getSandbox(t, e.admin, "support"); sb.GetFrozen() || sb.GetCurrentVersion() != 1 {
		t.Fatalf("dry run froze the sandbox: %v", sb)
	}
	acts := e.actions(t, "support")
	if len(acts) != 1 || acts[0].GetStatus() != store.SentryDryRun || !strings.Contains(acts[0].GetReason(), "would have been frozen") {
		t.Fatalf("dry-run actions = %v", acts)
	}
	if _, body := get(t, e.gw.URL+"/metrics", gatewaytest.AdminToken); !strings.Contains(body, `portcullis_sentry_actions_total{status="dry_run"} 1`+"\n") {
		t.Error(`/metrics lacks portcullis_sentry_actions_total{status="dry_run"} 1`)
	}
}

func (e *sentryEnv) operatorSentry(t *testing.T) portcullisv1connect.SentryServiceClient {
	t.Helper()
	tok, err := e.admin.token.CreateToken(t.Context(), &portcullisv1.CreateTokenRequest{Name: "olive", Role: "operator"})
	if err != nil {
		t.Fatal(err)
	}
	c := connect.NewClient(connecthttp.NewTransport(http.DefaultClient, e.gw.URL), gatewaytest.Bearer(tok.GetToken()))
	return portcullisv1connect.NewSentryServiceClient(c)
}

// TestSentryIngestStreamGRPC: the long-lived intake over stock grpc-go,
// one acknowledgement per batch with the source's acked sequence.
func TestSentryIngestStreamGRPC(t *testing.T) {
	e := startSentry(t, "sqlite")
	conn, err := grpc.NewClient(strings.TrimPrefix(e.gw.URL, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer "+e.token)
	stream, err := portcullisv1.NewSentryServiceClient(conn).IngestEvents(ctx)
	if err != nil {
		t.Fatal(err)
	}
	batches := [][]uint64{{1, 2}, {4}, {3, 2}}
	wants := []struct {
		stored, dups int
		acked        uint64
		gaps         int
	}{{2, 0, 2, 0}, {1, 0, 2, 1}, {1, 1, 4, 0}}
	for i, seqs := range batches {
		req := &portcullisv1.IngestEventsRequest{}
		for _, s := range seqs {
			req.Events = append(req.Events, protoEvent(t, toolAccess(watchdogSource, fmt.Sprintf("g%d", s), s, "support")))
		}
		if err := stream.Send(req); err != nil {
			t.Fatal(err)
		}
		res, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		w := wants[i]
		if int(res.GetStored()) != w.stored || int(res.GetDuplicates()) != w.dups || len(res.GetAcks()) != 1 || res.GetAcks()[0].GetAckedSequence() != w.acked || len(res.GetAcks()[0].GetGaps()) != w.gaps {
			t.Fatalf("batch %d: %v, want %+v", i, res, w)
		}
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != io.EOF {
		t.Fatalf("end of stream: %v", err)
	}
}

func httptestServer(t *testing.T, h http.Handler) string {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestSentryFindings: a moment after ingest the gateway marks an event
// whose policy hash no proxy of its sandbox applied (drift), and a tool
// call no proxy decided (unmediated); events that match are left alone.
func TestSentryFindings(t *testing.T) {
	e := startSentry(t, "sqlite")
	e.sandboxWithPolicy(t, "support")
	current := getSandbox(t, e.admin, "support").GetCurrentHash()
	at, _ := time.Parse(time.RFC3339, "2026-12-01T19:00:00Z")
	st := e.gw.Store
	if err := st.SaveProxyStatuses(t.Context(), []store.ProxyStatus{{
		Sandbox: "support", ProxyID: "p1", Replica: "r", Connected: true, ConnectedAt: time.Now(), LastSeenAt: time.Now(),
		AppliedVersion: 1, AppliedHash: current,
	}}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.AppendDecisions(t.Context(), []store.Decision{{ProxyID: "p1", Record: decision.Record{
		Time: at.Add(-2 * time.Second), Sandbox: "support", Decision: "allow", MCPMethod: "tools/call", Tool: "lookup"}}}); err != nil {
		t.Fatal(err)
	}
	seen := func(id string, seq uint64, hash, tool string) ce {
		c := toolAccess(watchdogSource, id, seq, "support")
		data := c["data"].(map[string]any)
		data["policy"] = map[string]any{"version": 1, "hash": hash}
		data["tool_call"].(map[string]any)["tool"] = tool
		return c
	}
	stale := strings.Repeat("ab", 32)
	e.postBatch(t,
		seen("fine", 1, current, "lookup"),     // applied hash, decided call
		seen("drifted", 2, stale, "lookup"),    // a hash no proxy applied
		seen("bypassed", 3, current, "refund"), // a call no proxy decided
	)
	want := map[string][]string{"fine": nil, "drifted": {"drift"}, "bypassed": {"unmediated"}}
	waitFor(t, "the derived findings", func() bool {
		for _, ev := range e.events(t, watchdogSource) {
			if !slices.Equal(ev.GetFlags(), want[ev.GetId()]) {
				return false
			}
		}
		return true
	})
	// The check is done once the flags are there; "fine" stays clean.
	time.Sleep(500 * time.Millisecond)
	for _, ev := range e.events(t, watchdogSource) {
		if !slices.Equal(ev.GetFlags(), want[ev.GetId()]) {
			t.Errorf("flags of %s = %q, want %q", ev.GetId(), ev.GetFlags(), want[ev.GetId()])
		}
	}
}

// TestSentryDriftAfterChange: a watchdog that names the policy of a
// moment ago — the version its sandbox's proxies just moved past — is not
// drifting; the same hash received more than the window after the change
// is, and so is a version no proxy of the sandbox has reached.
func TestSentryDriftAfterChange(t *testing.T) {
	const window = time.Second
	e := startSentry(t, "sqlite", func(c *gateway.Config) { c.SentrySettle, c.SentryWindow = 50*time.Millisecond, window })
	freeze := func(name string) (before, after string) {
		e.sandboxWithPolicy(t, name)
		before = getSandbox(t, e.admin, name).GetCurrentHash()
		if _, err := e.admin.sandbox.FreezeSandbox(t.Context(), &portcullisv1.FreezeSandboxRequest{Name: name, Reason: "drill"}); err != nil {
			t.Fatal(err)
		}
		return before, getSandbox(t, e.admin, name).GetCurrentHash()
	}
	h1, h2 := freeze("support") // its proxy applied the freeze
	o1, o2 := freeze("other")   // its proxy has not yet
	now := time.Now()
	if err := e.gw.Store.SaveProxyStatuses(t.Context(), []store.ProxyStatus{
		{Sandbox: "support", ProxyID: "p1", Replica: "r", Connected: true, ConnectedAt: now, LastSeenAt: now, AppliedVersion: 2, AppliedHash: h2},
		{Sandbox: "other", ProxyID: "p1", Replica: "r", Connected: true, ConnectedAt: now, LastSeenAt: now, AppliedVersion: 1, AppliedHash: o1},
	}); err != nil {
		t.Fatal(err)
	}
	seq := uint64(0)
	seen := func(id, sandbox, hash string) ce {
		seq++
		c := toolAccess(watchdogSource, id, seq, sandbox)
		c["type"] = "portcullis.sentry.v1.heartbeat" // no tool call to check
		data := c["data"].(map[string]any)
		delete(data, "tool_call")
		data["policy"] = map[string]any{"hash": hash}
		return c
	}
	want := map[string][]string{}
	post := func(drift map[string]bool, events ...ce) {
		t.Helper()
		for _, c := range events {
			id := c["id"].(string)
			want[id] = nil
			if drift[id] {
				want[id] = []string{"drift"}
			}
		}
		if a := e.postBatch(t, events...); a.Stored != len(events) {
			t.Fatalf("stored %d of %d events: %+v", a.Stored, len(events), a)
		}
	}
	post(map[string]bool{"made-up": true, "unpushed": true},
		seen("lagging", "support", h1), // current until the freeze, a moment ago
		seen("current", "support", h2),
		seen("made-up", "support", strings.Repeat("ab", 32)),
		seen("unpushed", "other", o2), // committed, but no proxy has it
		seen("held", "other", o1),
	)
	time.Sleep(window + 500*time.Millisecond)
	post(map[string]bool{"late": true}, seen("late", "support", h1))

	checked := func() bool {
		evs := e.events(t, watchdogSource)
		if len(evs) != len(want) {
			return false
		}
		for _, ev := range evs {
			if !slices.Equal(ev.GetFlags(), want[ev.GetId()]) {
				return false
			}
		}
		return true
	}
	for deadline := time.Now().Add(10 * time.Second); !checked() && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // those without a finding stay clean
	evs := e.events(t, watchdogSource)
	if len(evs) != len(want) {
		t.Errorf("%d events stored, want %d", len(evs), len(want))
	}
	for _, ev := range evs {
		if !slices.Equal(ev.GetFlags(), want[ev.GetId()]) {
			t.Errorf("flags of %s = %q, want %q", ev.GetId(), ev.GetFlags(), want[ev.GetId()])
		}
	}
}

// TestSentryTimeline: one sandbox's events, decisions, versions, actions
// and audit in time order, each with the version in force, joined by
// denial_id and policy hash.
func TestSentryTimeline(t *testing.T) {
	e := startSentry(t, "sqlite")
	e.sandboxWithPolicy(t, "support")
	v1 := getSandbox(t, e.admin, "support").GetCurrentHash()
	now := time.Now().UTC()
	if _, err := e.gw.Store.AppendDecisions(t.Context(), []store.Decision{{ProxyID: "p1", Record: decision.Record{
		Time: now, Sandbox: "support", Decision: "deny", MCPMethod: "tools/call", Tool: "refund", DenialID: "d-1", PolicyVersion: "1"}}}); err != nil {
		t.Fatal(err)
	}
	seen := toolAccess(watchdogSource, "seen", 1, "support")
	seen["time"] = now.Format(time.RFC3339Nano) // after version 1, before the freeze
	data := seen["data"].(map[string]any)
	data["policy"] = map[string]any{"version": 1, "hash": v1}
	data["correlation"] = map[string]any{"denial_id": "d-1"}
	q := quarantine(watchdogSource, "q1", 2, "support")
	q["time"] = now.Format(time.RFC3339Nano)
	e.postBatch(t, seen, q)

	res, err := e.sentry.Timeline(t.Context(), &portcullisv1.SentryTimelineRequest{Sandbox: "support", Since: timestamppb.New(now.Add(-time.Hour))})
	if err != nil {
		t.Fatal(err)
	}
	entries := res.GetEntries()
	find := func(kind string, match func(*portcullisv1.TimelineEntry) bool) *portcullisv1.TimelineEntry {
		for _, en := range entries {
			if en.GetKind() == kind && match(en) {
				return en
			}
		}
		t.Fatalf("no %s entry matches in the timeline:\n%v", kind, entries)
		return nil
	}
	for i := 1; i < len(entries); i++ {
		if entries[i].GetTime().AsTime().Before(entries[i-1].GetTime().AsTime()) {
			t.Fatalf("entries out of time order at %d:\n%v", i, entries)
		}
	}
	find("version", func(en *portcullisv1.TimelineEntry) bool {
		return en.GetRefs()["version"] == "1" && en.GetPolicyVersion() == 1
	})
	dec := find("decision", func(en *portcullisv1.TimelineEntry) bool { return en.GetRefs()["denial_id"] == "d-1" })
	ev := find("sentry_event", func(en *portcullisv1.TimelineEntry) bool { return en.GetRefs()["event_id"] == "seen" })
	if ev.GetPolicyVersion() != 1 || !slices.Contains(ev.GetLinks(), "policy hash: version 1") ||
		!slices.Contains(ev.GetLinks(), "denial_id d-1: decision "+dec.GetRefs()["decision"]) || ev.GetRefs()["tool"] != "refund" {
		t.Errorf("the event's entry = %v, want version 1 in force, joined to version 1 by hash and to the decision by denial_id", ev)
	}
	act := find("sentry_action", func(en *portcullisv1.TimelineEntry) bool { return en.GetRefs()["event_id"] == "q1" })
	if act.GetRefs()["status"] != "frozen" || !slices.Contains(act.GetLinks(), "committed version 2") {
		t.Errorf("the action's entry = %v", act)
	}
	v2 := find("version", func(en *portcullisv1.TimelineEntry) bool { return en.GetRefs()["version"] == "2" })
	if v2.GetPolicyVersion() != 2 || !strings.Contains(v2.GetSummary(), "freeze") {
		t.Errorf("the freeze's entry = %v", v2)
	}
	find("audit", func(en *portcullisv1.TimelineEntry) bool {
		return en.GetRefs()["action"] == store.ActionFreeze && en.GetPolicyVersion() == 2
	})
	// A sandbox that does not exist, and a limit past the most.
	if _, err := e.sentry.Timeline(t.Context(), &portcullisv1.SentryTimelineRequest{Sandbox: "nope"}); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("timeline of an unknown sandbox: %v", err)
	}
	if _, err := e.sentry.Timeline(t.Context(), &portcullisv1.SentryTimelineRequest{Sandbox: "support", Limit: 5001}); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("timeline limit 5001: %v", err)
	}
}

// TestQuarantineBudgetConcurrent: five quarantines from five sources at
// once, with a budget of 2, freeze exactly two sandboxes and hold the
// other three — the places taken by freezes not yet recorded count.
func TestQuarantineBudgetConcurrent(t *testing.T) {
	for _, engine := range gatewaytest.Engines {
		t.Run(engine, func(t *testing.T) {
			e := startSentry(t, engine, func(c *gateway.Config) { c.QuarantineBudget = 2 })
			names := []string{"a", "b", "c", "d", "e"}
			bodies := make([][]byte, len(names))
			tokens := make([]string, len(names))
			for i, name := range names {
				e.sandboxWithPolicy(t, name)
				source := "sentry://node-" + name
				tok, err := e.admin.token.CreateToken(t.Context(), &portcullisv1.CreateTokenRequest{Name: source, Role: "sentry"})
				if err != nil {
					t.Fatal(err)
				}
				tokens[i] = tok.GetToken()
				if bodies[i], err = json.Marshal(quarantine(source, "q-"+name, 1, name)); err != nil {
					t.Fatal(err)
				}
			}
			errs := make(chan error, len(names))
			for i := range names {
				go func() {
					req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, e.gw.URL+gateway.SentryEventsPath, bytes.NewReader(bodies[i]))
					if err != nil {
						errs <- err
						return
					}
					req.Header.Set("Content-Type", "application/cloudevents+json")
					req.Header.Set("Authorization", "Bearer "+tokens[i])
					res, err := http.DefaultClient.Do(req)
					if err != nil {
						errs <- err
						return
					}
					raw, _ := io.ReadAll(res.Body)
					res.Body.Close()
					if res.StatusCode != http.StatusOK {
						err = fmt.Errorf("quarantine of %s: %d %s", names[i], res.StatusCode, raw)
					}
					errs <- err
				}()
			}
			for range names {
				if err := <-errs; err != nil {
					t.Fatal(err)
				}
			}
			statuses := map[string]int{}
			for _, name := range names {
				acts := e.actions(t, name)
				if len(acts) != 1 {
					t.Fatalf("actions of %s = %v, want one", name, acts)
				}
				statuses[acts[0].GetStatus()]++
				if frozen := getSandbox(t, e.admin, name).GetFrozen(); frozen != (acts[0].GetStatus() == store.SentryFrozen) {
					t.Errorf("sandbox %s frozen = %v, but its action is %s", name, frozen, acts[0].GetStatus())
				}
			}
			if statuses[store.SentryFrozen] != 2 || statuses[store.SentryHeld] != 3 {
				t.Fatalf("actions: %v, want 2 frozen and 3 held", statuses)
			}
		})
	}
}

// TestDecideHeldOnce: two operators deciding one held quarantine at once —
// one freezes, one dismisses — exactly one wins; the other is a conflict,
// and the action and the sandbox agree with the winner.
func TestDecideHeldOnce(t *testing.T) {
	for _, engine := range gatewaytest.Engines {
		t.Run(engine, func(t *testing.T) {
			e := startSentry(t, engine, func(c *gateway.Config) { c.QuarantineBudget = 1 })
			e.sandboxWithPolicy(t, "a")
			e.sandboxWithPolicy(t, "b")
			e.postBatch(t, quarantine(watchdogSource, "qa", 1, "a"), quarantine(watchdogSource, "qb", 2, "b"))
			held := e.actions(t, "b")
			if len(held) != 1 || held[0].GetStatus() != store.SentryHeld {
				t.Fatalf("actions of b = %v, want one held", held)
			}
			op := e.operatorSentry(t)
			errs := make(chan error, 2)
			for _, d := range []string{"freeze", "dismiss"} {
				go func() {
					_, err := op.DecideAction(t.Context(), &portcullisv1.DecideSentryActionRequest{Id: held[0].GetId(), Decision: d, Reason: "race " + d})
					errs <- err
				}()
			}
			var won, lost int
			for range 2 {
				switch err := <-errs; {
				case err == nil:
					won++
				case connect.CodeOf(err) == connect.CodeFailedPrecondition || connect.CodeOf(err) == connect.CodeAborted:
					lost++
				default:
					t.Errorf("decide: %v", err)
				}
			}
			if won != 1 || lost != 1 {
				t.Fatalf("%d decisions won and %d lost, want one each", won, lost)
			}
			a := e.actions(t, "b")[0]
			frozen := getSandbox(t, e.admin, "b").GetFrozen()
			if a.GetStatus() == store.SentryApplied && !frozen || a.GetStatus() == store.SentryDismissed && frozen || a.GetStatus() == store.SentryHeld {
				t.Fatalf("action %s, sandbox frozen %v: they disagree", a.GetStatus(), frozen)
			}
		})
	}
}

// metricValue reads one unlabelled series from the gateway's /metrics
// (0 when it is absent).
func metricValue(t *testing.T, url, name string) float64 {
	t.Helper()
	_, body := get(t, url+"/metrics", gatewaytest.AdminToken)
	for line := range strings.SplitSeq(body, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			var f float64
			fmt.Sscan(v, &f)
			return f
		}
	}
	return 0
}

// slowSender is a batch request whose body trickles in, one space a
// tick, and never ends: a slowloris.
type slowSender struct {
	conn net.Conn
	stop chan struct{}
	done chan struct{}
}

func startSlowSender(t *testing.T, gwURL, token string) *slowSender {
	t.Helper()
	u, err := url.Parse(gwURL)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/cloudevents-batch+json\r\nContent-Length: 1048576\r\n\r\n[",
		gateway.SentryEventsPath, u.Host, token)
	s := &slowSender{conn: c, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-tick.C:
				if _, err := c.Write([]byte(" ")); err != nil {
					return // the gateway cut it off
				}
			}
		}
	}()
	t.Cleanup(func() { s.close() })
	return s
}

func (s *slowSender) close() {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	s.conn.Close()
	<-s.done
}

// status reads the status line the gateway answered, waiting for it at
// most until guard (a failure, not a measure).
func (s *slowSender) status(t *testing.T, guard time.Duration) string {
	t.Helper()
	s.conn.SetReadDeadline(time.Now().Add(guard))
	line, err := bufio.NewReader(s.conn).ReadString('\n')
	if err != nil {
		t.Fatalf("no answer to a slow batch: %v", err)
	}
	return strings.TrimSpace(line)
}

// TestSentryBatchSlowloris: batches whose bodies trickle in hold none of
// the places that parsing and storing share, one source holds at most its
// share of batches in flight, and a body that has not arrived whole
// within the body deadline is answered 408. Eight slow connections of one
// source used to take all 8 places and keep every other source's batch
// waiting until its client gave up.
func TestSentryBatchSlowloris(t *testing.T) {
	e := startSentry(t, "sqlite")
	const other = "sentry://node-4"
	tok, err := e.admin.token.CreateToken(t.Context(), &portcullisv1.CreateTokenRequest{Name: other, Role: "sentry"})
	if err != nil {
		t.Fatal(err)
	}
	var slow []*slowSender
	for range 10 {
		slow = append(slow, startSlowSender(t, e.gw.URL, e.token))
	}
	// All ten are in the handler, awaiting their bodies (or their
	// source's turn); on the old intake they held the 8 places instead.
	waitFor(t, "eight slow batches received", func() bool {
		return metricValue(t, e.gw.URL, "portcullis_sentry_batches_receiving")+metricValue(t, e.gw.URL, "portcullis_sentry_batch_bodies") >= 8
	})
	// Another source's batch is answered while they are all still open.
	body, _ := json.Marshal([]ce{toolAccess(other, "b1", 1, "support")})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second) // a guard: the old intake never answered
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.gw.URL+gateway.SentryEventsPath, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/cloudevents-batch+json")
	req.Header.Set("Authorization", "Bearer "+tok.GetToken())
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("a legitimate batch beside 10 slow ones: %v", err)
	}
	raw, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || !strings.Contains(string(raw), `"stored":1`) {
		t.Fatalf("a legitimate batch beside 10 slow ones: %d %s", res.StatusCode, raw)
	}
	waitFor(t, "all ten slow batches still open", func() bool {
		return metricValue(t, e.gw.URL, "portcullis_sentry_batches_receiving") == 10
	})
	if n := metricValue(t, e.gw.URL, "portcullis_sentry_batch_bodies"); n != 0 {
		t.Fatalf("slow batches hold %v shared places, want 0", n)
	}
	for _, s := range slow {
		s.close()
	}
	waitFor(t, "the slow batches gone", func() bool {
		return metricValue(t, e.gw.URL, "portcullis_sentry_batches_receiving") == 0
	})
}

// TestSentryBodyDeadline: a batch body still arriving when the body
// deadline passes is answered 408, whether it was being read or waiting
// for its source's turn, and nothing is stored.
func TestSentryBodyDeadline(t *testing.T) {
	e := startSentry(t, "sqlite", func(c *gateway.Config) { c.SentryBodyTimeout = 300 * time.Millisecond })
	var slow []*slowSender
	for range 8 {
		slow = append(slow, startSlowSender(t, e.gw.URL, e.token))
	}
	for i, s := range slow {
		if st := s.status(t, 20*time.Second); !strings.Contains(st, " 408 ") {
			t.Fatalf("slow batch %d answered %q, want 408", i, st)
		}
	}
	if n := len(e.events(t, "")); n != 0 {
		t.Fatalf("%d events stored from bodies cut off", n)
	}
	// The source's turns are given back: its next batch goes through.
	if a := e.postBatch(t, toolAccess(watchdogSource, "e1", 1, "support")); a.Stored != 1 {
		t.Fatalf("a batch after the slow ones: %+v", a)
	}
}

// TestSentryChecksKeepUp: a burst of events that arrive while the first
// settle is checked whole, none dropped; the checker used to wait for the
// newest of each thousand it took, and turned most of a burst away.
func TestSentryChecksKeepUp(t *testing.T) {
	e := startSentry(t, "sqlite", func(c *gateway.Config) { c.SentrySettle = 300 * time.Millisecond })
	e.sandboxWithPolicy(t, "support")
	const batches, per = 12, 1000
	for b := range batches {
		events := make([]ce, per)
		for i := range events {
			seq := uint64(b*per + i + 1)
			events[i] = toolAccess(watchdogSource, fmt.Sprintf("call-%d", seq), seq, "support") // no proxy decided it
		}
		if a := e.postBatch(t, events...); a.Stored != per {
			t.Fatalf("batch %d stored %d", b, a.Stored)
		}
	}
	metric := func(name string) string {
		_, body := get(t, e.gw.URL+"/metrics", gatewaytest.AdminToken)
		for line := range strings.Lines(body) {
			if strings.HasPrefix(line, name+" ") {
				return strings.TrimSpace(strings.TrimPrefix(line, name+" "))
			}
		}
		return ""
	}
	flagged := func() (n int) {
		stored, err := e.gw.Store.ListSentryEvents(t.Context(), store.SentryEventFilter{Source: watchdogSource})
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range stored {
			if slices.Equal(ev.Flags, []string{"unmediated"}) {
				n++
			}
		}
		return n
	}
	waitFor(t, "every event checked", func() bool { return flagged() == batches*per })
	if got, want := metric(`portcullis_sentry_findings_total{kind="unmediated"}`), fmt.Sprint(batches*per); got != want {
		t.Errorf("%s unmediated findings counted, want %s", got, want)
	}
	if got := metric("portcullis_sentry_checks_dropped_total"); got != "0" {
		t.Errorf("%s checks dropped, want 0", got)
	}
}

// TestPublishEventsBounds: PublishEvents refuses, before reading its
// events, a message past the read limit (ResourceExhausted) and one of
// more than 1,000 events (InvalidArgument); an event whose data would
// pass an event's size is refused alone, naming data. Nothing is stored.
// Both in the binary (Connect, gRPC) and the JSON form.
func TestPublishEventsBounds(t *testing.T) {
	e := startSentry(t, "sqlite")
	big := func(n int) *structpb.Struct {
		st, err := structpb.NewStruct(map[string]any{"severity": "low", "pad": strings.Repeat("a", n)})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	for _, opt := range []connecthttp.Option{nil, connecthttp.WithProtoJSON(), connecthttp.WithGRPC()} {
		opts := []connecthttp.Option{}
		if opt != nil {
			opts = append(opts, opt)
		}
		sc := portcullisv1connect.NewSentryServiceClient(connect.NewClient(connecthttp.NewTransport(http.DefaultClient, e.gw.URL, opts...), gatewaytest.Bearer(e.token)))
		ev := func(i int, data *structpb.Struct) *portcullisv1.SentryEvent {
			p := protoEvent(t, toolAccess(watchdogSource, fmt.Sprint("e", i), uint64(i+1), "support"))
			p.Data = data
			return p
		}
		// Past the read limit (4 MiB and a little).
		_, err := sc.PublishEvents(t.Context(), &portcullisv1.PublishEventsRequest{Events: []*portcullisv1.SentryEvent{ev(0, big(5<<20))}})
		if connect.CodeOf(err) != connect.CodeResourceExhausted {
			t.Errorf("a 5 MiB message: %v, want ResourceExhausted", err)
		}
		// Too many events.
		var many []*portcullisv1.SentryEvent
		for i := range sentry.MaxBatchEvents + 1 {
			many = append(many, ev(i, nil))
		}
		_, err = sc.PublishEvents(t.Context(), &portcullisv1.PublishEventsRequest{Events: many})
		if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "events") {
			t.Errorf("1,001 events: %v, want InvalidArgument naming events", err)
		}
		// One event too large: refused alone.
		res, err := sc.PublishEvents(t.Context(), &portcullisv1.PublishEventsRequest{Events: []*portcullisv1.SentryEvent{ev(0, big(200<<10))}})
		if err != nil || res.GetStored() != 0 || len(res.GetRefused()) != 1 || !strings.HasPrefix(res.GetRefused()[0].GetReason(), "data: ") {
			t.Errorf("an event of 200 KiB: %v, %v", res, err)
		}
	}
	if n := len(e.events(t, "")); n != 0 {
		t.Fatalf("%d events stored", n)
	}
}

// TestSentryIngestStreamsPerSource: an IngestEvents stream reads its next
// message before it waits for a place, so one source may hold only so
// many streams open (twice its places: 4 by default); the next is refused
// ResourceExhausted, another source's streams are not affected, and a
// closed stream makes room.
func TestSentryIngestStreamsPerSource(t *testing.T) {
	e := startSentry(t, "sqlite")
	e.sandboxWithPolicy(t, "support")
	other, err := e.admin.token.CreateToken(t.Context(), &portcullisv1.CreateTokenRequest{Name: "sentry://other", Role: "sentry"})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(strings.TrimPrefix(e.gw.URL, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := portcullisv1.NewSentryServiceClient(conn)
	seq := map[string]uint64{}
	// open opens a stream as source and sends it one batch: the answer,
	// or the stream's error.
	open := func(token, source string) (portcullisv1.SentryService_IngestEventsClient, error) {
		t.Helper()
		ctx := metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer "+token)
		stream, err := client.IngestEvents(ctx)
		if err != nil {
			t.Fatal(err)
		}
		seq[source]++
		req := &portcullisv1.IngestEventsRequest{Events: []*portcullisv1.SentryEvent{
			protoEvent(t, toolAccess(source, fmt.Sprintf("s%d", seq[source]), seq[source], "support"))}}
		if err := stream.Send(req); err != nil && err != io.EOF {
			t.Fatal(err)
		}
		if _, err := stream.Recv(); err != nil {
			return nil, err
		}
		return stream, nil
	}
	var streams []portcullisv1.SentryService_IngestEventsClient
	for i := range 4 {
		s, err := open(e.token, watchdogSource)
		if err != nil {
			t.Fatalf("stream %d of the source: %v", i+1, err)
		}
		streams = append(streams, s)
	}
	if _, err := open(e.token, watchdogSource); status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "streams open") {
		t.Fatalf("a fifth stream of one source: %v, want ResourceExhausted naming the streams", err)
	}
	if _, err := open(other.GetToken(), "sentry://other"); err != nil {
		t.Fatalf("another source's stream: %v", err)
	}
	if err := streams[0].CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := streams[0].Recv(); err != io.EOF {
		t.Fatalf("end of the first stream: %v", err)
	}
	// The count is given back when the interceptor returns, before the
	// end of the stream is written: room is there once the client reads it.
	if _, err := open(e.token, watchdogSource); err != nil {
		t.Fatalf("a stream after one closed: %v", err)
	}
}

// TestSentryStale: a quarantine whose own time is older than
// --sentry-max-age, or too far ahead, is stored and flagged stale, its
// action recorded as stale and the sandbox left as it was; a fresh one
// still freezes.
func TestSentryStale(t *testing.T) {
	e := startSentry(t, "sqlite", func(c *gateway.Config) { c.SentryMaxAge = time.Minute })
	e.sandboxWithPolicy(t, "support")
	old := quarantine(watchdogSource, "q-old", 1, "support")
	old["time"] = time.Now().Add(-3 * 24 * time.Hour).UTC().Format(time.RFC3339)
	ahead := quarantine(watchdogSource, "q-ahead", 2, "support")
	ahead["time"] = time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	if a := e.postBatch(t, old, ahead); a.Stored != 2 || len(a.Refused) != 0 {
		t.Fatalf("stale quarantines: %+v", a)
	}
	if sb := getSandbox(t, e.admin, "support"); sb.GetFrozen() || sb.GetCurrentVersion() != 1 {
		t.Fatalf("a stale quarantine froze the sandbox: %v", sb)
	}
	acts := e.actions(t, "support")
	if len(acts) != 2 {
		t.Fatalf("actions = %v, want two stale", acts)
	}
	for _, a := range acts {
		if a.GetStatus() != store.SentryStale || a.GetVersion() != 0 || !strings.Contains(a.GetReason(), "not frozen") {
			t.Errorf("action %s = %v, want stale", a.GetEventId(), a)
		}
	}
	for _, ev := range e.events(t, watchdogSource) {
		if !slices.Contains(ev.GetFlags(), "stale") {
			t.Errorf("event %s flags = %v, want stale", ev.GetId(), ev.GetFlags())
		}
	}
	if _, body := get(t, e.gw.URL+"/metrics", gatewaytest.AdminToken); !strings.Contains(body, `portcullis_sentry_actions_total{status="stale"} 2`+"\n") {
		t.Error(`/metrics lacks portcullis_sentry_actions_total{status="stale"} 2`)
	}
	// A fresh one still freezes, and is not flagged.
	e.postBatch(t, quarantine(watchdogSource, "q-now", 3, "support"))
	if sb := getSandbox(t, e.admin, "support"); !sb.GetFrozen() || sb.GetQuarantineEventId() != "q-now" {
		t.Fatalf("a fresh quarantine did not freeze: %v", sb)
	}
	for _, ev := range e.events(t, watchdogSource) {
		if ev.GetId() == "q-now" && slices.Contains(ev.GetFlags(), "stale") {
			t.Errorf("fresh event flagged stale: %v", ev.GetFlags())
		}
	}
}
