package postgres

import (
	"context"
	"time"

	"github.com/portcullis-dev/portcullis/store"
	"github.com/portcullis-dev/portcullis/store/internal/callsql"
)

// The writes of held calls, written once in callsql, on the pool or in
// the transaction; their reads are sqlread's.

// InsertHeldCall stores c and returns it with its ID (ErrAlreadyExists,
// the transaction usable, for a taken key).
func (c *conn) InsertHeldCall(ctx context.Context, call store.HeldCall) (store.HeldCall, error) {
	return callsql.Insert(ctx, engine{c.db}, call)
}

// DecideHeldCall moves a held call to call's decision (ErrConflict when
// it is no longer held).
func (c *conn) DecideHeldCall(ctx context.Context, call store.HeldCall) (store.HeldCall, error) {
	return callsql.Decide(ctx, engine{c.db}, call)
}

// SetHeldCallProposal records the proposal an approval filed.
func (c *conn) SetHeldCallProposal(ctx context.Context, id, proposal int64) error {
	return callsql.SetProposal(ctx, engine{c.db}, id, proposal)
}

// FailHeldCalls fails the held calls of the proxy's other instances.
func (c *conn) FailHeldCalls(ctx context.Context, sandbox, proxyID, instance, reason string, at time.Time) ([]store.HeldCall, error) {
	return callsql.FailInstance(ctx, engine{c.db}, sandbox, proxyID, instance, reason, at)
}

// ExpireHeldCalls expires the held calls past their deadline.
func (c *conn) ExpireHeldCalls(ctx context.Context, now time.Time, reason string) ([]store.HeldCall, error) {
	return callsql.Expire(ctx, engine{c.db}, now, reason)
}

// ClearHeldCallArguments empties the arguments of calls decided before
// before.
func (c *conn) ClearHeldCallArguments(ctx context.Context, before time.Time) (int64, error) {
	return callsql.ClearArguments(ctx, engine{c.db}, before)
}

// InsertCallApproval stores an approval of a held call.
func (c *conn) InsertCallApproval(ctx context.Context, id int64, a store.CallApproval) error {
	return callsql.InsertApproval(ctx, engine{c.db}, id, a)
}
