//go:build drills

package gateway

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect/v2"

	"github.com/portcullis-dev/portcullis/internal/pgtest"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

// proposalDoc adds one new entry, unique to (tag, n), for python3: a
// narrow proposal an operator must approve.
func proposalDoc(tag string, n int) string {
	return fmt.Sprintf(`rationale: drill %[1]s %[2]d
operations:
  - add_rule:
      name: drill-%[1]s-%[2]d
      rule: { endpoints: [ { host: %[1]s-%[2]d.drill.example.com, port: 443, protocol: rest, rules: [ { allow: { method: GET, path: "/v1/*" } } ] } ], binaries: [ { path: /usr/bin/python3 } ] }
`, tag, n)
}

// burst is the drill's workload: setters store whole documents with
// SetPolicy, approvers submit proposals with a sandbox's token and
// approve them with their operator token, each call through the next
// replica in turn, until stop.
type burst struct {
	t         *testing.T
	replicas  []*gateway
	sandboxes []string
	tokens    map[string]string // sandbox → its token
	operators []string          // operator tokens, one per approver
	setters   int
	led       ledger
	ops       atomic.Int64 // calls answered, acked or not
}

func (b *burst) run(ctx context.Context) *sync.WaitGroup {
	var wg sync.WaitGroup
	for k := range b.setters {
		wg.Go(func() { b.setter(ctx, k) })
	}
	for k := range b.operators {
		wg.Go(func() { b.approver(ctx, k) })
	}
	return &wg
}

func (b *burst) setter(ctx context.Context, k int) {
	for i := 0; ctx.Err() == nil; i++ {
		sb := b.sandboxes[(k+i)%len(b.sandboxes)]
		doc := setDoc(fmt.Sprintf("s%d", k), i)
		op := setOp{sandbox: sb, hash: docHash(b.t, doc)}
		c := newClient(b.replicas[(k+i)%len(b.replicas)].url, adminToken)
		start := time.Now()
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 20*time.Second)
		res, err := c.policy.SetPolicy(cctx, &portcullisv1.SetPolicyRequest{Sandbox: sb, Document: doc})
		cancel()
		b.ops.Add(1)
		op.sent, op.done = start, time.Now()
		if err != nil {
			op.err = err
		} else {
			op.acked, op.version = true, res.GetVersion()
			if res.GetHash() != op.hash || res.GetUnchanged() {
				b.t.Errorf("set %s answered hash %s unchanged=%v, want %s", sb, res.GetHash(), res.GetUnchanged(), op.hash)
			}
		}
		b.led.set(op, time.Since(start))
		if err != nil {
			pause(ctx) // a dead replica refuses at once: do not spin
		}
	}
}

// approver submits and approves one proposal at a time; a sandbox whose
// proposal budget (the rate limit) is spent is left for the next.
func (b *burst) approver(ctx context.Context, k int) {
	spent := map[string]bool{}
	for i := 0; ctx.Err() == nil; i++ {
		sb := b.sandboxes[(k+i)%len(b.sandboxes)]
		if spent[sb] {
			if len(spent) == len(b.sandboxes) {
				pause(ctx)
			}
			continue
		}
		propose := newClient(b.replicas[i%len(b.replicas)].url, b.tokens[sb])
		approve := newClient(b.replicas[(i+1)%len(b.replicas)].url, b.operators[k])
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 20*time.Second)
		start := time.Now()
		p, err := propose.advisor.SubmitProposal(cctx, &portcullisv1.SubmitProposalRequest{Document: proposalDoc(fmt.Sprintf("a%d", k), i)})
		b.ops.Add(1)
		if err != nil {
			cancel()
			limited := connect.CodeOf(err) == connect.CodeResourceExhausted
			spent[sb] = spent[sb] || limited
			b.led.submitFailed(limited)
			pause(ctx)
			continue
		}
		op := approvalOp{sandbox: sb, id: p.GetId()}
		if p.GetStatus() != "applied" {
			start = time.Now()
			p, err = b.approve(cctx, approve, p)
			b.ops.Add(1)
		}
		cancel()
		switch {
		case err != nil:
			op.err = err
		case p.GetStatus() == "applied":
			op.acked, op.version, op.hash = true, p.GetAppliedVersion(), p.GetResultingHash()
		default:
			// One approval is the quorum here: an approval answered
			// success must have applied the proposal.
			op.err = fmt.Errorf("approved proposal %d is %s", p.GetId(), p.GetStatus())
			b.t.Errorf("approval of proposal %d answered success, status %s (approvals %d of %d): approved and not applied",
				p.GetId(), p.GetStatus(), len(p.GetApprovals()), p.GetApprovalsRequired())
		}
		b.led.approval(op, time.Since(start))
		if err != nil {
			pause(ctx)
		}
	}
}

// approve approves p's resulting hash; when the proposal moved since it
// was read (a set re-based it), it reads it again and approves the new
// hash, as a person would after looking again.
func (b *burst) approve(ctx context.Context, c client, p *portcullisv1.Proposal) (*portcullisv1.Proposal, error) {
	for attempt := 1; ; attempt++ {
		res, err := c.approval.ApproveProposal(ctx, &portcullisv1.ApproveProposalRequest{Id: p.GetId(), Reason: "drill", ResultingHash: p.GetResultingHash()})
		if err == nil || connect.CodeOf(err) != connect.CodeAborted || attempt == 5 {
			return res, err
		}
		if p, err = c.approval.GetProposal(ctx, &portcullisv1.GetProposalRequest{Id: p.GetId()}); err != nil {
			return nil, err
		}
		if p.GetStatus() != "pending" {
			return p, nil
		}
	}
}

// pause waits a little after an error, or until ctx ends.
func pause(ctx context.Context) {
	select {
	case <-ctx.Done():
	case <-time.After(50 * time.Millisecond):
	}
}

// TestKill9ReplicaDuringBurst: two gateway replicas on one PostgreSQL
// database; three setters and three approvers call both replicas in turn;
// mid-burst one replica gets SIGKILL and is started again on its address
// while the burst goes on.
//
// Asserts: every call that returned success is in the history after the
// restart (acked = found, for sets and approvals); no errored call is
// half-applied (a version without its audit entry, an applied proposal
// without its version or the reverse, a proposal approved by its quorum
// and never applied, or an approval answered success that did not apply
// it); versions run without gaps or doubles; the audit chain verifies. Prints the restart-to-ready time, the counts, and the
// latency of acked calls.
func TestKill9ReplicaDuringBurst(t *testing.T) {
	rounds, before, after, nSandboxes := 1, 3*time.Second, 3*time.Second, 10
	if long() {
		rounds, before, after, nSandboxes = 5, 10*time.Second, 10*time.Second, 40
	}
	dbURL := pgtest.Database(t)
	env := []string{"PORTCULLIS_DATABASE_URL=" + dbURL}
	a := newGateway(t, "replica-a", env)
	a.start()
	b := newGateway(t, "replica-b", env)
	b.start()
	admin := newClient(a.url, adminToken)

	bu := &burst{t: t, replicas: []*gateway{a, b}, tokens: map[string]string{}, setters: 3}
	for i := range nSandboxes {
		sb := fmt.Sprintf("sb-%d", i)
		bu.sandboxes = append(bu.sandboxes, sb)
		bu.tokens[sb] = createSandbox(t, admin, sb, setDoc("init", i))
	}
	for k := range 3 {
		bu.operators = append(bu.operators, createOperator(t, admin, fmt.Sprintf("approver-%d", k)))
	}

	ctx, stop := context.WithCancel(t.Context())
	wg := bu.run(ctx)
	var converge durations
	for r := range rounds {
		time.Sleep(before)
		victim := bu.replicas[r%2]
		opsAtKill := bu.ops.Load()
		victim.kill9()
		killed := time.Now()
		took := victim.restart()
		converge = append(converge, took)
		figure(t, "kill9", "round", r+1, "replica", victim.name, "ops_before_kill", opsAtKill, "down_ms", time.Since(killed).Milliseconds(), "converge_ms", took.Milliseconds())
	}
	time.Sleep(after)
	stop()
	wg.Wait()

	// Both replicas answer, and each reads the same history.
	for _, g := range bu.replicas {
		if !g.ready() {
			t.Fatalf("%s not ready after the burst", g.name)
		}
	}
	for k, v := range bu.led.errorKinds() {
		t.Logf("errored calls %s: %s", k, v)
	}
	for _, g := range bu.replicas {
		g.internalErrors(t)
	}
	// Re-bases triggered by the last commits still write; then both
	// replicas read the same history.
	settle(t, admin)
	h := readHistory(t, newClient(a.url, adminToken), bu.sandboxes)
	hb := readHistory(t, newClient(b.url, adminToken), bu.sandboxes)
	if hb.auditHead != h.auditHead || hb.auditEntries != h.auditEntries {
		t.Errorf("replicas disagree on the audit head: %s/%d and %s/%d", h.auditHead, h.auditEntries, hb.auditHead, hb.auditEntries)
	}
	c := h.verify(&bu.led)
	for _, p := range c.problems {
		t.Error(p)
	}
	ackedSets, errSets, ackedApprovals, errApprovals := bu.led.counts()
	figure(t, "kill9", "acked_sets", ackedSets, "found_sets", c.foundSets, "acked_approvals", ackedApprovals, "found_approvals", c.foundApprovals,
		"acked", ackedSets+ackedApprovals, "found", c.foundSets+c.foundApprovals)
	figure(t, "kill9", "errored_sets", errSets, "errored_approvals", errApprovals, "errored_committed", c.erroredCommitted, "errored_absent", c.erroredAbsent,
		"submit_errors", bu.led.submitErrs, "rate_limited", bu.led.refused, "half_applied", len(c.problems))
	figure(t, "kill9", "versions", c.versions, "audit_entries", h.auditEntries, "audit_verified", true)
	figure(t, "kill9", "converge", converge.summary())
	figure(t, "kill9", "acked_latency", bu.led.latency.summary())
	if ackedSets == 0 || ackedApprovals == 0 {
		t.Errorf("the burst acked %d sets and %d approvals: the drill exercised nothing", ackedSets, ackedApprovals)
	}
}
