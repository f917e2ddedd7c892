package sqlite

import (
	"context"
	"fmt"
	"time"

	"github.com/portcullis-dev/portcullis/store"
	"github.com/portcullis-dev/portcullis/store/internal/callsql"
)

// The writes of held calls, written once in callsql, on the writer (or
// the transaction); their reads are sqlread's.

// InsertHeldCall stores c and returns it with its ID (ErrAlreadyExists
// for a taken key).
func (t *txn) InsertHeldCall(ctx context.Context, c store.HeldCall) (store.HeldCall, error) {
	if err := checkTimes(fmt.Sprintf("held call of sandbox %q", c.Sandbox), c.RequestedAt, c.Deadline, c.DecidedAt); err != nil {
		return store.HeldCall{}, err
	}
	return callsql.Insert(ctx, engine{t.wr}, c)
}

// DecideHeldCall moves a held call to c's decision (ErrConflict when it
// is no longer held).
func (t *txn) DecideHeldCall(ctx context.Context, c store.HeldCall) (store.HeldCall, error) {
	if err := checkTimes(fmt.Sprintf("held call %d", c.ID), c.DecidedAt); err != nil {
		return store.HeldCall{}, err
	}
	return callsql.Decide(ctx, engine{t.wr}, c)
}

// SetHeldCallProposal records the proposal an approval filed.
func (t *txn) SetHeldCallProposal(ctx context.Context, id, proposal int64) error {
	return callsql.SetProposal(ctx, engine{t.wr}, id, proposal)
}

// FailHeldCalls fails the held calls of the proxy's other instances.
func (t *txn) FailHeldCalls(ctx context.Context, sandbox, proxyID, instance, reason string, at time.Time) ([]store.HeldCall, error) {
	if err := checkTimes("held calls' end", at); err != nil {
		return nil, err
	}
	return callsql.FailInstance(ctx, engine{t.wr}, sandbox, proxyID, instance, reason, at)
}

// ExpireHeldCalls expires the held calls past their deadline.
func (t *txn) ExpireHeldCalls(ctx context.Context, now time.Time, reason string) ([]store.HeldCall, error) {
	if err := checkTimes("held calls' expiry", now); err != nil {
		return nil, err
	}
	return callsql.Expire(ctx, engine{t.wr}, now, reason)
}

// ClearHeldCallArguments empties the arguments of calls decided before
// before.
func (t *txn) ClearHeldCallArguments(ctx context.Context, before time.Time) (int64, error) {
	if err := checkTimes("held calls' retention", before); err != nil {
		return 0, err
	}
	return callsql.ClearArguments(ctx, engine{t.wr}, before)
}

// InsertCallApproval stores an approval of a held call.
func (t *txn) InsertCallApproval(ctx context.Context, id int64, a store.CallApproval) error {
	if err := checkTimes(fmt.Sprintf("approval of held call %d", id), a.CreatedAt); err != nil {
		return err
	}
	return callsql.InsertApproval(ctx, engine{t.wr}, id, a)
}
