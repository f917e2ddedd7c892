package gateway

import (
	"context"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
	"github.com/portcullis-dev/portcullis/store"
)

const (
	// auditVerifyPage is how many entries VerifyAudit reads at a time.
	auditVerifyPage = 1000
	// auditHeadInterval is how often the gateway looks for a moved audit
	// head to log (a change through any replica moves it).
	auditHeadInterval = time.Second
)

// auditService serves the audit log (admins and operators).
type auditService struct{ *Server }

// ListAudit returns the newest entries, optionally of one sandbox (deleted
// sandboxes included: the log outlives them), and with before_seq the
// page of older ones after it.
func (s auditService) ListAudit(ctx context.Context, req *portcullisv1.ListAuditRequest) (*portcullisv1.ListAuditResponse, error) {
	limit, err := listLimit("limit", req.GetLimit(), defaultListLimit, maxListLimit)
	if err != nil {
		return nil, err
	}
	if req.GetBeforeSeq() < 0 {
		return nil, invalidField("before_seq", "must be >= 0")
	}
	list, err := s.store.ListAudit(ctx, store.AuditFilter{Sandbox: req.GetSandbox(), Limit: limit, BeforeSeq: req.GetBeforeSeq()})
	if err != nil {
		return nil, err
	}
	return &portcullisv1.ListAuditResponse{Entries: protoList(list, auditToProto)}, nil
}

// VerifyAudit recomputes the chain up to the current head. A broken chain
// is an answer (ok false), not an error; it is also logged, for the humans
// who watch the logs rather than run the command.
func (s auditService) VerifyAudit(ctx context.Context, _ *portcullisv1.VerifyAuditRequest) (*portcullisv1.VerifyAuditResponse, error) {
	v, err := store.VerifyAuditLog(ctx, s.store, auditVerifyPage)
	if err != nil {
		return nil, err
	}
	res := &portcullisv1.VerifyAuditResponse{Ok: v.Break == nil, Entries: v.Entries, HeadHash: v.HeadHash}
	if v.Break != nil {
		res.FirstBadSeq, res.Problem = v.Break.Seq, v.Break.Problem
		s.log.ErrorContext(ctx, "audit chain broken", "seq", v.Break.Seq, "problem", v.Break.Problem,
			"verified_entries", v.Entries, "actor", mustPrincipal(ctx).Actor())
	}
	return res, nil
}

func auditToProto(e store.AuditEntry) *portcullisv1.AuditEntry {
	return &portcullisv1.AuditEntry{
		Seq:        e.Seq,
		Time:       timestamppb.New(e.Time),
		Actor:      e.Actor,
		Action:     e.Action,
		Sandbox:    e.Sandbox,
		Target:     e.Target,
		BeforeHash: e.BeforeHash,
		AfterHash:  e.AfterHash,
		Detail:     e.Detail,
		PrevHash:   e.PrevHash,
		Hash:       e.Hash,
	}
}
