package notify

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/portcullis-dev/portcullis/store"
)

// LogAuditHead writes the audit chain's head to the log when the gateway
// starts and whenever it moved since, checking every interval until ctx
// ends: an outside copy of the log then holds every head, against which
// the chain can be checked (an edit that re-hashes the chain to its end
// still changes the head). Polling the store, not hooking this replica's
// writes, sees changes made through every replica.
// Each move after the first is also sent to n, the audit webhook (an
// archive; never the people's channel, where a message at every change
// would be noise).
func LogAuditHead(ctx context.Context, st store.Reader, log *slog.Logger, n *Notifier, interval time.Duration) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	var (
		lastSeq  int64 = -1
		lastHash string
		failing  bool
	)
	for {
		seq, hash, err := st.AuditHead(ctx)
		switch {
		case err != nil:
			if !failing && ctx.Err() == nil {
				log.Warn("could not read the audit head; will retry", "err", err)
			}
			failing = true
		case seq != lastSeq || hash != lastHash:
			log.Info("audit head", "seq", seq, "hash", hash)
			if lastSeq >= 0 {
				n.send(EventAuditHead, fmt.Sprintf("Portcullis audit head: entry %d, hash %s", seq, hash),
					"#/audit", map[string]any{"seq": seq, "hash": hash})
			}
			lastSeq, lastHash, failing = seq, hash, false
		default:
			failing = false
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
