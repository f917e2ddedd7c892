package dataplanetest

import (
	"context"
	"testing"
	"time"

	"github.com/portcullis-dev/portcullis/dataplane/hold"
)

// Reviewer is the gateway's side of held calls in a test (a hold.Filer,
// for dataplane.Config.Hold.Filer): every call filed is handed to the
// test (Filed), which decides it.
type Reviewer struct{ Filed chan *Review }

// NewReviewer returns a Reviewer holding up to 8 filed calls unread.
func NewReviewer() *Reviewer { return &Reviewer{Filed: make(chan *Review, 8)} }

// Review is one held call's stream: the call as filed, and the reasons
// the proxy gave for ending it undecided (Ended).
type Review struct {
	Call  hold.Call
	Ended chan string
	ctx   context.Context
	out   chan hold.Message
}

// Open hands the call to the test.
func (rv *Reviewer) Open(ctx context.Context, c *hold.Call) (hold.Stream, error) {
	r := &Review{Call: *c, Ended: make(chan string, 1), ctx: ctx, out: make(chan hold.Message, 4)}
	rv.Filed <- r
	return r, nil
}

// Next returns the next call filed, failing the test after 10 s.
func (rv *Reviewer) Next(t testing.TB) *Review {
	t.Helper()
	select {
	case r := <-rv.Filed:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("no call was held")
		return nil
	}
}

// Recv returns what the test sent (File, Decide).
func (r *Review) Recv() (hold.Message, error) {
	select {
	case m := <-r.out:
		return m, nil
	case <-r.ctx.Done():
		return hold.Message{}, r.ctx.Err()
	}
}

// End records why the proxy ended the stream.
func (r *Review) End(reason string) error { r.Ended <- reason; return nil }

// File answers that the call was filed as id.
func (r *Review) File(id uint64) {
	r.out <- hold.Message{Filed: &hold.Filed{ID: id, Deadline: time.Now().Add(time.Minute)}}
}

// Decide sends status (approved, denied) for the call filed as id, by
// alice, naming the call as it was filed.
func (r *Review) Decide(id uint64, status string) {
	r.out <- hold.Message{Decision: &hold.Decision{ID: id, Status: status, DecidedBy: "alice", Reason: "checked",
		ArgumentsDigest: r.Call.ArgumentsDigest, PolicyVersion: r.Call.PolicyVersion}}
}
