package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"connectrpc.com/connect/v2"
	"connectrpc.com/connect/v2/connectproto"

	"github.com/portcullis-dev/portcullis/advisor"
	"github.com/portcullis-dev/portcullis/lifecycle"
	"github.com/portcullis-dev/portcullis/policy"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
	"github.com/portcullis-dev/portcullis/prover"
	"github.com/portcullis-dev/portcullis/provider"
	"github.com/portcullis-dev/portcullis/store"
)

// The domain errors handlers return are the lifecycle's (the gateway's
// own handlers use the same ones): each reaches the client with its
// message and one code.
type (
	// fieldError: InvalidArgument naming the field.
	fieldError = lifecycle.FieldError
	// notFoundError: NotFound with the message (the store's own error
	// text may hold database detail and never reaches clients).
	notFoundError = lifecycle.NotFoundError
	// conflictError: Aborted — a stale expected version or a lost race.
	conflictError = lifecycle.ConflictError
	// preconditionError: FailedPrecondition.
	preconditionError = lifecycle.PreconditionError
	// rateLimitError: ResourceExhausted with a retry hint.
	rateLimitError = lifecycle.RateLimitError
)

func invalidField(path, format string, args ...any) error {
	return &fieldError{Path: path, Message: fmt.Sprintf(format, args...)}
}

// existsError carries the message the client sees for a
// store.ErrAlreadyExists.
type existsError struct{ msg string }

func (e *existsError) Error() string { return e.msg }

// missing names what was not found when err is store.ErrNotFound.
func missing(err error, format string, args ...any) error {
	return lifecycle.Missing(err, format, args...)
}

// exists names what already exists when err is store.ErrAlreadyExists.
func exists(err error, format string, args ...any) error {
	if errors.Is(err, store.ErrAlreadyExists) {
		return &existsError{fmt.Sprintf(format, args...)}
	}
	return err
}

// sentinelCodes are the codes of the sentinel errors, in the order
// toConnectError tries them (after the typed errors), and the fixed
// message the client sees for each.
var sentinelCodes = []struct {
	err  error
	code connect.Code
	msg  string
}{
	{store.ErrLastAdmin, connect.CodeFailedPrecondition, "refusing to revoke the last admin token; create another admin token first"},
	{store.ErrConflict, connect.CodeAborted, "conflict: a concurrent change won; read the current state and retry"},
	{store.ErrNotFound, connect.CodeNotFound, "not found"},
	{store.ErrAlreadyExists, connect.CodeAlreadyExists, "already exists"},
	{context.Canceled, connect.CodeCanceled, "request canceled"},
	{context.DeadlineExceeded, connect.CodeDeadlineExceeded, "deadline exceeded"},
	// The database is out of reach (this replica reports not ready until
	// it is back): a write that failed so may or may not have committed.
	{store.ErrUnavailable, connect.CodeUnavailable, "the gateway's database is unavailable; retry later (a write may or may not have been applied: read before writing again)"},
}

// toConnectError maps every error a handler returns to what the client
// sees. It is the only place that chooses codes: domain errors keep their
// message, anything unknown becomes a generic Internal error and is logged
// once here with its detail.
func toConnectError(ctx context.Context, log *slog.Logger, procedure string, err error) error {
	if err == nil {
		return nil
	}
	var (
		cerr  *connect.Error
		verr  *policy.ValidationError
		ferr  *fieldError
		cferr *conflictError
		nferr *notFoundError
		exerr *existsError
		rferr *advisor.RefusalError
		perr  *advisor.ParseError
		rlerr *rateLimitError
		pcerr *preconditionError
		pmerr *lifecycle.PermissionError
		tcerr *prover.TooComplexError
		grerr *lifecycle.GrantsRemovedError
		bserr *lifecycle.BusyError
		prerr provider.Problems
	)
	switch {
	case errors.As(err, &cerr) && !cerr.IsRemote():
		return cerr
	case errors.As(err, &rferr):
		return refusalError(rferr)
	case errors.As(err, &perr):
		return withProblems(connect.NewError(connect.CodeInvalidArgument, "invalid proposal: "+summarize(perr.Problems)), perr.Problems)
	case errors.As(err, &rlerr):
		e := connect.NewError(connect.CodeResourceExhausted, rlerr.Error())
		if d, derr := connectproto.NewErrorDetail(&portcullisv1.ProposalRateLimit{RetryAfterSeconds: lifecycle.RetrySeconds(rlerr.After)}); derr == nil {
			e = e.WithDetail(d)
		}
		return e
	case errors.As(err, &bserr):
		// The proxy answers its agent review_busy: the message says so.
		return connect.NewError(connect.CodeResourceExhausted, bserr.Error())
	case errors.As(err, &pcerr):
		return connect.NewError(connect.CodeFailedPrecondition, pcerr.Msg)
	case errors.As(err, &grerr):
		return grantsRemovedError(grerr)
	case errors.As(err, &pmerr):
		return connect.NewError(connect.CodePermissionDenied, pmerr.Msg)
	case errors.As(err, &tcerr):
		// ProverService.Prove on documents beyond the prover's budget:
		// refused, never answered partially (proposals get a too_complex
		// refusal from the advisor instead).
		return connect.NewError(connect.CodeInvalidArgument, tcerr.Error())
	case errors.As(err, &verr):
		return withProblems(connect.NewError(connect.CodeInvalidArgument, "invalid policy: "+summarize(verr.Problems)), verr.Problems)
	case errors.As(err, &prerr):
		ps := make([]policy.Problem, len(prerr))
		for i, p := range prerr {
			ps[i] = policy.Problem{Path: p.Field, Message: p.Message}
		}
		return withProblems(connect.NewError(connect.CodeInvalidArgument, "invalid provider: "+prerr.Error()), ps)
	case errors.As(err, &ferr):
		return withProblems(connect.NewError(connect.CodeInvalidArgument, ferr.Error()),
			[]policy.Problem{{Path: ferr.Path, Message: ferr.Message}})
	case errors.As(err, &cferr):
		return connect.NewError(connect.CodeAborted, cferr.Msg)
	case errors.As(err, &nferr):
		return connect.NewError(connect.CodeNotFound, nferr.Msg)
	case errors.As(err, &exerr):
		return connect.NewError(connect.CodeAlreadyExists, exerr.msg)
	}
	for _, s := range sentinelCodes {
		if errors.Is(err, s.err) {
			return connect.NewError(s.code, s.msg)
		}
	}
	log.ErrorContext(ctx, "internal error", "procedure", procedure, "err", err)
	return connect.NewError(connect.CodeInternal, "internal error")
}

// grantsRemovedError is a policy set refused for taking away what
// applied proposals granted: FailedPrecondition, the message naming them
// and a RemovedGrants detail listing them (the CLI asks to confirm those).
func grantsRemovedError(g *lifecycle.GrantsRemovedError) *connect.Error {
	e := connect.NewError(connect.CodeFailedPrecondition, clip(g.Error()))
	detail := &portcullisv1.RemovedGrants{}
	for _, r := range g.Grants {
		detail.Grants = append(detail.Grants, &portcullisv1.RemovedGrant{
			Proposal: uint64(r.Proposal), Granted: clip(lifecycle.GrantLine(r.Granted)), Rationale: clip(r.Rationale),
		})
	}
	if d, err := connectproto.NewErrorDetail(detail); err == nil {
		e = e.WithDetail(d)
	}
	return e
}

// refusalError is a proposal refused as not narrow (or as changing
// nothing): InvalidArgument naming, for every violation the advisor found
// (all at once, in the proposal's order), the operation, the field and
// the rule, as one ProposalRefusal detail each and, for clients that read
// field problems, a ValidationProblems detail. The message lists them too.
func refusalError(r *advisor.RefusalError) *connect.Error {
	all := r.All()
	problems := make([]policy.Problem, 0, len(all))
	for _, x := range all {
		problems = append(problems, policy.Problem{Path: x.Field, Message: fmt.Sprintf("refused (%s): %s", x.Rule, x.Reason)})
	}
	msg := clip(r.Error())
	if len(all) > 1 {
		parts := make([]string, 0, min(len(all), maxMessageProblems)+1)
		for i, x := range all {
			if i == maxMessageProblems {
				parts = append(parts, fmt.Sprintf("and %d more", len(all)-i))
				break
			}
			parts = append(parts, clip(x.Error()))
		}
		msg = fmt.Sprintf("%d refusals: %s", len(all), strings.Join(parts, "; "))
	}
	e := withProblems(connect.NewError(connect.CodeInvalidArgument, msg), problems)
	for i, x := range all {
		if i == maxRefusalDetails {
			break // the rest are in ValidationProblems
		}
		d, err := connectproto.NewErrorDetail(&portcullisv1.ProposalRefusal{
			Operation: int32(x.Op), Field: clip(x.Field), Rule: x.Rule, Reason: clip(x.Reason),
		})
		if err != nil {
			return e
		}
		e = e.WithDetail(d)
	}
	return e
}

// Bounds on what an error carries: gRPC sends message and details in
// trailers, and a client's header limits must never swallow the answer.
const (
	maxMessageProblems = 10
	maxRefusalDetails  = 20
	maxDetailProblems  = 100
	maxProblemText     = 300
)

// summarize lists the first problems in the message, for clients that do
// not read details (grpcurl, curl).
func summarize(problems []policy.Problem) string {
	parts := make([]string, 0, maxMessageProblems+1)
	for i, p := range problems {
		if i == maxMessageProblems {
			parts = append(parts, fmt.Sprintf("and %d more", len(problems)-i))
			break
		}
		parts = append(parts, clip(p.String()))
	}
	return strings.Join(parts, "; ")
}

// withProblems attaches the problems as a ValidationProblems detail so
// clients can show every path, not only the message.
func withProblems(e *connect.Error, problems []policy.Problem) *connect.Error {
	shown := problems
	if len(shown) > maxDetailProblems {
		shown = shown[:maxDetailProblems]
	}
	list := make([]*portcullisv1.Problem, 0, len(shown)+1)
	for _, p := range shown {
		list = append(list, &portcullisv1.Problem{Path: clip(p.Path), Message: clip(p.Message)})
	}
	if more := len(problems) - len(shown); more > 0 {
		list = append(list, &portcullisv1.Problem{Message: fmt.Sprintf("%d more problems not shown", more)})
	}
	detail, err := connectproto.NewErrorDetail(&portcullisv1.ValidationProblems{Problems: list})
	if err != nil {
		return e
	}
	return e.WithDetail(detail)
}

// clip shortens text an attacker may have sized (paths echo map keys).
func clip(s string) string {
	if len(s) <= maxProblemText {
		return s
	}
	return strings.ToValidUTF8(s[:maxProblemText], "") + "…"
}

func problemsToProto(problems []policy.Problem) []*portcullisv1.Problem {
	out := make([]*portcullisv1.Problem, 0, len(problems))
	for _, p := range problems {
		out = append(out, &portcullisv1.Problem{Path: p.Path, Message: p.Message})
	}
	return out
}
