package apiclient

import (
	"errors"
	"fmt"
	"strings"

	"connectrpc.com/connect/v2"
	"connectrpc.com/connect/v2/connectproto"

	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

// Problems returns the problems of every ValidationProblems detail of ce:
// each field the gateway found wrong with a document, with its path.
func Problems(ce *connect.Error) []*portcullisv1.Problem {
	var out []*portcullisv1.Problem
	for _, d := range ce.Details() {
		m, err := connectproto.UnmarshalErrorDetail(d)
		if err != nil {
			continue // a detail this client does not know
		}
		if vp, ok := m.(*portcullisv1.ValidationProblems); ok {
			out = append(out, vp.GetProblems()...)
		}
	}
	return out
}

// RefusalError is a proposal the gateway refused as not narrow, or as
// changing nothing: every violation the gateway named, in order.
type RefusalError struct {
	Refusals []*portcullisv1.ProposalRefusal
}

func (e *RefusalError) Error() string {
	if len(e.Refusals) == 1 {
		return "refused: " + refusalLine(e.Refusals[0])
	}
	lines := make([]string, 0, len(e.Refusals))
	for _, r := range e.Refusals {
		lines = append(lines, "  "+refusalLine(r))
	}
	return fmt.Sprintf("refused (%d problems):\n%s", len(e.Refusals), strings.Join(lines, "\n"))
}

// refusalLine is one violation: its field path, the reason and the rule.
func refusalLine(r *portcullisv1.ProposalRefusal) string {
	field := r.GetField()
	// The field may or may not carry its operation's prefix already.
	if op := r.GetOperation(); op >= 0 && !strings.HasPrefix(field, "operations[") {
		prefix := fmt.Sprintf("operations[%d]", op)
		if field == "" {
			field = prefix
		} else {
			field = prefix + "." + field
		}
	}
	msg := ""
	if field != "" {
		msg += field + ": "
	}
	if reason := r.GetReason(); reason != "" {
		msg += reason
	} else {
		msg += "-"
	}
	if r.GetRule() != "" {
		msg += " (rule " + r.GetRule() + ")"
	}
	return msg
}

// RateLimitError is a proposal submitted too soon after others: the
// answer is no, for now (not a gateway outage).
type RateLimitError struct {
	RetryAfterSeconds uint32
}

func (e *RateLimitError) Error() string {
	return fmt.Sprintf("rate limited: retry in %d s", e.RetryAfterSeconds)
}

// ProposalError turns the advisor's refusal and rate-limit answers to
// SubmitProposal into a *RefusalError or a *RateLimitError, which say
// what the details carry; any other error is returned as it is.
func ProposalError(err error) error {
	ce, ok := errors.AsType[*connect.Error](err)
	if !ok {
		return err
	}
	var refused []*portcullisv1.ProposalRefusal
	for _, d := range ce.Details() {
		m, derr := connectproto.UnmarshalErrorDetail(d)
		if derr != nil {
			continue // a detail this client does not know
		}
		switch m := m.(type) {
		case *portcullisv1.ProposalRefusal:
			if ce.Code() == connect.CodeInvalidArgument {
				refused = append(refused, m)
			}
		case *portcullisv1.ProposalRateLimit:
			if ce.Code() == connect.CodeResourceExhausted {
				return &RateLimitError{RetryAfterSeconds: m.GetRetryAfterSeconds()}
			}
		}
	}
	if len(refused) > 0 {
		return &RefusalError{Refusals: refused}
	}
	return err
}

// ExitCode maps a Connect code to the command line's exit code (the
// contract in DESIGN.md: 1 the answer is no, 2 invalid input, 3 conflict,
// 4 gateway unavailable).
func ExitCode(code connect.Code) int {
	switch code {
	case connect.CodeNotFound, connect.CodePermissionDenied, connect.CodeUnauthenticated:
		return 1
	case connect.CodeInvalidArgument, connect.CodeOutOfRange:
		return 2
	case connect.CodeAborted, connect.CodeFailedPrecondition, connect.CodeAlreadyExists:
		return 3
	case connect.CodeUnavailable, connect.CodeDeadlineExceeded, connect.CodeResourceExhausted:
		return 4
	default:
		// Canceled, Unimplemented, Internal, Unknown, DataLoss: the
		// command did not succeed and retrying the same way will not help.
		return 1
	}
}

// RemovedGrants returns the grants of the RemovedGrants detail of a
// refused SetPolicy (what applied proposals granted that the document
// takes away), or nil for any other error.
func RemovedGrants(err error) []*portcullisv1.RemovedGrant {
	ce, ok := errors.AsType[*connect.Error](err)
	if !ok || ce.Code() != connect.CodeFailedPrecondition {
		return nil
	}
	for _, d := range ce.Details() {
		if m, derr := connectproto.UnmarshalErrorDetail(d); derr == nil {
			if rg, ok := m.(*portcullisv1.RemovedGrants); ok {
				return rg.GetGrants()
			}
		}
	}
	return nil
}

// GrantIDs are the proposals of grants, for SetPolicyRequest.remove_grants.
func GrantIDs(grants []*portcullisv1.RemovedGrant) []uint64 {
	ids := make([]uint64, 0, len(grants))
	for _, g := range grants {
		ids = append(ids, g.GetProposal())
	}
	return ids
}
