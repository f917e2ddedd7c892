package credentials_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/portcullis-dev/portcullis/dataplane"
	"github.com/portcullis-dev/portcullis/dataplane/hold"
	"github.com/portcullis-dev/portcullis/provider"
)

// reviewer is the gateway's side of held calls: each call filed is
// handed to the test, which decides it.
type reviewer struct{ filed chan *review }

type review struct {
	call hold.Call
	ctx  context.Context
	out  chan hold.Message
}

func (rv *reviewer) Open(ctx context.Context, c *hold.Call) (hold.Stream, error) {
	r := &review{call: *c, ctx: ctx, out: make(chan hold.Message, 4)}
	rv.filed <- r
	return r, nil
}

func (r *review) Recv() (hold.Message, error) {
	select {
	case m := <-r.out:
		return m, nil
	case <-r.ctx.Done():
		return hold.Message{}, r.ctx.Err()
	}
}

func (r *review) End(string) error { return nil }

// approve files the call as id and approves it.
func (r *review) approve(id uint64) {
	r.out <- hold.Message{Filed: &hold.Filed{ID: id, Deadline: time.Now().Add(time.Minute)}}
	r.out <- hold.Message{Decision: &hold.Decision{ID: id, Status: "approved", DecidedBy: "alice", Reason: "checked",
		ArgumentsDigest: r.call.ArgumentsDigest, PolicyVersion: r.call.PolicyVersion}}
}

func (rv *reviewer) next(t *testing.T) *review {
	t.Helper()
	select {
	case r := <-rv.filed:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("no call was held")
		return nil
	}
}

// waitSpans waits until the proxy ended a request's span (it ends after
// the answer is sent), so that the log check sees it.
func (e *env) waitSpans(t *testing.T) {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(10 * time.Second)
	for len(e.spans.Ended()) == 0 {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatal("no request span ended")
		}
	}
}

type answer struct {
	status int
	body   map[string]any
}

// A held call is forwarded with the credentials held when it is
// approved, not those of when it was held: a provider rotated while the
// call waits sends the new value; one detached refuses the call, nothing
// forwarded.
func TestHeldCallUsesCredentialsAtApproval(t *testing.T) {
	const rotated = "ghp_rotated_SECRET_0009"
	for _, tc := range []struct {
		name   string
		change func(b *provider.Bundle)
	}{
		{"rotated", func(b *provider.Bundle) {
			b.Providers[0].Revision, b.Providers[0].Secret[provider.FieldToken] = 2, rotated
		}},
		{"detached", func(b *provider.Bundle) { b.Providers = b.Providers[1:] }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rv := &reviewer{filed: make(chan *review, 4)}
			e := newEnv(t, func(c *dataplane.Config) { c.Hold.Filer = rv })
			e.agent.Credentials().SetCredentials(e.bundle())
			done := make(chan answer, 1)
			go func() {
				status, body := e.do(t, "POST", e.url("heldbound.example.com", false, "/pay"), http.Header{"Content-Type": {"application/json"}}, `{"amount":12}`)
				done <- answer{status, body}
			}()
			r := rv.next(t)
			b := e.bundle()
			b.Generation = 2
			tc.change(b)
			e.agent.Credentials().SetCredentials(b)
			r.approve(7)
			a := <-done
			got := e.plain.take()
			e.waitSpans(t)
			if tc.name == "detached" {
				if a.status != http.StatusForbidden || a.body["reason_code"] != "credential_unavailable" || len(got) != 0 {
					t.Fatalf("detached while held: %d %v, upstream got %d requests; want credential_unavailable and nothing forwarded", a.status, a.body, len(got))
				}
				return
			}
			if a.status != http.StatusOK || len(got) != 1 {
				t.Fatalf("rotated while held: %d %v, upstream got %d requests", a.status, a.body, len(got))
			}
			if v := got[0].req.Header.Get("Authorization"); v != "Bearer "+rotated {
				t.Errorf("the upstream got Authorization %q, want the rotated token", v)
			}
		})
	}
}
