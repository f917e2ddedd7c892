// Package notify owns the gateway's notifications: the webhook (signed,
// queued, retried, never blocking what caused it), what each event says
// (a proposal needs a human, a proposal was decided, a call is held for
// review or was decided, the audit head moved, a Sentry quarantine was
// held), heard from the gateway's event stream
// (Handle), and the audit head logger that writes every head to the log.
// It imports store and internal/events; never the gateway root.
package notify

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/portcullis-dev/portcullis/internal/events"
	"github.com/portcullis-dev/portcullis/store"
)

// Notifications: a webhook (Slack-compatible JSON: a "text" line for
// people, ending with a link to the console's page about it, and an
// "event" object for programs) is called when a proposal needs a human,
// when one is decided and when a quarantine is held. The audit head goes
// to a webhook of its own (an archive, not a chat channel: it moves at
// every change), when one is configured. The body
// is signed: X-Portcullis-Signature is "sha256=" and the hex HMAC-SHA256,
// keyed with the webhook secret, of the timestamp header, a dot and the
// body, so a receiver can check both and refuse replays. Delivery is
// retried with backoff and never blocks what caused it: events wait in a
// bounded queue, and when it is full the newest are dropped and counted.

const (
	notifyQueue    = 256
	notifyAttempts = 5
	notifyTimeout  = 10 * time.Second
)

// Notification event kinds.
const (
	EventNeedsHuman = "proposal.needs_human"
	EventDecided    = "proposal.decided"
	EventAuditHead  = "audit.head"
	// EventQuarantineHeld: a Sentry quarantine was held by the circuit
	// breaker; the sandbox runs on until an operator decides.
	EventQuarantineHeld = "sentry.quarantine_held"
	// EventCallHeld: a review rule holds a call at a proxy until a
	// person decides it; EventCallDecided: it left held.
	EventCallHeld    = "call.held"
	EventCallDecided = "call.decided"
)

// notification is one webhook call's body.
type notification struct {
	Text  string         `json:"text"`
	Event map[string]any `json:"event"`
}

// Config configures a Notifier.
type Config struct {
	// URL is the webhook; empty: no webhook (New returns nil).
	URL string
	// ConsoleURL is the console's address as people reach it (the
	// gateway's external URL, "https://portcullis.example.com"): each
	// message links to its page there. Empty: messages carry no link.
	ConsoleURL string
	// Secret keys the HMAC signature of each call.
	Secret string
	// Backoff is the wait before the first retry (doubling). Default 500ms.
	Backoff time.Duration
	// Now is the clock of the timestamp header. Default time.Now.
	Now func() time.Time
}

// Notifier calls the webhook. A nil *Notifier (no webhook) sends nothing.
type Notifier struct {
	url     string
	console string // the console's base URL, without a trailing slash
	secret  []byte
	client  *http.Client
	log     *slog.Logger
	now     func() time.Time
	// backoff is the wait before the second attempt; it doubles.
	backoff time.Duration

	queue   chan notification
	dropped atomic.Uint64
	failed  atomic.Uint64
}

// New returns the webhook notifier, or nil when cfg has no URL. Its
// deliveries run in Run.
func New(cfg Config, log *slog.Logger) *Notifier {
	if cfg.URL == "" {
		return nil
	}
	if cfg.Backoff == 0 {
		cfg.Backoff = 500 * time.Millisecond
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Notifier{
		url:     cfg.URL,
		console: strings.TrimRight(cfg.ConsoleURL, "/"),
		secret:  []byte(cfg.Secret),
		client:  &http.Client{Timeout: notifyTimeout},
		log:     log,
		now:     cfg.Now,
		backoff: cfg.Backoff,
		queue:   make(chan notification, notifyQueue),
	}
}

// link is the console's URL of page ("#/proposal/3"), "" without a
// console URL.
func (n *Notifier) link(page string) string {
	if n.console == "" {
		return ""
	}
	return n.console + "/" + page
}

// send queues an event; it never waits. A nil notifier (no webhook)
// sends nothing. With a console URL, the text ends with the link to page
// and the event carries it as "url".
func (n *Notifier) send(kind, text, page string, fields map[string]any) {
	if n == nil {
		return
	}
	ev := map[string]any{"kind": kind}
	if u := n.link(page); u != "" {
		text += " — " + u
		ev["url"] = u
	}
	for k, v := range fields {
		ev[k] = v
	}
	select {
	case n.queue <- notification{Text: text, Event: ev}:
	default:
		if n.dropped.Add(1) == 1 {
			n.log.Warn("webhook queue full: dropping notifications", "url", n.url)
		}
	}
}

// Run delivers queued events until ctx ends.
func (n *Notifier) Run(ctx context.Context) {
	if n == nil {
		return
	}
	for {
		select {
		case <-ctx.Done():
			return
		case ev := <-n.queue:
			n.deliver(ctx, ev)
		}
	}
}

// deliver posts one event, retrying with backoff on errors and 5xx/429.
func (n *Notifier) deliver(ctx context.Context, ev notification) {
	body, err := json.Marshal(ev)
	if err != nil {
		n.log.Error("webhook event does not encode", "err", err)
		return
	}
	wait := n.backoff
	for attempt := 1; ; attempt++ {
		retry, err := n.post(ctx, body)
		if err == nil {
			return
		}
		if !retry || attempt == notifyAttempts || ctx.Err() != nil {
			n.failed.Add(1)
			n.log.Warn("webhook call failed; event dropped", "url", n.url, "kind", ev.Event["kind"], "attempts", attempt, "err", err)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait *= 2
	}
}

func (n *Notifier) post(ctx context.Context, body []byte) (retry bool, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, n.url, bytes.NewReader(body))
	if err != nil {
		return false, err
	}
	ts := strconv.FormatInt(n.now().Unix(), 10)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "portcullis-gateway")
	req.Header.Set("X-Portcullis-Timestamp", ts)
	req.Header.Set("X-Portcullis-Signature", "sha256="+webhookSignature(n.secret, ts, body))
	res, err := n.client.Do(req)
	if err != nil {
		return true, err
	}
	io.Copy(io.Discard, io.LimitReader(res.Body, 64<<10))
	res.Body.Close()
	switch {
	case res.StatusCode >= 200 && res.StatusCode < 300:
		return false, nil
	case res.StatusCode == http.StatusTooManyRequests || res.StatusCode >= 500:
		return true, fmt.Errorf("status %d", res.StatusCode)
	default:
		return false, fmt.Errorf("status %d (not retried)", res.StatusCode)
	}
}

// webhookSignature is the hex HMAC-SHA256 of "timestamp.body".
func webhookSignature(secret []byte, timestamp string, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(timestamp))
	m.Write([]byte{'.'})
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

// VerifyWebhook checks a webhook call's signature (for receivers and
// tests): the X-Portcullis-Signature and X-Portcullis-Timestamp header
// values and the body, with the shared secret.
func VerifyWebhook(secret []byte, signature, timestamp string, body []byte) bool {
	want := "sha256=" + webhookSignature(secret, timestamp, body)
	return hmac.Equal([]byte(want), []byte(signature))
}

// Handle is the webhook's subscriber to the gateway's event stream: it
// announces pending proposals, decided ones, held calls and their
// decisions, and held quarantines, queued
// (send never waits). A nil notifier (no webhook) announces nothing.
func (n *Notifier) Handle(e events.Event) {
	if n == nil {
		return
	}
	switch e := e.(type) {
	case events.ProposalPending:
		n.NeedsHuman(e)
	case events.ProposalDecided:
		n.Decided(e.Proposal)
	case events.CallHeld:
		n.CallHeld(e.Call)
	case events.CallDecided:
		n.CallDecided(e.Call)
	case events.SentryActed:
		if e.Action.Status == store.SentryHeld {
			n.QuarantineHeld(e.Action)
		}
	}
}

// NeedsHuman announces a pending proposal to its approvers.
func (n *Notifier) NeedsHuman(r events.ProposalPending) {
	p := r.Proposal
	if n == nil || p.Status != store.ProposalPending {
		return
	}
	var kinds []string
	for _, f := range r.Findings {
		kinds = append(kinds, f.Kind)
	}
	slices.Sort(kinds)
	kinds = slices.Compact(kinds)
	text := fmt.Sprintf("Proposal %d of sandbox %s needs approval (%d needed): %s", p.ID, p.Sandbox, r.Required, clip(p.Rationale))
	if len(kinds) > 0 {
		text += " — findings: " + strings.Join(kinds, ", ")
	}
	n.send(EventNeedsHuman, text, fmt.Sprintf("#/proposal/%d", p.ID), map[string]any{
		"proposal": uint64(p.ID), "sandbox": p.Sandbox, "findings": kinds,
		"approvals_required": uint32(r.Required), "resulting_hash": p.ResultingHash,
	})
}

// Decided announces that a proposal left pending.
func (n *Notifier) Decided(p store.Proposal) {
	if n == nil {
		return
	}
	text := fmt.Sprintf("Proposal %d of sandbox %s is %s", p.ID, p.Sandbox, p.Status)
	if p.Status == store.ProposalApplied {
		text += fmt.Sprintf(" as version %d", p.AppliedVersion)
	}
	if p.DecidedBy != "" {
		text += " by " + p.DecidedBy
	}
	if p.StatusReason != "" {
		text += ": " + clip(p.StatusReason)
	}
	n.send(EventDecided, text, fmt.Sprintf("#/proposal/%d", p.ID), map[string]any{
		"proposal": p.ID, "sandbox": p.Sandbox, "status": p.Status, "decided_by": p.DecidedBy,
		"applied_version": p.AppliedVersion, "reason": clip(p.StatusReason),
	})
}

// maxTextBytes bounds the text a webhook repeats from a proposal: the
// sandbox wrote it.
const maxTextBytes = 300

// clip shortens text an attacker may have sized.
func clip(s string) string {
	if len(s) > maxTextBytes {
		s = strings.ToValidUTF8(s[:maxTextBytes], "") + "…"
	}
	return s
}

// QuarantineHeld alerts that the quarantine circuit breaker held a Sentry
// quarantine: the sandbox was not frozen, and an operator must decide.
func (n *Notifier) QuarantineHeld(a store.SentryAction) {
	if n == nil {
		return
	}
	text := fmt.Sprintf("Sentry quarantine of sandbox %s held (event %s from %s): %s. Decide with `portcullis sentry decide %d --freeze|--dismiss --reason ...`",
		a.Sandbox, clip(a.EventID), clip(a.Source), clip(a.Reason), a.ID)
	n.send(EventQuarantineHeld, text, "#/incidents", map[string]any{
		"action": a.ID, "sandbox": a.Sandbox, "source": a.Source, "event_id": a.EventID, "reason": a.Reason,
	})
}

// callTarget is what a held call asks for: the MCP method and tool, or
// the HTTP method and path, at its endpoint; clipped, as the agent chose
// it.
func callTarget(c store.HeldCall) string {
	what := c.Method + " " + c.Path
	if c.MCPMethod != "" {
		what = strings.TrimSpace(c.MCPMethod + " " + c.Tool)
	}
	return clip(fmt.Sprintf("%s at %s:%d", what, c.Host, c.Port))
}

// callFields are the event fields both call notifications carry: never
// the arguments (a chat channel is no place for them), only their digest.
func callFields(c store.HeldCall) map[string]any {
	return map[string]any{
		"call": c.ID, "sandbox": c.Sandbox, "proxy": c.ProxyID, "host": c.Host, "port": c.Port,
		"method": c.Method, "path": clip(c.Path), "mcp_method": c.MCPMethod, "tool": clip(c.Tool),
		"arguments_digest": c.ArgumentsDigest, "policy_version": c.PolicyVersion, "status": c.Status,
		"deadline": c.Deadline.UTC().Format(time.RFC3339),
	}
}

// CallHeld pages a person: a review rule holds a call until its deadline.
func (n *Notifier) CallHeld(c store.HeldCall) {
	if n == nil || c.Status != store.CallHeld {
		return
	}
	text := fmt.Sprintf("Call %d of sandbox %s is held for review: %s (arguments %s), deadline %s. Decide with `portcullis calls approve|deny %d --reason ...`",
		c.ID, c.Sandbox, callTarget(c), c.ArgumentsDigest, c.Deadline.UTC().Format(time.RFC3339), c.ID)
	n.send(EventCallHeld, text, fmt.Sprintf("#/call/%d", c.ID), callFields(c))
}

// CallDecided announces that a held call left held: who decided it and
// why, or how it ended without a person.
func (n *Notifier) CallDecided(c store.HeldCall) {
	if n == nil {
		return
	}
	text := fmt.Sprintf("Call %d of sandbox %s (%s) is %s", c.ID, c.Sandbox, callTarget(c), c.Status)
	if c.DecidedBy != "" {
		text += " by " + clip(c.DecidedBy)
	}
	if c.Reason != "" {
		text += ": " + clip(c.Reason)
	}
	f := callFields(c)
	f["decided_by"], f["reason"] = c.DecidedBy, clip(c.Reason)
	if c.ProposalID != 0 {
		f["proposal"] = c.ProposalID
	}
	n.send(EventCallDecided, text, fmt.Sprintf("#/call/%d", c.ID), f)
}
