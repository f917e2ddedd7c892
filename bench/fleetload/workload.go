package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/portcullis-dev/portcullis/bench/internal/orderspolicy"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

// basePolicy is every sandbox's policy: the article's orders MCP endpoint
// with its argument gate, a read-only GitHub REST endpoint and a read-only
// package index whose port each policy set changes (PORT), so each set is
// a new version (pushload's document).
const basePolicy = orderspolicy.Head + `      - host: orders.internal.example.com
        port: 8081
        path: /mcp
        protocol: mcp
        enforcement: enforce
        mcp:
          versions: ["2025-11-25"]
        rules:
          - allow: { method: initialize }
          - allow: { method: notifications/initialized }
` + orderspolicy.ToolRules + orderspolicy.RESTTail

// policyVariant is the k-th policy set's document (k = 0: the first
// version of every sandbox).
func policyVariant(k int) string {
	return orderspolicy.Variant(basePolicy, k)
}

// proposalDoc is the k-th proposal: a narrow new entry (one exact host,
// one method and path, one named binary), with an idempotency key so that
// sending it again after a replica died mid-call returns the same
// proposal.
func proposalDoc(k int) string {
	return fmt.Sprintf(`rationale: fleetload proposal %[1]d
idempotency_key: fleetload-%[1]d
operations:
  - add_rule:
      name: svc-%[1]d
      rule:
        endpoints:
          - host: svc-%[1]d.example.com
            port: 443
            protocol: rest
            rules:
              - allow: { method: GET, path: "/v1/items/*" }
        binaries:
          - { path: /usr/bin/python3 }
`, k)
}

// fleetClient sends the control-plane workload through the replicas:
// each call starts on the next replica in turn and, when that one does
// not answer, fails over to the next (six attempts at most: twice round a
// fleet of three, with a short pause between rounds).
type fleetClient struct {
	conns []*grpc.ClientConn
	next  atomic.Uint64
}

func dialFleet(addrs []string) (*fleetClient, error) {
	f := &fleetClient{}
	for _, addr := range addrs {
		conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			f.close()
			return nil, err
		}
		f.conns = append(f.conns, conn)
	}
	return f, nil
}

func (f *fleetClient) close() {
	for _, c := range f.conns {
		c.Close()
	}
}

// attemptTimeout bounds one call on one replica.
const attemptTimeout = 10 * time.Second

// failover says whether err means the replica did not answer (or died
// while answering), so the call goes to another one. Internal and Unknown
// are among them: a connection cut mid-answer can surface as either.
func failover(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Internal, codes.Unknown:
		return true
	}
	return false
}

// do runs call with token on the replicas, round-robin, failing over.
// It returns how many replicas it tried.
func (f *fleetClient) do(ctx context.Context, token string, call func(context.Context, *grpc.ClientConn) error) (int, error) {
	attempts, _, err := f.doAt(ctx, token, call)
	return attempts, err
}

// doAt is do, and also says which replica answered last.
func (f *fleetClient) doAt(ctx context.Context, token string, call func(context.Context, *grpc.ClientConn) error) (attempts, replica int, err error) {
	first := int(f.next.Add(1))
	n := len(f.conns)
	for a := range 2 * n {
		if a > 0 && a%n == 0 {
			select {
			case <-time.After(200 * time.Millisecond):
			case <-ctx.Done():
				return a, replica, ctx.Err()
			}
		}
		replica = (first + a) % n
		actx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token), attemptTimeout)
		err = call(actx, f.conns[replica])
		cancel()
		if err == nil || !failover(err) || ctx.Err() != nil {
			return a + 1, replica, err
		}
	}
	return 2 * n, replica, err
}

// Operation kinds.
const (
	opSet     = "set"
	opPropose = "propose"
	opApprove = "approve"
)

// opResult is one operation of the workload as the client saw it.
type opResult struct {
	Kind     string
	Sandbox  string
	Start    time.Time
	End      time.Time
	Attempts int // calls made, one per replica tried
	// FailedOver: some call of it went to another replica after the
	// first did not answer.
	FailedOver bool
	Replica    int    // set: the replica that answered (last tried)
	Err        string // "" when it returned success: acknowledged
	// What an acknowledged operation says was stored: the version and its
	// hash (set, approve), the proposal (propose, approve).
	Version  uint32
	Hash     string
	Proposal uint64
}

// workload holds what the operations need and what they recorded.
type workload struct {
	fc        *fleetClient
	admin     string
	approvers []string          // operator tokens; the first approves, the others after a re-base
	names     []string          // every sandbox; the fleet's first
	tokens    map[string]string // sandbox → its token
	fleet     int               // the first fleet sandboxes hold the proxies

	mu      sync.Mutex
	results []opResult
	shed    int // proposals not started: too many in flight
}

func (w *workload) record(r opResult) {
	w.mu.Lock()
	w.results = append(w.results, r)
	w.mu.Unlock()
}

// errString is how an error is recorded: its gRPC code and message.
func errString(err error) string {
	if s, ok := status.FromError(err); ok {
		return s.Code().String() + ": " + s.Message()
	}
	return err.Error()
}

// setPolicy sets the k-th variant on fleet sandbox k mod F.
func (w *workload) setPolicy(ctx context.Context, k int) {
	sb := w.names[k%w.fleet]
	r := opResult{Kind: opSet, Sandbox: sb, Start: time.Now()}
	var res *portcullisv1.PolicyVersion
	var err error
	r.Attempts, r.Replica, err = w.fc.doAt(ctx, w.admin, func(ctx context.Context, conn *grpc.ClientConn) error {
		res, err = portcullisv1.NewPolicyServiceClient(conn).SetPolicy(ctx, &portcullisv1.SetPolicyRequest{Sandbox: sb, Document: policyVariant(k)})
		return err
	})
	r.FailedOver = r.Attempts > 1
	r.End = time.Now()
	if err != nil {
		r.Err = errString(err)
	} else {
		// Unchanged only after an attempt that committed and whose answer
		// was lost: the version answered is that commit.
		r.Version, r.Hash = res.GetVersion(), res.GetHash()
	}
	w.record(r)
}

// proposeApprove submits the k-th proposal as sandbox k mod S and, once
// it is stored, approves it with the approver's token: two operations.
func (w *workload) proposeApprove(ctx context.Context, k int) {
	sb := w.names[k%len(w.names)]
	r := opResult{Kind: opPropose, Sandbox: sb, Start: time.Now()}
	var p *portcullisv1.Proposal
	var err error
	r.Attempts, err = w.fc.do(ctx, w.tokens[sb], func(ctx context.Context, conn *grpc.ClientConn) error {
		p, err = portcullisv1.NewAdvisorServiceClient(conn).SubmitProposal(ctx, &portcullisv1.SubmitProposalRequest{Document: proposalDoc(k)})
		return err
	})
	r.FailedOver = r.Attempts > 1
	r.End = time.Now()
	if err != nil {
		r.Err = errString(err)
		w.record(r)
		return
	}
	r.Proposal = p.GetId()
	w.record(r)

	a := opResult{Kind: opApprove, Sandbox: sb, Start: time.Now(), Proposal: p.GetId()}
	p, err = w.approve(ctx, p, &a)
	a.End = time.Now()
	if err != nil {
		a.Err = errString(err)
	} else {
		a.Version, a.Hash = p.GetAppliedVersion(), p.GetResultingHash()
	}
	w.record(a)
}

// approve approves p with the hash it shows. When the gateway answers
// that the proposal changed since (a policy set re-based it: Aborted), or
// is already decided (an earlier attempt's answer was lost), the approver
// reads it again, as a person would, and approves the new hash; an
// applied proposal is the approval's success. An approver approves a
// proposal once, whatever its hash: when the approval was recorded but a
// re-base left the proposal pending (its base moved before it could be
// applied), the next approver of the pool approves the new hash.
func (w *workload) approve(ctx context.Context, p *portcullisv1.Proposal, op *opResult) (*portcullisv1.Proposal, error) {
	id, hash := p.GetId(), p.GetResultingHash()
	approver := 0
	var lastErr error
	for range 2 * len(w.approvers) {
		var res *portcullisv1.Proposal
		n, err := w.fc.do(ctx, w.approvers[approver], func(ctx context.Context, conn *grpc.ClientConn) error {
			var err error
			res, err = portcullisv1.NewApprovalServiceClient(conn).ApproveProposal(ctx, &portcullisv1.ApproveProposalRequest{
				Id: id, Reason: "fleetload", ResultingHash: hash})
			return err
		})
		op.Attempts += n
		op.FailedOver = op.FailedOver || n > 1
		switch {
		case err == nil && res.GetStatus() == "applied":
			return res, nil
		case err == nil:
			// Recorded, then re-based: pending with a new hash.
			lastErr = fmt.Errorf("approved, then re-based: %s", res.GetStatus())
			approver++
		case status.Code(err) == codes.Aborted:
			lastErr = err // the hash changed, or the proposal is decided
		case status.Code(err) == codes.FailedPrecondition || status.Code(err) == codes.AlreadyExists:
			lastErr = err // this approver approved it before
			approver++
		default:
			return nil, err
		}
		if approver == len(w.approvers) {
			break
		}
		n, err = w.fc.do(ctx, w.approvers[approver], func(ctx context.Context, conn *grpc.ClientConn) error {
			var err error
			res, err = portcullisv1.NewApprovalServiceClient(conn).GetProposal(ctx, &portcullisv1.GetProposalRequest{Id: id})
			return err
		})
		op.Attempts += n
		op.FailedOver = op.FailedOver || n > 1
		if err != nil {
			return nil, errors.Join(lastErr, err)
		}
		switch {
		case res.GetStatus() == "applied":
			return res, nil
		case res.GetStatus() != "pending" || res.GetRebaseError() != "":
			return nil, fmt.Errorf("%w (the proposal is %s%s)", lastErr, res.GetStatus(), suffix(": ", res.GetRebaseError()))
		}
		hash = res.GetResultingHash()
	}
	return nil, fmt.Errorf("%w (every approver tried)", lastErr)
}

func suffix(sep, s string) string {
	if s == "" {
		return ""
	}
	return sep + s
}
