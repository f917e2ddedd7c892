package gateway_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"connectrpc.com/connect/v2"

	"github.com/portcullis-dev/portcullis/gateway"
	"github.com/portcullis-dev/portcullis/gateway/gatewaytest"
	"github.com/portcullis-dev/portcullis/policy"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
	"github.com/portcullis-dev/portcullis/store"
)

// rogueSource is a second watchdog's source: one that misbehaves.
const rogueSource = "sentry://rogue"

// postAs sends events as one batch with token and returns the answer.
func (e *sentryEnv) postAs(t *testing.T, token string, events ...ce) answer {
	t.Helper()
	body, err := json.Marshal(events)
	if err != nil {
		t.Fatal(err)
	}
	code, a := e.post(t, token, "application/cloudevents-batch+json", body)
	if code != http.StatusOK {
		t.Fatalf("batch: %d %+v", code, a)
	}
	return a
}

// culpritWithProxy creates a sandbox with a policy and connects a proxy
// to it that applied version 1.
func (e *sentryEnv) culpritWithProxy(t *testing.T, name string) *testProxy {
	t.Helper()
	sb, err := e.admin.sandbox.CreateSandbox(t.Context(), &portcullisv1.CreateSandboxRequest{Name: name, Policy: pushPolicy})
	if err != nil {
		t.Fatal(err)
	}
	p := connectProxy(t, e.gw, sb.GetToken(), name, "p1")
	v1 := recvPolicy(t, p.st)
	if v1.GetVersion() != 1 {
		t.Fatalf("first version %d, want 1", v1.GetVersion())
	}
	p.ack(t, v1)
	return p
}

// TestQuarantineBudgetPerSource: a rogue source quarantines ten unrelated
// sandboxes, as many as the fleet's budget; it freezes only its own
// budget's worth (3) and the rest of its quarantines are held, so the
// legitimate watchdog's quarantine of the sandbox actually exfiltrating
// still freezes it: its proxy receives the deny-all version.
func TestQuarantineBudgetPerSource(t *testing.T) {
	for _, engine := range gatewaytest.Engines {
		t.Run(engine, func(t *testing.T) {
			e := startSentry(t, engine) // default budgets: 10 for the fleet, 3 per source
			tok, err := e.admin.token.CreateToken(t.Context(), &portcullisv1.CreateTokenRequest{Name: rogueSource, Role: "sentry"})
			if err != nil {
				t.Fatal(err)
			}
			proxy := e.culpritWithProxy(t, "culprit")
			var flood []ce
			for i := range 10 {
				name := fmt.Sprintf("bystander-%d", i)
				e.sandboxWithPolicy(t, name)
				flood = append(flood, quarantine(rogueSource, "r"+name, uint64(i+1), name))
			}
			if a := e.postAs(t, tok.GetToken(), flood...); a.Stored != 10 {
				t.Fatalf("the rogue's batch: %+v", a)
			}
			frozen := 0
			for i := range 10 {
				name := fmt.Sprintf("bystander-%d", i)
				acts := e.actions(t, name)
				if len(acts) != 1 {
					t.Fatalf("actions of %s = %v", name, acts)
				}
				switch acts[0].GetStatus() {
				case store.SentryFrozen:
					frozen++
				case store.SentryHeld:
					if !strings.Contains(acts[0].GetReason(), `quarantine budget of source "sentry://rogue" spent`) {
						t.Errorf("held for %q, want the rogue's own budget", acts[0].GetReason())
					}
				default:
					t.Errorf("action of %s: %v", name, acts[0])
				}
			}
			if frozen != 3 {
				t.Fatalf("the rogue froze %d sandboxes, want its budget, 3", frozen)
			}

			// The legitimate watchdog's quarantine of the culprit freezes it.
			if a := e.postBatch(t, quarantine(watchdogSource, "q-culprit", 1, "culprit")); a.Stored != 1 || len(a.Refused) != 0 {
				t.Fatalf("the watchdog's quarantine: %+v", a)
			}
			acts := e.actions(t, "culprit")
			if len(acts) != 1 || acts[0].GetStatus() != store.SentryFrozen {
				t.Fatalf("actions of the culprit = %v, want one frozen", acts)
			}
			v2 := recvPolicy(t, proxy.st)
			if v2.GetVersion() != 2 || int64(v2.GetVersion()) != int64(acts[0].GetVersion()) {
				t.Fatalf("the proxy received version %d, want the freeze's %d", v2.GetVersion(), acts[0].GetVersion())
			}
			p, _, err := policy.Parse(v2.GetDocument())
			if err != nil {
				t.Fatal(err)
			}
			if len(p.NetworkPolicies) != 0 {
				t.Fatalf("the pushed version allows %d network policies, want deny-all", len(p.NetworkPolicies))
			}
			if !getSandbox(t, e.admin, "culprit").GetFrozen() {
				t.Fatal("the culprit is not frozen")
			}
		})
	}
}

// TestSentryScope: a sentry token limited to team-a-* is refused, event by
// event with the reason, what it sends about another sandbox — its
// quarantine above all, which freezes nothing, records no action and is
// audited — while its events about its own sandboxes are stored and
// acted on. A glob that does not parse, or sandboxes on another role, are
// refused by name and store no token.
func TestSentryScope(t *testing.T) {
	for _, engine := range gatewaytest.Engines {
		t.Run(engine, func(t *testing.T) {
			e := startSentry(t, engine)
			for _, req := range []*portcullisv1.CreateTokenRequest{
				{Name: "sentry://bad-glob", Role: "sentry", Sandboxes: []string{"team-[a"}},
				{Name: "sentry://comma", Role: "sentry", Sandboxes: []string{"a,b"}},
				{Name: "olive", Role: "operator", Sandboxes: []string{"support"}},
			} {
				if _, err := e.admin.token.CreateToken(t.Context(), req); connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "sandboxes") {
					t.Errorf("create %v: %v, want invalid sandboxes", req, err)
				}
			}
			tok, err := e.admin.token.CreateToken(t.Context(), &portcullisv1.CreateTokenRequest{Name: rogueSource, Role: "sentry", Sandboxes: []string{"team-a-*", "lab"}})
			if err != nil {
				t.Fatal(err)
			}
			list, err := e.admin.token.ListTokens(t.Context(), &portcullisv1.ListTokensRequest{})
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, tk := range list.GetTokens() {
				names = append(names, tk.GetName())
				if tk.GetName() == rogueSource && !slices.Equal(tk.GetSandboxes(), []string{"team-a-*", "lab"}) {
					t.Errorf("listed sandboxes %v, want [team-a-* lab]", tk.GetSandboxes())
				}
				if tk.GetName() == watchdogSource && len(tk.GetSandboxes()) != 0 {
					t.Errorf("the unlimited token lists sandboxes %v", tk.GetSandboxes())
				}
			}
			for _, refused := range []string{"sentry://bad-glob", "sentry://comma", "olive"} {
				if slices.Contains(names, refused) {
					t.Errorf("refused token %s was stored", refused)
				}
			}

			e.sandboxWithPolicy(t, "support")
			e.sandboxWithPolicy(t, "team-a-1")
			a := e.postAs(t, tok.GetToken(),
				quarantine(rogueSource, "q-support", 1, "support"),
				toolAccess(rogueSource, "t-support", 2, "support"),
				toolAccess(rogueSource, "t-team", 3, "team-a-1"),
			)
			if a.Stored != 1 || len(a.Refused) != 2 || a.Refused[0].Index != 0 || a.Refused[1].Index != 1 ||
				!strings.Contains(a.Refused[0].Reason, `subject: sandbox "support" is outside the scope of source "sentry://rogue"`) ||
				!strings.Contains(a.Refused[0].Reason, "may not quarantine it") {
				t.Fatalf("events outside the scope: %+v", a)
			}
			if getSandbox(t, e.admin, "support").GetFrozen() {
				t.Fatal("a quarantine outside the token's scope froze the sandbox")
			}
			if acts := e.actions(t, "support"); len(acts) != 0 {
				t.Fatalf("actions of support = %v, want none", acts)
			}
			if evs := e.events(t, rogueSource); len(evs) != 1 || evs[0].GetId() != "t-team" {
				t.Fatalf("stored events of the rogue = %v, want only t-team", evs)
			}
			audit := e.auditActions(t, store.ActionSentryRefused)
			if len(audit) != 1 || audit[0].GetActor() != "sentry:"+rogueSource || audit[0].GetDetail()["refused"] != "2" ||
				!strings.Contains(audit[0].GetDetail()["event_0"], `q-support: subject: sandbox "support" is outside the scope`) {
				t.Fatalf("audit of the refusals = %v", audit)
			}
			// Its own sandbox: quarantined as any.
			if a := e.postAs(t, tok.GetToken(), quarantine(rogueSource, "q-team", 4, "team-a-1")); a.Stored != 1 || len(a.Refused) != 0 {
				t.Fatalf("quarantine in scope: %+v", a)
			}
			if !getSandbox(t, e.admin, "team-a-1").GetFrozen() {
				t.Fatal("a quarantine in the token's scope did not freeze its sandbox")
			}
		})
	}
}

// TestSentryGapsBoundedAnswer: a source with more gaps than an answer
// lists gets the first 100 and the count of the rest, over HTTP and from
// ListGaps.
func TestSentryGapsBoundedAnswer(t *testing.T) {
	e := startSentry(t, "sqlite")
	var evs []ce
	for i := 1; i <= store.MaxSentryGaps+5; i++ { // 2, 4, …: gaps 1, 3, …
		evs = append(evs, toolAccess(watchdogSource, fmt.Sprintf("t%d", i), uint64(2*i), "support"))
	}
	body, err := json.Marshal(evs)
	if err != nil {
		t.Fatal(err)
	}
	code, raw := e.postRaw(t, body)
	var a struct {
		Stored   int         `json:"stored"`
		Gaps     [][2]uint64 `json:"gaps"`
		MoreGaps uint64      `json:"more_gaps"`
	}
	if err := json.Unmarshal(raw, &a); err != nil || code != http.StatusOK {
		t.Fatalf("answer %d %s: %v", code, raw, err)
	}
	if a.Stored != store.MaxSentryGaps+5 || len(a.Gaps) != store.MaxSentryGaps || a.Gaps[0] != [2]uint64{1, 1} || a.MoreGaps != 5 {
		t.Fatalf("answer: stored %d, %d gaps from %v, %d more; want %d, %d from [1 1], 5 more", a.Stored, len(a.Gaps), a.Gaps[0], a.MoreGaps, store.MaxSentryGaps+5, store.MaxSentryGaps)
	}
	res, err := e.sentry.ListGaps(t.Context(), &portcullisv1.ListSentryGapsRequest{Source: watchdogSource})
	if err != nil {
		t.Fatal(err)
	}
	if s := res.GetSources(); len(s) != 1 || len(s[0].GetGaps()) != store.MaxSentryGaps || s[0].GetMoreGaps() != 5 {
		t.Fatalf("ListGaps = %v, want %d gaps and 5 more", s, store.MaxSentryGaps)
	}
}

// postRaw sends a batch with the watchdog's token and returns the raw
// answer.
func (e *sentryEnv) postRaw(t *testing.T, body []byte) (int, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, e.gw.URL+gateway.SentryEventsPath, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/cloudevents-batch+json")
	req.Header.Set("Authorization", "Bearer "+e.token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, raw
}
