package lifecycle

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/portcullis-dev/portcullis/advisor"
	"github.com/portcullis-dev/portcullis/approval"
	"github.com/portcullis-dev/portcullis/internal/events"
	"github.com/portcullis-dev/portcullis/policy"
	"github.com/portcullis-dev/portcullis/store"
)

// Held calls: a call an allow rule with review.required holds at its
// proxy until a person decides it. The proxy files it (FileCall: checked,
// bounded per sandbox, stored held with its deadline); an operator or
// admin approves or denies it (DecideCall, under the approval rules with
// input.kind "call", a quorum if they ask); the proxy ends it when it no
// longer holds it (EndCall), a new run of the proxy fails its earlier
// run's calls (FailEarlierCalls), and the sweeps expire calls past their
// deadline and clear arguments after the retention (SweepCalls). Every
// change is told on the stream (events.CallHeld, CallDecided) after its
// commit.

// Defaults of Config's held-call bounds.
const (
	DefaultMaxHeldCalls      = 16
	DefaultHeldCallRetention = 24 * time.Hour
)

// Bounds on what a proxy files.
const (
	// MaxCallArguments bounds a held call's arguments (their JSON, or a
	// REST call's body).
	MaxCallArguments = policy.MaxReviewedArguments
	maxCallID        = 128
	maxCallText      = 4 << 10
	maxCallReason    = 1 << 10
)

// Reasons a held call ends without a person.
const (
	ReasonReviewTimeout  = "review_timeout"
	ReasonProxyRestarted = "proxy restarted"
)

// BusyError: the sandbox holds its bound of held calls already; the call
// is refused at once (the proxy answers the agent review_busy).
type BusyError struct {
	Sandbox string
	Max     int
}

func (e *BusyError) Error() string {
	return fmt.Sprintf("review_busy: sandbox %q holds %d calls for review already, its bound (--max-held-calls)", e.Sandbox, e.Max)
}

// CallArgumentsDigest is the digest a held call's arguments carry: for
// an MCP call (mcpMethod set), policy.ArgumentsDigest of them (the
// digest decision records carry: RFC 8785 form, so they must be a JSON
// object); for a REST call, "sha256:" and the hex SHA-256 of the body's
// bytes as sent, JSON or not.
func CallArgumentsDigest(mcpMethod, arguments string) (string, error) {
	if mcpMethod != "" {
		return policy.ArgumentsDigest([]byte(arguments))
	}
	sum := sha256.Sum256([]byte(arguments))
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

// checkCall refuses a filed call with a field out of bounds, naming the
// field as CallToHold spells it (under "call.").
func checkCall(c store.HeldCall, timeout time.Duration) error {
	for _, f := range []struct {
		name, v  string
		max      int
		required bool
	}{
		{"sandbox", c.Sandbox, maxCallID, true}, {"proxy_id", c.ProxyID, maxCallID, true},
		{"instance", c.Instance, maxCallID, true}, {"key", c.Key, maxCallID, true},
		{"binary", c.Binary, maxCallText, false}, {"host", c.Host, 253, true},
		{"method", c.Method, 32, true}, {"path", c.Path, maxCallText, true},
		{"mcp_method", c.MCPMethod, 128, false}, {"tool", c.Tool, maxCallText, false},
		{"arguments_digest", c.ArgumentsDigest, 80, true},
		{"entry", c.Entry, 256, false}, {"rule", c.Rule, 256, false}, {"trace_id", c.TraceID, 64, false},
		{"arguments_json", c.ArgumentsJSON, MaxCallArguments, false},
	} {
		switch {
		case f.required && f.v == "":
			return Field("call."+f.name, "is empty")
		case len(f.v) > f.max:
			return Field("call."+f.name, "is %d bytes, over %d", len(f.v), f.max)
		case !utf8.ValidString(f.v) || strings.ContainsRune(f.v, 0):
			return Field("call."+f.name, "is not valid UTF-8 text")
		}
	}
	switch {
	case c.Port < 1 || c.Port > 65535:
		return Field("call.port", "%d is not a port", c.Port)
	case c.PolicyVersion < 1:
		return Field("call.policy_version", "is 0: a call is held by a version's rule")
	case c.MCPMethod == "tools/call" && c.Tool == "":
		return Field("call.tool", "is empty for a tools/call")
	case timeout <= 0:
		return Field("call.timeout", "is %v: a held call waits for a positive time", timeout)
	case timeout > policy.MaxReviewTimeout:
		return Field("call.timeout", "is %v, over the most a call is held (%v)", timeout, policy.MaxReviewTimeout)
	}
	digest, err := CallArgumentsDigest(c.MCPMethod, c.ArgumentsJSON)
	if err != nil {
		return Field("call.arguments_json", "%v", err)
	}
	if digest != c.ArgumentsDigest {
		return Field("call.arguments_digest", "is %s, but the arguments' digest is %s", c.ArgumentsDigest, digest)
	}
	return nil
}

// now is the lifecycle's clock at the stores' precision (Postgres keeps
// microseconds), so a call read back equals the call returned.
func (l *Lifecycle) now() time.Time { return l.cfg.Now().UTC().Truncate(time.Microsecond) }

// FileCall stores c — a call a proxy of c.Sandbox holds — held until its
// deadline (now plus timeout), and returns it with filed true. A call its
// proxy filed before under the same (sandbox, proxy, instance, key) is
// returned as stored, filed false (a stream opened again re-attaches). A
// call of another instance of the proxy is the proxy restarted: its
// calls held are failed first. Errors: a FieldError naming the field, a
// NotFoundError for an unknown sandbox, a PreconditionError for a frozen
// one, a BusyError past MaxHeldCalls.
func (l *Lifecycle) FileCall(ctx context.Context, c store.HeldCall, timeout time.Duration) (store.HeldCall, bool, error) {
	if err := checkCall(c, timeout); err != nil {
		return store.HeldCall{}, false, err
	}
	var failed []store.HeldCall
	filed := false
	out, err := store.Transact(ctx, l.st.Driver, func(tx store.Tx) (store.HeldCall, error) {
		filed, failed = false, nil
		sb, err := tx.LockSandbox(ctx, c.Sandbox)
		if err != nil {
			return store.HeldCall{}, Missing(err, "sandbox %q not found", c.Sandbox)
		}
		if sb.Frozen {
			return store.HeldCall{}, &PreconditionError{fmt.Sprintf("sandbox %q is frozen (%s): it holds no calls", sb.Name, sb.FrozenReason)}
		}
		if cur, err := tx.HeldCallByKey(ctx, c.Sandbox, c.ProxyID, c.Instance, c.Key); err == nil || !errors.Is(err, store.ErrNotFound) {
			return cur, err
		}
		now := l.now()
		if failed, err = tx.FailHeldCalls(ctx, c.Sandbox, c.ProxyID, c.Instance, ReasonProxyRestarted, now); err != nil {
			return store.HeldCall{}, err
		}
		n, err := tx.CountHeldCalls(ctx, c.Sandbox)
		if err != nil {
			return store.HeldCall{}, err
		}
		if n >= l.cfg.MaxHeldCalls {
			return store.HeldCall{}, &BusyError{Sandbox: c.Sandbox, Max: l.cfg.MaxHeldCalls}
		}
		c.ID, c.Status, c.RequestedAt, c.Deadline = 0, store.CallHeld, now, now.Add(timeout)
		c.DecidedAt, c.DecidedBy, c.Reason, c.ProposalID = time.Time{}, "", "", 0
		filed = true
		return tx.InsertHeldCall(ctx, c)
	})
	if err != nil {
		return store.HeldCall{}, false, err
	}
	l.callsDecided(ctx, failed)
	if filed {
		l.log.InfoContext(ctx, "call held", "sandbox", out.Sandbox, "call", out.ID, "proxy", out.ProxyID, "tool", out.Tool, "deadline", out.Deadline)
		l.cfg.Stream.Publish(events.CallHeld{Call: out})
	}
	return out, filed, nil
}

// callsDecided tells the stream of calls that left held.
func (l *Lifecycle) callsDecided(ctx context.Context, calls []store.HeldCall) {
	for _, c := range calls {
		l.log.InfoContext(ctx, "held call ended", "sandbox", c.Sandbox, "call", c.ID, "status", c.Status, "reason", c.Reason)
		l.cfg.Stream.Publish(events.CallDecided{Call: c})
	}
}

// FailEarlierCalls fails the held calls of the sandbox's proxy proxyID
// that another instance than instance filed: the proxy restarted (a
// policy stream's hello says so), and its earlier run's calls died with
// it.
func (l *Lifecycle) FailEarlierCalls(ctx context.Context, sandbox, proxyID, instance string) error {
	if instance == "" {
		return nil // a proxy that names no instance holds no calls
	}
	failed, err := store.Transact(ctx, l.st.Driver, func(tx store.Tx) ([]store.HeldCall, error) {
		return tx.FailHeldCalls(ctx, sandbox, proxyID, instance, ReasonProxyRestarted, l.now())
	})
	if err != nil {
		return err
	}
	l.callsDecided(ctx, failed)
	return nil
}

// EndCall records that the proxy no longer holds call id (of sandbox):
// failed with its reason, decided by "proxy". A call decided meanwhile
// keeps its decision, returned.
func (l *Lifecycle) EndCall(ctx context.Context, sandbox string, id int64, reason string) (store.HeldCall, error) {
	switch {
	case reason == "":
		return store.HeldCall{}, Field("ended.reason", "is empty: say why the call ended")
	case len(reason) > maxCallReason || !utf8.ValidString(reason) || strings.ContainsRune(reason, 0):
		return store.HeldCall{}, Field("ended.reason", "is not UTF-8 text of at most %d bytes", maxCallReason)
	}
	c, err := l.st.GetHeldCall(ctx, id)
	if err != nil || c.Sandbox != sandbox {
		return store.HeldCall{}, Missing(store.ErrNotFound, "held call %d not found", id)
	}
	c.Status, c.DecidedAt, c.DecidedBy, c.Reason = store.CallFailed, l.now(), "proxy", reason
	out, err := l.st.DecideHeldCall(ctx, c)
	if errors.Is(err, store.ErrConflict) {
		return l.st.GetHeldCall(ctx, id)
	}
	if err != nil {
		return store.HeldCall{}, err
	}
	l.callsDecided(ctx, []store.HeldCall{out})
	return out, nil
}

// SweepCalls expires the held calls past their deadline (reason
// review_timeout) and clears the arguments of calls decided more than
// HeldCallRetention ago.
func (l *Lifecycle) SweepCalls(ctx context.Context) error {
	now := l.now()
	expired, err := l.st.ExpireHeldCalls(ctx, now, ReasonReviewTimeout)
	if err != nil {
		return err
	}
	l.callsDecided(ctx, expired)
	if _, err := l.st.ClearHeldCallArguments(ctx, now.Add(-l.cfg.HeldCallRetention)); err != nil {
		return err
	}
	return nil
}

// CallDecision is a person's answer to a held call.
type CallDecision struct {
	ID      int64
	Approve bool
	// Reason is required.
	Reason string
	// ArgumentsDigest, if set, must be the call's: the digest the decider
	// was shown.
	ArgumentsDigest string
	// Remember (with Approve) also files a proposal for a rule that
	// allows exactly this call's arguments without review.
	Remember bool
	// Decider is the token's name, Role its role, Sandbox a sandbox
	// token's sandbox; Actor names it in the audit log.
	Decider, Role, Sandbox, Actor string
}

// DecideCall approves or denies held call d.ID, as the approval rules
// (input.kind "call") allow d's decider, and returns the call as it now
// is: still held when an approval leaves the rules' quorum unmet.
// Errors: FieldError (no reason), NotFoundError, ConflictError (the
// digest shown is not the call's), PermissionError (the rules refuse the
// decider), PreconditionError (the call is no longer held — decided,
// expired now if its deadline passed — or the decider approved already).
func (l *Lifecycle) DecideCall(ctx context.Context, d CallDecision) (store.HeldCall, error) {
	if strings.TrimSpace(d.Reason) == "" {
		return store.HeldCall{}, Field("reason", "is required: say why")
	}
	if len(d.Reason) > maxCallReason {
		return store.HeldCall{}, Field("reason", "is %d bytes, over %d", len(d.Reason), maxCallReason)
	}
	c, err := l.st.GetHeldCall(ctx, d.ID)
	if err != nil {
		return store.HeldCall{}, Missing(err, "held call %d not found", d.ID)
	}
	if d.ArgumentsDigest != "" && d.ArgumentsDigest != c.ArgumentsDigest {
		return store.HeldCall{}, &ConflictError{fmt.Sprintf("held call %d has arguments digest %s, not %s: review the call again", c.ID, c.ArgumentsDigest, d.ArgumentsDigest)}
	}
	if err := l.stillHeld(ctx, c); err != nil {
		return store.HeldCall{}, err
	}
	approvals, err := l.st.CallApprovals(ctx, c.ID)
	if err != nil {
		return store.HeldCall{}, err
	}
	decision, quorum, err := l.judgeCall(ctx, c, d, approvals)
	if err != nil {
		return store.HeldCall{}, err
	}
	out, err := l.recordCallDecision(ctx, c, d, decision.Required, quorum)
	if err != nil {
		return store.HeldCall{}, err
	}
	if out.Status == store.CallHeld {
		return out, nil
	}
	l.callsDecided(ctx, []store.HeldCall{out})
	if d.Remember && out.Status == store.CallApproved {
		return l.rememberCall(ctx, out, d)
	}
	return out, nil
}

// stillHeld refuses a decision on a call that is no longer held; a call
// past its deadline is expired now.
func (l *Lifecycle) stillHeld(ctx context.Context, c store.HeldCall) error {
	if c.Status == store.CallHeld && l.now().Before(c.Deadline) {
		return nil
	}
	if c.Status == store.CallHeld {
		if err := l.SweepCalls(ctx); err != nil {
			return err
		}
		if cur, err := l.st.GetHeldCall(ctx, c.ID); err == nil {
			c = cur
		}
	}
	return &PreconditionError{fmt.Sprintf("held call %d is %s (%s): only a held call can be decided", c.ID, c.Status, c.Reason)}
}

// judgeCall runs the approval rules on deciding c: refusals are the
// decider's PermissionError; an approver who approved c before is
// refused. quorum says whether the approvals with d's meet the rules'.
func (l *Lifecycle) judgeCall(ctx context.Context, c store.HeldCall, d CallDecision, approvals []store.CallApproval) (decision approval.Decision, quorum bool, err error) {
	sb, err := l.st.GetSandbox(ctx, c.Sandbox)
	if err != nil {
		return decision, false, Missing(err, "sandbox %q not found", c.Sandbox)
	}
	in := approval.Input{
		Kind: approval.KindCall,
		Call: approval.CallInput{
			ID: uint64(c.ID), Sandbox: c.Sandbox, Proxy: c.ProxyID, Binary: c.Binary,
			Endpoint: c.Host + ":" + strconv.Itoa(c.Port) + c.Path, Method: c.Method, MCPMethod: c.MCPMethod, Tool: c.Tool,
			ArgumentsDigest: c.ArgumentsDigest, PolicyVersion: uint32(c.PolicyVersion), Entry: c.Entry, Rule: c.Rule,
		},
		Decider:   approval.DeciderInput{Name: d.Decider, Role: d.Role, Sandbox: d.Sandbox},
		Findings:  []approval.FindingInput{},
		Sandbox:   approval.SandboxInput{Name: sb.Name, CurrentVersion: uint32(sb.CurrentVersion), CredentialedHosts: sb.CredentialedHosts, Providers: sb.Providers, HasBoundary: len(sb.Boundary) > 0},
		Approvers: []string{},
	}
	for _, a := range approvals {
		in.Approvers = append(in.Approvers, a.Approver)
		if d.Approve && a.Approver == d.Decider {
			return decision, false, alreadyApprovedCall(d.Decider, c.ID)
		}
	}
	compiled, version := l.rules.current()
	decision = compiled.Decide(ctx, in)
	if decision.Fallback {
		l.log.WarnContext(ctx, "approval rules failed on a held call; one approval decides it", "call", c.ID, "rules_version", version, "notes", decision.Notes)
	}
	if len(decision.Refusals) > 0 {
		return decision, false, &PermissionError{fmt.Sprintf("the approval rules refuse %s deciding held call %d: %s", d.Decider, c.ID, strings.Join(decision.Refusals, "; "))}
	}
	return decision, decision.Approved(append(in.Approvers, d.Decider)), nil
}

func alreadyApprovedCall(decider string, id int64) error {
	return &PreconditionError{fmt.Sprintf("%s already approved held call %d: another approver is needed", decider, id)}
}

// recordCallDecision writes d in one transaction with its audit entry: a
// denial, or an approval that meets the quorum, decides the call (only
// if it is still held); an approval short of it is recorded, the call
// still held.
func (l *Lifecycle) recordCallDecision(ctx context.Context, c store.HeldCall, d CallDecision, required int, quorum bool) (store.HeldCall, error) {
	action, status := store.ActionCallDeny, store.CallDenied
	if d.Approve {
		action, status = store.ActionCallApprove, store.CallApproved
	}
	out, err := store.Transact(ctx, l.st.Driver, func(tx store.Tx) (store.HeldCall, error) {
		now := l.now()
		cur := c
		if d.Approve {
			if err := tx.InsertCallApproval(ctx, c.ID, store.CallApproval{Approver: d.Decider, Reason: d.Reason, CreatedAt: now}); err != nil {
				return c, err
			}
		}
		if !d.Approve || quorum {
			cur.Status, cur.DecidedAt, cur.DecidedBy, cur.Reason = status, now, d.Decider, d.Reason
			var err error
			if cur, err = tx.DecideHeldCall(ctx, cur); err != nil {
				return c, err
			}
		}
		return cur, store.Audit(ctx, tx, store.AuditEntry{
			Actor: d.Actor, Action: action, Sandbox: c.Sandbox, Target: strconv.FormatInt(c.ID, 10),
			Detail: map[string]string{
				"status": cur.Status, "reason": clip(d.Reason), "arguments_digest": c.ArgumentsDigest,
				"policy_version": strconv.FormatInt(c.PolicyVersion, 10), "proxy": c.ProxyID, "tool": c.Tool,
				"required": strconv.Itoa(required),
			},
		})
	})
	switch {
	case errors.Is(err, store.ErrAlreadyExists):
		return c, alreadyApprovedCall(d.Decider, c.ID)
	case errors.Is(err, store.ErrConflict):
		cur, gerr := l.st.GetHeldCall(ctx, c.ID)
		if gerr != nil {
			return c, gerr
		}
		return c, &PreconditionError{fmt.Sprintf("held call %d is %s (%s): only a held call can be decided", c.ID, cur.Status, cur.Reason)}
	case err != nil:
		return c, fmt.Errorf("decide held call %d: %w", c.ID, err)
	}
	l.log.InfoContext(ctx, "held call decided", "sandbox", out.Sandbox, "call", out.ID, "status", out.Status, "decider", d.Decider)
	return out, nil
}

// rememberCall files, for approved call c, the proposal for a rule that
// allows exactly its arguments without review (advisor.FromHeldCall),
// through the intake every proposal takes (the prover, the approval
// rules), proposed by its approver; and records its id on the call. The
// approval stands whatever happens here: a proposal that cannot be filed
// is a PreconditionError saying so.
func (l *Lifecycle) rememberCall(ctx context.Context, c store.HeldCall, d CallDecision) (store.HeldCall, error) {
	notFiled := func(err error) (store.HeldCall, error) {
		return c, &PreconditionError{fmt.Sprintf("held call %d is approved, but no proposal to remember it was filed: %v", c.ID, err)}
	}
	pol, err := l.CurrentPolicy(ctx, c.Sandbox)
	if err != nil {
		return notFiled(err)
	}
	prop, err := advisor.FromHeldCall(pol, advisor.DenialRecord{
		Binary: c.Binary, Host: c.Host, Port: c.Port, HTTPMethod: c.Method, Path: c.Path, MCPMethod: c.MCPMethod, Tool: c.Tool,
		Entry: c.Entry, Arguments: json.RawMessage(c.ArgumentsJSON), DevAllowLoopback: l.cfg.DevAllowLoopback,
	})
	if err != nil {
		return notFiled(err)
	}
	// Through the same strict reader as a document: the same bounds hold.
	doc, err := prop.Encode()
	if err == nil {
		prop, err = advisor.ParseProposal(doc)
	}
	if err != nil {
		return notFiled(err)
	}
	sub, err := l.Submit(ctx, Submission{Sandbox: c.Sandbox, Proposer: d.Decider, Actor: d.Actor, Proposal: prop})
	if err != nil {
		return notFiled(err)
	}
	if err := l.st.SetHeldCallProposal(ctx, c.ID, sub.Proposal.ID); err != nil {
		return c, err
	}
	c.ProposalID = sub.Proposal.ID
	return c, nil
}
