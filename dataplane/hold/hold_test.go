package hold_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/portcullis-dev/portcullis/dataplane/hold"
)

// Every wait ends its stream's goroutine before Hold returns.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// gateway is an in-test Filer: each Open is handed to the test, which
// answers on the stream as the gateway would.
type gateway struct {
	opens chan *stream
	err   error // Open's error, when set
}

func newGateway() *gateway { return &gateway{opens: make(chan *stream, 16)} }

func (g *gateway) Open(ctx context.Context, c *hold.Call) (hold.Stream, error) {
	if g.err != nil {
		return nil, g.err
	}
	s := &stream{ctx: ctx, call: *c, out: make(chan reply, 4), closed: make(chan struct{}), ended: make(chan string, 1)}
	g.opens <- s
	return s, nil
}

type reply struct {
	msg hold.Message
	err error
}

type stream struct {
	ctx       context.Context
	call      hold.Call
	out       chan reply
	closed    chan struct{}
	ended     chan string
	closeOnce sync.Once
}

func (s *stream) Recv() (hold.Message, error) {
	select {
	case r := <-s.out:
		return r.msg, r.err
	case <-s.closed:
		return hold.Message{}, io.EOF
	case <-s.ctx.Done():
		return hold.Message{}, s.ctx.Err()
	}
}

// End is CallEnded: the gateway records it and closes the stream.
func (s *stream) End(reason string) error {
	s.ended <- reason
	s.closeOnce.Do(func() { close(s.closed) })
	return nil
}

func (s *stream) filed(id uint64) {
	s.out <- reply{msg: hold.Message{Filed: &hold.Filed{ID: id, Deadline: time.Now().Add(time.Minute)}}}
}

func (s *stream) decide(d hold.Decision) { s.out <- reply{msg: hold.Message{Decision: &d}} }

func next(t *testing.T, g *gateway) *stream {
	t.Helper()
	select {
	case s := <-g.opens:
		return s
	case <-time.After(10 * time.Second):
		t.Fatal("the call was never filed")
		return nil
	}
}

func call() *hold.Call {
	return &hold.Call{Key: "k1", Tool: "refund", ArgumentsJSON: `{"order":1}`, ArgumentsDigest: "sha256:aa", PolicyVersion: 3, Timeout: time.Minute}
}

// holding runs Hold on its own goroutine; the channel gives its outcome.
func holding(r *hold.Registry, c *hold.Call, opt hold.Options) <-chan hold.Outcome {
	done := make(chan hold.Outcome, 1)
	go func() { done <- holdNow(r, context.Background(), c, opt) }()
	return done
}

// holdNow is Hold, its place released as soon as it returns.
func holdNow(r *hold.Registry, ctx context.Context, c *hold.Call, opt hold.Options) hold.Outcome {
	out, release := r.Hold(ctx, c, opt)
	release()
	return out
}

func outcome(t *testing.T, done <-chan hold.Outcome) hold.Outcome {
	t.Helper()
	select {
	case out := <-done:
		return out
	case <-time.After(10 * time.Second):
		t.Fatal("the held call never ended")
		return hold.Outcome{}
	}
}

func newRegistry(g *gateway, cfg hold.Config) *hold.Registry {
	r := hold.New(cfg)
	if g != nil {
		r.SetFiler(g)
	}
	return r
}

func TestDecisions(t *testing.T) {
	approve := hold.Decision{ID: 7, Status: "approved", DecidedBy: "alice", ArgumentsDigest: "sha256:aa", PolicyVersion: 3}
	for _, tc := range []struct {
		name     string
		decide   func(hold.Decision) hold.Decision
		approved bool
		code     string
	}{
		{"approved, naming the call", func(d hold.Decision) hold.Decision { return d }, true, ""},
		{"approval of another call", func(d hold.Decision) hold.Decision { d.ID = 8; return d }, false, hold.ReviewUnavailable},
		{"approval of other arguments", func(d hold.Decision) hold.Decision { d.ArgumentsDigest = "sha256:bb"; return d }, false, hold.ReviewUnavailable},
		{"approval under another version", func(d hold.Decision) hold.Decision { d.PolicyVersion = 4; return d }, false, hold.ReviewUnavailable},
		{"denied", func(d hold.Decision) hold.Decision { d.Status = "denied"; return d }, false, hold.ReviewDenied},
		{"expired", func(d hold.Decision) hold.Decision { d.Status = "expired"; return d }, false, hold.ReviewTimeout},
		{"failed", func(d hold.Decision) hold.Decision { d.Status = "failed"; return d }, false, hold.ReviewUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newGateway()
			r := newRegistry(g, hold.Config{})
			done := holding(r, call(), hold.Options{Size: 10})
			s := next(t, g)
			if s.call.Key != "k1" || s.call.ArgumentsJSON != `{"order":1}` {
				t.Errorf("filed %+v", s.call)
			}
			s.filed(7)
			s.decide(tc.decide(approve))
			out := outcome(t, done)
			if out.Approved != tc.approved || out.Code != tc.code || out.ID != 7 {
				t.Errorf("outcome %+v, want approved %v, code %q, id 7", out, tc.approved, tc.code)
			}
			if tc.approved && out.DecidedBy != "alice" {
				t.Errorf("decided by %q", out.DecidedBy)
			}
			if n, b := r.Held(); n != 0 || b != 0 {
				t.Errorf("after the outcome the registry holds %d calls, %d bytes", n, b)
			}
		})
	}
}

// A gateway that says it has the call (a heartbeat, before it files it)
// and is slow to file it — a burst of calls queued behind one database —
// is reachable: the call is not refused after the unreachable bound, and
// its approval releases it.
func TestSlowFilingIsNotUnreachable(t *testing.T) {
	g := newGateway()
	r := newRegistry(g, hold.Config{Unreachable: 50 * time.Millisecond})
	done := holding(r, call(), hold.Options{Size: 10})
	s := next(t, g)
	s.out <- reply{msg: hold.Message{}} // the heartbeat
	time.Sleep(200 * time.Millisecond)  // four times the bound, still filing
	select {
	case out := <-done:
		t.Fatalf("a reachable gateway's call ended before it was filed: %+v", out)
	default:
	}
	s.filed(7)
	s.decide(hold.Decision{ID: 7, Status: "approved", DecidedBy: "alice", ArgumentsDigest: "sha256:aa", PolicyVersion: 3})
	if out := outcome(t, done); !out.Approved {
		t.Errorf("outcome %+v, want approved", out)
	}
}

// A call ends at the proxy on its own: the gateway is told why
// (CallEnded) and the agent hears the code.
func TestEndsAtTheProxy(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cfg   hold.Config
		call  func(*hold.Call)
		file  bool // the gateway answers filed
		act   func(*hold.Registry)
		code  string
		notes string // in the reason
	}{
		{"timeout", hold.Config{Unreachable: 50 * time.Millisecond}, func(c *hold.Call) { c.Timeout = 50 * time.Millisecond }, true, nil, hold.ReviewTimeout, "review timeout"},
		{"gateway silent", hold.Config{Unreachable: 50 * time.Millisecond}, nil, false, nil, hold.ReviewUnavailable, "did not answer"},
		{"stale", hold.Config{}, nil, true, (*hold.Registry).Recheck, hold.ReviewStale, "no longer allows"},
		{"shutdown", hold.Config{}, nil, true, func(r *hold.Registry) { r.Close(context.Background()) }, hold.ReviewUnavailable, "stopping"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newGateway()
			r := newRegistry(g, tc.cfg)
			c := call()
			if tc.call != nil {
				tc.call(c)
			}
			filed := make(chan struct{})
			done := holding(r, c, hold.Options{
				Stale:    func() string { return "tools/call refund is denied" },
				Progress: func(p hold.Progress) { close(filed) },
			})
			s := next(t, g)
			if tc.file {
				s.filed(9)
				<-filed
			}
			if tc.act != nil {
				tc.act(r)
			}
			out := outcome(t, done)
			if out.Approved || out.Code != tc.code || !strings.Contains(out.Reason, tc.notes) {
				t.Errorf("outcome %+v, want %s naming %q", out, tc.code, tc.notes)
			}
			if why := <-s.ended; !strings.HasPrefix(why, tc.code+": ") {
				t.Errorf("the gateway was told %q", why)
			}
		})
	}
}

// A call still allowed after a new version keeps waiting.
func TestRecheckKeepsAllowed(t *testing.T) {
	g := newGateway()
	r := newRegistry(g, hold.Config{})
	filed := make(chan struct{})
	done := holding(r, call(), hold.Options{Stale: func() string { return "" }, Progress: func(hold.Progress) { close(filed) }})
	s := next(t, g)
	s.filed(7)
	<-filed
	r.Recheck()
	s.decide(hold.Decision{ID: 7, Status: "approved", ArgumentsDigest: "sha256:aa", PolicyVersion: 3})
	if out := outcome(t, done); !out.Approved {
		t.Errorf("outcome %+v, want approved", out)
	}
}

// A broken stream is opened again with the same key, and the decision on
// the new stream counts.
func TestReattach(t *testing.T) {
	g := newGateway()
	r := newRegistry(g, hold.Config{})
	done := holding(r, call(), hold.Options{})
	first := next(t, g)
	first.filed(7)
	first.out <- reply{err: errors.New("connection reset")}
	second := next(t, g)
	if second.call.Key != first.call.Key {
		t.Errorf("re-opened with key %q, filed with %q", second.call.Key, first.call.Key)
	}
	second.filed(7)
	second.decide(hold.Decision{ID: 7, Status: "approved", ArgumentsDigest: "sha256:aa", PolicyVersion: 3})
	if out := outcome(t, done); !out.Approved {
		t.Errorf("outcome %+v, want approved", out)
	}
}

// A stream that stays broken past the bound refuses the call.
func TestBrokenStreamNotReattached(t *testing.T) {
	g := newGateway()
	r := newRegistry(g, hold.Config{Unreachable: 100 * time.Millisecond})
	done := holding(r, call(), hold.Options{})
	s := next(t, g)
	s.filed(7)
	g.err = errors.New("connection refused") // every later Open fails (set before the break: no Open races it)
	s.out <- reply{err: errors.New("connection reset")}
	out := outcome(t, done)
	if out.Code != hold.ReviewUnavailable || out.ID != 7 {
		t.Errorf("outcome %+v, want review_unavailable of call 7", out)
	}
}

func TestBounds(t *testing.T) {
	g := newGateway()
	r := newRegistry(g, hold.Config{MaxCalls: 2, MaxBytes: 100})
	var dones []<-chan hold.Outcome
	var streams []*stream
	for i := range 2 {
		dones = append(dones, holding(r, call(), hold.Options{Size: 40}))
		streams = append(streams, next(t, g))
		streams[i].filed(uint64(i + 1))
	}
	if n, b := r.Held(); n != 2 || b != 80 {
		t.Errorf("holds %d calls, %d bytes; want 2, 80", n, b)
	}
	out := holdNow(r, context.Background(), call(), hold.Options{Size: 1})
	if out.Code != hold.ReviewBusy || !strings.Contains(out.Reason, "(2)") {
		t.Errorf("a third call: %+v, want review_busy naming the count", out)
	}
	// One call decided makes room for one call, within the bytes.
	streams[0].decide(hold.Decision{ID: 1, Status: "denied"})
	outcome(t, dones[0])
	out = holdNow(r, context.Background(), call(), hold.Options{Size: 61})
	if out.Code != hold.ReviewBusy || !strings.Contains(out.Reason, "100 bytes") {
		t.Errorf("a call past the bytes: %+v, want review_busy naming the bound", out)
	}
	select {
	case s := <-g.opens:
		t.Fatalf("a refused call was filed: %+v", s.call)
	default:
	}
	r.Close(context.Background())
	outcome(t, dones[1])
	if out := holdNow(r, context.Background(), call(), hold.Options{}); out.Code != hold.ReviewUnavailable {
		t.Errorf("after Close: %+v", out)
	}
}

func TestGatewayBusy(t *testing.T) {
	g := newGateway()
	g.err = fmt.Errorf("%w: 100 calls held", hold.ErrBusy)
	r := newRegistry(g, hold.Config{})
	if out := holdNow(r, context.Background(), call(), hold.Options{}); out.Code != hold.ReviewBusy {
		t.Errorf("outcome %+v, want review_busy", out)
	}
}

// A call the gateway refuses is refused at once, saying why.
func TestGatewayRefuses(t *testing.T) {
	g := newGateway()
	g.err = fmt.Errorf("%w (InvalidArgument): call.arguments_json is too long", hold.ErrRefused)
	r := newRegistry(g, hold.Config{})
	if out := holdNow(r, context.Background(), call(), hold.Options{}); out.Code != hold.ReviewUnavailable || !strings.Contains(out.Reason, "too long") {
		t.Errorf("outcome %+v, want review_unavailable saying why", out)
	}
}

func TestNoGateway(t *testing.T) {
	r := newRegistry(nil, hold.Config{NoFiler: "this proxy enforces a policy file"})
	out := holdNow(r, context.Background(), call(), hold.Options{})
	if out.Code != hold.ReviewUnavailable || !strings.Contains(out.Reason, "policy file") {
		t.Errorf("outcome %+v, want review_unavailable saying why", out)
	}
}

// The agent going away ends the call at the gateway too.
func TestAgentGone(t *testing.T) {
	g := newGateway()
	r := newRegistry(g, hold.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan hold.Outcome, 1)
	go func() { done <- holdNow(r, ctx, call(), hold.Options{}) }()
	s := next(t, g)
	s.filed(7)
	cancel()
	if out := outcome(t, done); out.Approved {
		t.Errorf("outcome %+v", out)
	}
	if why := <-s.ended; !strings.Contains(why, "agent") {
		t.Errorf("the gateway was told %q", why)
	}
}

// A call keeps its place until its agent is answered: the bounds count
// it, and Close waits for it.
func TestCloseWaitsForAnswers(t *testing.T) {
	g := newGateway()
	r := newRegistry(g, hold.Config{})
	type held struct {
		out     hold.Outcome
		release func()
	}
	done := make(chan held, 1)
	go func() {
		out, release := r.Hold(context.Background(), call(), hold.Options{Size: 10})
		done <- held{out, release}
	}()
	s := next(t, g)
	s.filed(7)
	s.decide(hold.Decision{ID: 7, Status: "approved", ArgumentsDigest: "sha256:aa", PolicyVersion: 3})
	h := <-done
	if n, b := r.Held(); !h.out.Approved || n != 1 || b != 10 {
		t.Fatalf("approved, being forwarded: %+v, holds %d calls, %d bytes", h.out, n, b)
	}
	closed := make(chan struct{})
	go func() {
		r.Close(context.Background())
		close(closed)
	}()
	select {
	case <-closed:
		t.Fatal("Close returned before the call was answered")
	case <-time.After(50 * time.Millisecond):
	}
	h.release()
	<-closed
	if n, b := r.Held(); n != 0 || b != 0 {
		t.Errorf("after release: %d calls, %d bytes", n, b)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r.Close(ctx) // nothing to wait for
}
