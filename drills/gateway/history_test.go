//go:build drills

package gateway

import (
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect/v2"

	"github.com/portcullis-dev/portcullis/policy"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

// A ledger is what the drill's clients were told: every write they sent,
// with its answer (acked: the call returned success) or its error.
type ledger struct {
	mu        sync.Mutex
	sets      []setOp
	approvals []approvalOp
	// submitErrs counts proposal submissions that returned an error
	// (rate limits aside); refused counts the rate-limited ones.
	submitErrs, refused int
	// latency of the acked calls.
	latency durations
}

// setOp is one SetPolicy call.
type setOp struct {
	sandbox, hash string // hash of the document sent
	acked         bool
	version       uint32 // answered, when acked
	err           error
	sent, done    time.Time
}

// firstAckedSince is how long after t the first set sent after t was
// acked (false: none was).
func (l *ledger) firstAckedSince(t time.Time) (time.Duration, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var first time.Time
	for _, s := range l.sets {
		if s.acked && s.sent.After(t) && (first.IsZero() || s.done.Before(first)) {
			first = s.done
		}
	}
	return first.Sub(t), !first.IsZero()
}

// approvalOp is one proposal's approval (or auto-approval at submission).
type approvalOp struct {
	sandbox string
	id      uint64
	acked   bool   // the answer said applied
	version uint32 // applied_version answered
	hash    string // resulting_hash answered
	err     error
}

func (l *ledger) set(op setOp, took time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sets = append(l.sets, op)
	if op.acked {
		l.latency = append(l.latency, took)
	}
}

func (l *ledger) approval(op approvalOp, took time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.approvals = append(l.approvals, op)
	if op.acked {
		l.latency = append(l.latency, took)
	}
}

func (l *ledger) submitFailed(rateLimited bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if rateLimited {
		l.refused++
	} else {
		l.submitErrs++
	}
}

// counts are the ledger's totals: acked and errored calls.
func (l *ledger) counts() (ackedSets, errSets, ackedApprovals, errApprovals int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range l.sets {
		if s.acked {
			ackedSets++
		} else {
			errSets++
		}
	}
	for _, a := range l.approvals {
		if a.acked {
			ackedApprovals++
		} else {
			errApprovals++
		}
	}
	return
}

// errorKinds counts the errored calls by Connect code, and keeps one
// message of each, for the drill's log.
func (l *ledger) errorKinds() map[string]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	n, msg := map[string]int{}, map[string]string{}
	note := func(what string, err error) {
		k := what + "/" + connect.CodeOf(err).String()
		n[k]++
		msg[k] = err.Error()
	}
	for _, s := range l.sets {
		if !s.acked {
			note("set", s.err)
		}
	}
	for _, a := range l.approvals {
		if !a.acked {
			note("approve", a.err)
		}
	}
	out := map[string]string{}
	for k, c := range n {
		out[k] = fmt.Sprintf("%d, e.g. %s", c, msg[k])
	}
	return out
}

// docHash is the hash the gateway gives doc.
func docHash(t *testing.T, doc string) string {
	t.Helper()
	p, _, err := policy.Parse([]byte(doc))
	if err != nil {
		t.Fatalf("drill document does not parse: %v", err)
	}
	return p.Hash()
}

// history is what the store holds after a drill, read through the API.
type history struct {
	versions  map[string][]*portcullisv1.PolicyVersion // by sandbox, oldest first
	current   map[string]uint32
	proposals map[uint64]*portcullisv1.Proposal
	// versionAudit counts the policy.set audit entries of each
	// sandbox/version whose after_hash is that version's hash.
	versionAudit map[string]int
	// applyAudit counts proposal.apply entries by proposal id.
	applyAudit   map[uint64]int
	auditEntries int64
	auditHead    string
}

// readHistory verifies the audit chain (a failure is fatal: the chain
// must verify after any fault) and reads every version, proposal and
// audit entry of sandboxes.
func readHistory(t *testing.T, c client, sandboxes []string) history {
	t.Helper()
	ctx, cancel := callCtx(t)
	defer cancel()
	v, err := c.audit.VerifyAudit(ctx, &portcullisv1.VerifyAuditRequest{})
	if err != nil {
		t.Fatalf("verify audit: %v", err)
	}
	if !v.GetOk() {
		t.Fatalf("the audit chain does not verify: entry %d: %s", v.GetFirstBadSeq(), v.GetProblem())
	}
	h := history{
		versions: map[string][]*portcullisv1.PolicyVersion{}, current: map[string]uint32{},
		proposals: map[uint64]*portcullisv1.Proposal{}, versionAudit: map[string]int{}, applyAudit: map[uint64]int{},
		auditEntries: v.GetEntries(), auditHead: v.GetHeadHash(),
	}
	for _, sb := range sandboxes {
		vs, err := c.policy.ListPolicyVersions(ctx, &portcullisv1.ListPolicyVersionsRequest{Sandbox: sb})
		if err != nil {
			t.Fatalf("history of %s: %v", sb, err)
		}
		h.versions[sb] = vs.GetVersions()
		s, err := c.sandbox.GetSandbox(ctx, &portcullisv1.GetSandboxRequest{Name: sb})
		if err != nil {
			t.Fatalf("get sandbox %s: %v", sb, err)
		}
		h.current[sb] = s.GetCurrentVersion()
		ps, err := c.approval.ListProposals(ctx, &portcullisv1.ApprovalServiceListProposalsRequest{Sandbox: sb, Limit: 1000})
		if err != nil {
			t.Fatalf("proposals of %s: %v", sb, err)
		}
		for _, p := range ps.GetProposals() {
			if p.GetStatus() == "pending" {
				// approvals_required is the rules' answer of the moment.
				if p, err = c.approval.GetProposal(ctx, &portcullisv1.GetProposalRequest{Id: p.GetId()}); err != nil {
					t.Fatalf("proposal %d: %v", p.GetId(), err)
				}
			}
			h.proposals[p.GetId()] = p
		}
	}
	hashOf := map[string]string{}
	for sb, vs := range h.versions {
		for _, pv := range vs {
			hashOf[versionKey(sb, pv.GetVersion())] = pv.GetHash()
		}
	}
	var before int64
	for {
		res, err := c.audit.ListAudit(ctx, &portcullisv1.ListAuditRequest{Limit: 1000, BeforeSeq: before})
		if err != nil {
			t.Fatalf("list audit: %v", err)
		}
		es := res.GetEntries()
		for _, e := range es {
			switch e.GetAction() {
			case "policy.set":
				v, _ := strconv.ParseUint(e.GetDetail()["version"], 10, 32)
				k := versionKey(e.GetSandbox(), uint32(v))
				if hashOf[k] == e.GetAfterHash() {
					h.versionAudit[k]++
				}
			case "proposal.apply":
				id, _ := strconv.ParseUint(e.GetTarget(), 10, 64)
				h.applyAudit[id]++
			}
		}
		if len(es) < 1000 {
			break
		}
		before = es[len(es)-1].GetSeq()
	}
	return h
}

func versionKey(sandbox string, v uint32) string {
	return sandbox + "@" + strconv.FormatUint(uint64(v), 10)
}

// check is what a drill found: the counts it prints, and every broken
// invariant.
type check struct {
	ackedSets, foundSets           int
	ackedApprovals, foundApprovals int
	// errored calls whose change is in the history (the answer was lost)
	// and those that left nothing.
	erroredCommitted, erroredAbsent int
	versions                        int
	problems                        []string
}

func (c *check) problem(format string, args ...any) {
	c.problems = append(c.problems, fmt.Sprintf(format, args...))
}

// stuck are the pending proposals whose approvals of their current hash
// already reach the quorum: approved, never applied.
func (h history) stuck() []uint64 {
	var out []uint64
	for id, p := range h.proposals {
		if p.GetStatus() != "pending" || p.GetApprovalsRequired() == 0 {
			continue
		}
		n := 0
		for _, a := range p.GetApprovals() {
			if a.GetResultingHash() == p.GetResultingHash() {
				n++
			}
		}
		if n >= int(p.GetApprovalsRequired()) {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// verify checks the history against the ledger:
//   - each sandbox's versions run 1…current without a gap, and each has
//     exactly one policy.set audit entry with its hash;
//   - every acked SetPolicy is there, at the version and hash answered;
//     no document was stored twice; an errored one is there once or not
//     at all;
//   - every applied proposal is its version (source proposal, provenance
//     naming it, one proposal.apply audit entry) and every proposal
//     version's proposal is applied as that version; no proposal is left
//     approved and unapplied;
//   - every acked approval is applied as the version answered.
func (h history) verify(l *ledger) check {
	var c check
	byHash := map[string][]string{} // hash → sandbox@version
	for sb, vs := range h.versions {
		for i, pv := range vs {
			c.versions++
			k := versionKey(sb, pv.GetVersion())
			if pv.GetVersion() != uint32(i+1) {
				c.problem("%s: version %d at position %d (a gap or a double)", sb, pv.GetVersion(), i+1)
			}
			if n := h.versionAudit[k]; n != 1 {
				c.problem("%s: %d policy.set audit entries with its hash, want 1", k, n)
			}
			byHash[pv.GetHash()] = append(byHash[pv.GetHash()], k)
			if pv.GetSource() == "proposal" {
				id, _ := strconv.ParseUint(pv.GetProvenance()["proposal"], 10, 64)
				p := h.proposals[id]
				if p == nil || p.GetStatus() != "applied" || p.GetAppliedVersion() != pv.GetVersion() || p.GetSandbox() != sb {
					c.problem("%s comes from proposal %d, which is not applied as it: %v", k, id, p)
				}
			}
		}
		if n := uint32(len(vs)); n != h.current[sb] {
			c.problem("%s: %d versions, current version %d", sb, n, h.current[sb])
		}
	}
	for id, p := range h.proposals {
		if p.GetStatus() != "applied" {
			continue
		}
		vs := h.versions[p.GetSandbox()]
		v := p.GetAppliedVersion()
		if v == 0 || int(v) > len(vs) || vs[v-1].GetSource() != "proposal" || vs[v-1].GetProvenance()["proposal"] != strconv.FormatUint(id, 10) {
			c.problem("proposal %d applied as %s@%d, which is not its version", id, p.GetSandbox(), v)
		}
		if n := h.applyAudit[id]; n != 1 {
			c.problem("proposal %d applied with %d proposal.apply audit entries, want 1", id, n)
		}
	}
	if s := h.stuck(); len(s) > 0 {
		c.problem("proposals approved by their quorum but never applied: %v", s)
	}

	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range l.sets {
		at := byHash[s.hash]
		switch {
		case len(at) > 1:
			c.problem("document %s stored %d times: %v", s.hash[:12], len(at), at)
		case s.acked:
			c.ackedSets++
			if slices.Contains(at, versionKey(s.sandbox, s.version)) {
				c.foundSets++
			} else {
				c.problem("acked set %s@%d (%s) is not in the history (found at %v)", s.sandbox, s.version, s.hash[:12], at)
			}
		case len(at) == 1:
			c.erroredCommitted++
		default:
			c.erroredAbsent++
		}
	}
	for _, a := range l.approvals {
		p := h.proposals[a.id]
		switch {
		case a.acked:
			c.ackedApprovals++
			if p != nil && p.GetStatus() == "applied" && p.GetAppliedVersion() == a.version {
				c.foundApprovals++
			} else {
				c.problem("acked approval of proposal %d (version %d) is not in the history: %v", a.id, a.version, p)
			}
		case p != nil && p.GetStatus() == "applied":
			c.erroredCommitted++
		default:
			c.erroredAbsent++
		}
	}
	return c
}

// settle waits until the audit log stops moving (background work after
// the last write: re-bases of pending proposals) for a second.
func settle(t *testing.T, c client) {
	t.Helper()
	var last int64 = -1
	stable := time.Now()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		ctx, cancel := callCtx(t)
		res, err := c.audit.ListAudit(ctx, &portcullisv1.ListAuditRequest{Limit: 1})
		cancel()
		if err != nil || len(res.GetEntries()) == 0 {
			continue
		}
		if seq := res.GetEntries()[0].GetSeq(); seq != last {
			last, stable = seq, time.Now()
		} else if time.Since(stable) > time.Second {
			return
		}
	}
	t.Fatalf("the audit log kept moving for 30s after the drill's last write")
}
