package lifecycle

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/portcullis-dev/portcullis/internal/events"
	"github.com/portcullis-dev/portcullis/store"
)

// auditPage is how many audit entries FollowAudit reads at once.
const auditPage = 500

// FollowAudit publishes every audit entry committed after it starts
// (events.AuditAppended) and, after each proposal entry but an approval,
// the proposal as it is then, with its findings (events.ProposalAudited),
// reading the chain by sequence every interval until ctx ends. Reading
// the store, not this replica's transactions, means that only committed
// entries are published, in the chain's order, and those of every replica
// and of the offline commands (a break-glass token) too: with several
// replicas, each publishes every entry.
func (l *Lifecycle) FollowAudit(ctx context.Context, interval time.Duration) {
	seq, _, err := l.st.AuditHead(ctx)
	for err != nil {
		l.log.Warn("audit feed: could not read the audit head; will retry", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(interval):
		}
		seq, _, err = l.st.AuditHead(ctx)
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	failing := false
	for {
		for {
			page, err := l.st.AuditChain(ctx, seq, auditPage)
			if err != nil {
				if !failing && ctx.Err() == nil {
					l.log.Warn("audit feed: could not read the audit log; will retry", "err", err)
				}
				failing = true
				break
			}
			failing = false
			for _, a := range page {
				l.cfg.Stream.Publish(events.AuditAppended{Entry: a})
				if strings.HasPrefix(a.Action, "proposal.") && a.Action != store.ActionProposalOK {
					l.publishAudited(ctx, a)
				}
				seq = a.Seq
			}
			if len(page) < auditPage {
				break
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// publishAudited publishes the proposal entry a is about.
func (l *Lifecycle) publishAudited(ctx context.Context, a store.AuditEntry) {
	id, err := strconv.ParseInt(a.Target, 10, 64)
	if err != nil {
		return
	}
	p, err := l.st.GetProposal(ctx, id)
	if err != nil {
		l.log.Warn("audit feed: could not read a proposal", "id", id, "err", err)
		return
	}
	findings, err := DecodeFindings(p.Findings)
	if err != nil {
		l.log.Warn("audit feed: a proposal's findings do not decode", "id", id, "err", err)
	}
	l.cfg.Stream.Publish(events.ProposalAudited{Proposal: p, Findings: findings})
}
