package lifecycle

import (
	"context"
	"time"

	"github.com/portcullis-dev/portcullis/store"
)

// The Sentry events' own store (Config.SentryEvents: a database apart
// from the control plane's, or the same one): the events, the sources'
// sequences and the findings' flags. Its writes are here with the
// control plane's; everyone else reads it through SentryEvents.

// SentryEvents is the store the Sentry events are kept in, read-only.
func (l *Lifecycle) SentryEvents() store.Reader { return l.events }

// AppendSentryEvents stores a batch of watchdog events
// (store.Driver.AppendSentryEvents: duplicates counted, not stored; the
// sources' acked sequences and gaps moved).
func (l *Lifecycle) AppendSentryEvents(ctx context.Context, events []store.SentryEvent) (store.SentryBatchResult, error) {
	return l.events.AppendSentryEvents(ctx, events)
}

// PruneSentryEvents deletes the events received before the UTC day of
// before and returns how many it deleted.
func (l *Lifecycle) PruneSentryEvents(ctx context.Context, before time.Time) (int64, error) {
	return l.events.PruneSentryEvents(ctx, before)
}

// SentryFlags are the flags a stored event is to have: its own and the
// findings derived from it.
type SentryFlags struct {
	Event store.SentryEvent
	Flags []string
}

// FlagSentryEvents replaces the flags of stored events, in one
// transaction.
func (l *Lifecycle) FlagSentryEvents(ctx context.Context, marks []SentryFlags) error {
	return l.events.InTx(ctx, func(tx store.Tx) error {
		for _, m := range marks {
			if err := tx.SetSentryEventFlags(ctx, m.Event, m.Flags); err != nil {
				return err
			}
		}
		return nil
	})
}

// partitioner is a driver that makes its Sentry partitions ahead
// (Postgres).
type partitioner interface {
	EnsureSentryPartitions(ctx context.Context, first time.Time, days int) error
}

// SentryPartitionsAhead makes the events store's partitions of days days
// from first on, where its engine partitions them (Postgres), so that no
// append has to make its day's own.
func (l *Lifecycle) SentryPartitionsAhead(ctx context.Context, first time.Time, days int) error {
	if p, ok := l.events.Driver.(partitioner); ok {
		return p.EnsureSentryPartitions(ctx, first, days)
	}
	return nil
}
