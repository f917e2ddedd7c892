package lifecycle

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"testing"

	"github.com/portcullis-dev/portcullis/advisor"
	"github.com/portcullis-dev/portcullis/internal/pgtest"
	"github.com/portcullis-dev/portcullis/policy"
	"github.com/portcullis-dev/portcullis/store"
	"github.com/portcullis-dev/portcullis/store/storetest"
)

// hookDriver runs a hook once, right after the first transaction that
// inserted an approval commits: what another replica commits at that
// moment, or the replica dying before it answers.
type hookDriver struct {
	store.Driver
	mu   sync.Mutex
	hook func() error
	dead bool // after a hook that "died": every transaction fails
}

var errDied = errors.New("replica died")

func (d *hookDriver) InTx(ctx context.Context, fn func(store.Tx) error) error {
	d.mu.Lock()
	dead := d.dead
	d.mu.Unlock()
	if dead {
		return errDied
	}
	var approved bool
	err := d.Driver.InTx(ctx, func(tx store.Tx) error { return fn(approvalSpy{Tx: tx, seen: &approved}) })
	if err != nil || !approved {
		return err
	}
	d.mu.Lock()
	hook := d.hook
	d.hook = nil
	d.mu.Unlock()
	if hook == nil {
		return nil
	}
	if err := hook(); errors.Is(err, errDied) {
		d.mu.Lock()
		d.dead = true
		d.mu.Unlock()
		return err
	} else if err != nil {
		panic(err)
	}
	return nil
}

type approvalSpy struct {
	store.Tx
	seen *bool
}

func (s approvalSpy) InsertApproval(ctx context.Context, id int64, a store.Approval) error {
	*s.seen = true
	return s.Tx.InsertApproval(ctx, id, a)
}

func parseDoc(t *testing.T, doc string) *policy.Policy {
	t.Helper()
	p, _, err := policy.Parse([]byte(doc))
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	return p
}

const (
	raceDocV1 = `version: 1
network_policies:
  base:
    name: base
    endpoints: [ { host: api.example.com, port: 443, protocol: rest, rules: [ { allow: { method: GET, path: "/v1/**" } } ] } ]
    binaries: [ { path: /usr/bin/python3 } ]
`
	raceDocSet = `version: 1
network_policies:
  base:
    name: base
    endpoints: [ { host: api.example.com, port: 443, protocol: rest, rules: [ { allow: { method: GET, path: "/v2/**" } } ] } ]
    binaries: [ { path: /usr/bin/python3 } ]
`
	raceProposal = `rationale: shipments
operations:
  - add_rule:
      name: shipping
      rule: { endpoints: [ { host: ship.example.com, port: 443, protocol: rest, rules: [ { allow: { method: GET, path: "/v1/shipments/*" } } ] } ], binaries: [ { path: /usr/bin/python3 } ] }
`
)

// TestApproveRace: an approval that completes the quorum is recorded by
// the transaction that applies the proposal. Before, it was recorded
// alone and the proposal applied by a second transaction, so a policy set
// committed in between (another replica) re-based the proposal and left
// the approval not counting — the call answered success, the proposal
// stayed pending, and its approver could never approve it again — and a
// replica dying in between left the proposal approved and never applied.
// Found by drills/gateway (TestKill9ReplicaDuringBurst).
func TestApproveRace(t *testing.T) {
	engines := map[string]func(t *testing.T) *store.Store{
		"sqlite":   openSQLite,
		"postgres": func(t *testing.T) *store.Store { return openPostgres(t, pgtest.Database(t)) },
	}
	for _, engine := range slices.Sorted(maps.Keys(engines)) {
		t.Run(engine, func(t *testing.T) {
			for _, tc := range []struct {
				name string
				// hook runs right after the approval's transaction.
				hook func(t *testing.T, l *Lifecycle) error
			}{
				{"commit between approval and apply", func(t *testing.T, l *Lifecycle) error {
					_, _, err := l.Commit(ctx(t), Change{Sandbox: "race", Policy: parseDoc(t, raceDocSet), Source: store.SourceSet, Actor: "admin"})
					return err
				}},
				{"replica dies between approval and apply", func(t *testing.T, l *Lifecycle) error { return errDied }},
			} {
				t.Run(tc.name, func(t *testing.T) {
					inner := engines[engine](t)
					d := &hookDriver{Driver: inner.Driver}
					l := New(Config{Logger: slog.New(slog.DiscardHandler)}, store.New(d))
					v1 := parseDoc(t, raceDocV1)
					if _, err := inner.CreateSandbox(ctx(t), store.CreateSandbox{
						Name: "race", Actor: "admin", Token: storetest.NewToken("sandbox-race", "", ""),
						Policy: &store.PolicyVersion{Hash: v1.Hash(), Document: v1.CanonicalJSON(), Author: "admin", Source: store.SourceCreate},
					}); err != nil {
						t.Fatal(err)
					}
					prop, err := advisor.ParseProposal([]byte(raceProposal))
					if err != nil {
						t.Fatal(err)
					}
					sub, err := l.Submit(ctx(t), Submission{Sandbox: "race", Proposer: "sandbox-race", Actor: "sandbox-race", Proposal: prop})
					if err != nil || sub.Proposal.Status != store.ProposalPending {
						t.Fatalf("submit: %+v, %v; want a pending proposal", sub.Proposal, err)
					}
					d.hook = func() error { return tc.hook(t, l) }

					r, err := l.Approve(ctx(t), Approval{ID: sub.Proposal.ID, Approver: "olive", Reason: "fine", ResultingHash: sub.Proposal.ResultingHash})
					got := storetest.GetProposal(t, inner, sub.Proposal.ID)
					approvedBy := approvers(got)
					switch {
					case errors.Is(err, errDied):
						// The answer was lost: the proposal is applied with
						// its approval, or untouched — never approved alone.
						if got.Status == store.ProposalApplied {
							break
						}
						if got.Status != store.ProposalPending || len(approvedBy) != 0 {
							t.Fatalf("after a death mid-approval the proposal is %s approved by %v: half-applied", got.Status, approvedBy)
						}
					case err != nil:
						t.Fatalf("approve: %v", err)
					case r.Proposal.Status != store.ProposalApplied || got.Status != store.ProposalApplied:
						t.Fatalf("approve answered %s, stored %s (approved by %v); want applied", r.Proposal.Status, got.Status, approvedBy)
					}
					if got.Status == store.ProposalApplied {
						if !slices.Equal(approvedBy, []string{"olive"}) {
							t.Errorf("applied proposal approved by %v, want olive", approvedBy)
						}
						pv, err := inner.GetPolicyVersion(ctx(t), "race", got.AppliedVersion)
						if err != nil || pv.Source != store.SourceProposal || pv.Provenance["proposal"] != id(got) || pv.Provenance["approvers"] != "olive" {
							t.Errorf("applied as version %d = %+v, %v; want its proposal version approved by olive", got.AppliedVersion, pv, err)
						}
					}
				})
			}
		})
	}
}
