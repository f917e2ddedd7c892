package dataplane

import (
	"cmp"
	"fmt"
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/portcullis-dev/portcullis/dataplane/credentials"
	"github.com/portcullis-dev/portcullis/dataplane/decision"
	"github.com/portcullis-dev/portcullis/dataplane/h1"
	"github.com/portcullis-dev/portcullis/dataplane/hold"
	"github.com/portcullis-dev/portcullis/dataplane/mcp"
	"github.com/portcullis-dev/portcullis/policy"
)

// holdCall holds the call a reviewed allow (d.Review > 0) admits until a
// person decides it (dataplane/hold), r's span spanning the wait; a REST
// call's body is read whole first, its credentials checked again once
// approved (creq). It returns where the answer goes, the body and plan to
// forward and what ends the answer; a nil func when the call was refused
// (answered, and recorded as a denial).
func (p *Proxy) holdCall(w http.ResponseWriter, r *http.Request, cur *loaded, req policy.Request, d policy.Decision, mreq *mcp.Request, body []byte, creq credentials.Request) (http.ResponseWriter, []byte, *credentials.Plan, func()) {
	var err error
	if mreq != nil {
		req.MCP = &mreq.Messages[0].Message
	} else if body == nil {
		body, err = h1.ReadBody(w, r, policy.MaxReviewedArguments)
	}
	if err != nil {
		p.deny(w, r, cur, req, policy.Decision{Reason: err.Error()}, nil)
		return nil, nil, nil, nil
	}
	call, err := hold.CallOf(&req, d, cur.version, req.MCP, body)
	if err != nil {
		p.deny(w, r, cur, req, policy.Decision{Reason: err.Error()}, mreq)
		return nil, nil, nil, nil
	}
	rec := p.newRecord(cur, req, d, mreq, "")
	rec.ArgumentsDigest = call.ArgumentsDigest
	p.traceDecision(r, &rec)
	call.TraceID = rec.TraceID
	span := trace.SpanFromContext(r.Context())
	span.AddEvent("held")
	a := hold.NewAnswer(w, r, mreq, body)
	out, release := p.held.Hold(r.Context(), call, hold.Options{Size: int64(len(body)), Progress: a.Progress, Stale: func() string {
		again := req
		again.Time = p.now()
		if d := p.current.Load().matcher.Decide(&again); !d.Allow {
			return d.Reason
		}
		return ""
	}})
	var plan *credentials.Plan
	if out.Approved {
		plan, out.Code, out.Reason = p.creds.Recheck(r.Context(), r, creq, body)
		out.Approved = out.Code == ""
	}
	span.AddEvent("decided", trace.WithAttributes(attribute.String("portcullis.review", cmp.Or(out.Code, "approved")), attribute.Int64("portcullis.call_id", int64(out.ID))))
	if !out.Approved {
		rec.Decision, rec.DenialID, rec.ReasonCode, rec.Reason = decision.Deny, decision.NewDenialID(), out.Code, out.Reason
		p.traceDecision(r, &rec)
		p.emit(rec)
		a.Refuse(out, rec.DenialID, cur.version, rec.TraceID)
		release()
		return nil, nil, nil, nil
	}
	rec.Reason = fmt.Sprintf("approved by review (call %d, by %s)", out.ID, out.DecidedBy)
	p.emit(rec)
	return a.Writer(), body, plan, func() { a.Finish(); release() }
}

// HeldCalls returns how many calls the proxy holds for review, and the
// bytes they keep.
func (p *Proxy) HeldCalls() (int, int64) { return p.held.Held() }
