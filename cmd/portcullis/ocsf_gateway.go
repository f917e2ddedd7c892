//go:build !proxyonly

package main

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/portcullis-dev/portcullis/internal/ocsf"
	"github.com/portcullis-dev/portcullis/lifecycle"
	"github.com/portcullis-dev/portcullis/store"
)

// tailAudit emits every audit entry committed after the gateway started
// (an Entity Management event each) and, for each proposal entry, the
// proposal with its prover findings (a Detection Finding), reading the
// chain by sequence every interval until ctx ends. Reading the store,
// not hooking this replica's transactions, means only committed entries
// are emitted, and those of every replica.
func tailAudit(ctx context.Context, st *store.Store, es ocsf.Emitters, log *slog.Logger, interval time.Duration) {
	seq, _, err := st.AuditHead(ctx)
	for err != nil {
		log.Warn("OCSF: could not read the audit head; will retry", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(interval):
		}
		seq, _, err = st.AuditHead(ctx)
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	failing := false
	for {
		for {
			page, err := st.AuditChain(ctx, seq, 500)
			if err != nil {
				if !failing && ctx.Err() == nil {
					log.Warn("OCSF: could not read the audit log; will retry", "err", err)
				}
				failing = true
				break
			}
			failing = false
			for _, a := range page {
				es.Emit(func() ocsf.Event { return ocsf.FromAudit(a, ocsf.Gateway) })
				if strings.HasPrefix(a.Action, "proposal.") && a.Action != store.ActionProposalOK {
					if ev, ok := proposalEvent(ctx, st, a, log); ok {
						es.Emit(func() ocsf.Event { return ev })
					}
				}
				seq = a.Seq
			}
			if len(page) < 500 {
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

func proposalEvent(ctx context.Context, st *store.Store, a store.AuditEntry, log *slog.Logger) (ocsf.Event, bool) {
	id, err := strconv.ParseInt(a.Target, 10, 64)
	if err != nil {
		return ocsf.Event{}, false
	}
	p, err := st.GetProposal(ctx, id)
	if err != nil {
		log.Warn("OCSF: could not read a proposal", "id", id, "err", err)
		return ocsf.Event{}, false
	}
	findings, err := lifecycle.DecodeFindings(p.Findings)
	if err != nil {
		log.Warn("OCSF: a proposal's findings do not decode", "id", id, "err", err)
	}
	return ocsf.FromProposal(p, findings, ocsf.Gateway), true
}
