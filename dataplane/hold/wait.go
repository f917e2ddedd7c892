package hold

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// waiter is one call's wait, on its request's goroutine: the stream to
// the gateway is opened (and opened again after a break, with the same
// key) and read by a goroutine of its own, which the waiter owns and
// waits for.
type waiter struct {
	r   *Registry
	c   *Call
	h   *held
	opt Options

	start    time.Time
	id       uint64
	deadline time.Time
	st       Stream // the stream open now, nil between two
	events   chan event
	wg       sync.WaitGroup
}

// event is what a stream's goroutine saw: the stream opened, a message,
// or the error that ended it.
type event struct {
	st     Stream
	opened bool
	msg    Message
	err    error
}

// Bounds on re-opening a broken stream: the first wait, and the longest.
const (
	firstRetry = 100 * time.Millisecond
	maxRetry   = 500 * time.Millisecond
	// endWait is how long a call's end waits for the gateway to close the
	// stream after CallEnded, so the message is read before the stream is
	// cancelled.
	endWait = time.Second
)

func (w *waiter) wait(ctx context.Context) Outcome {
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer func() {
		cancel()
		w.wg.Wait()
	}()
	w.events = make(chan event)
	w.start = time.Now()
	w.deadline = w.start.Add(w.c.Timeout)
	deadline := time.NewTimer(w.c.Timeout)
	defer deadline.Stop()
	// Armed while the gateway owes an answer: any message on the stream
	// open now. The gateway sends a heartbeat as soon as it has read the
	// call, before it files it: a gateway that is reachable but slow to
	// file (a burst of calls behind one database) is waited for, up to
	// the call's timeout, not refused as unreachable.
	unreachable := time.NewTimer(w.r.cfg.Unreachable)
	defer unreachable.Stop()
	armed := true
	progress := time.NewTicker(w.r.cfg.ProgressEvery)
	defer progress.Stop()
	var retry <-chan time.Time
	backoff := firstRetry
	w.open(sctx)
	for {
		select {
		case <-ctx.Done():
			return w.end(ReviewUnavailable, "the agent's request ended")
		case e := <-w.h.end:
			return w.end(e.code, e.reason)
		case <-deadline.C:
			return w.end(ReviewTimeout, fmt.Sprintf("no decision within the review timeout (%s)", w.c.Timeout))
		case <-unreachable.C:
			return w.end(ReviewUnavailable, fmt.Sprintf("the gateway did not answer for %s", w.r.cfg.Unreachable))
		case <-progress.C:
			w.progress()
		case <-retry:
			retry = nil
			w.open(sctx)
		case ev := <-w.events:
			if !ev.opened && ev.st != w.st {
				continue // an earlier stream's
			}
			switch {
			case ev.opened:
				w.st = ev.st
			case ev.err != nil:
				w.st = nil
				switch {
				case errors.Is(ev.err, ErrBusy):
					return Outcome{Code: ReviewBusy, Reason: ev.err.Error(), ID: w.id}
				case errors.Is(ev.err, ErrRefused):
					return Outcome{Code: ReviewUnavailable, Reason: ev.err.Error(), ID: w.id}
				}
				w.r.log.Debug("held call's stream broke", "key", w.c.Key, "err", ev.err)
				if !armed {
					unreachable.Reset(w.r.cfg.Unreachable)
					armed = true
				}
				retry = time.After(backoff)
				backoff = min(2*backoff, maxRetry)
			case ev.msg.Decision != nil:
				return w.decided(ev.msg.Decision)
			default: // filed, or a heartbeat: the gateway answers
				if f := ev.msg.Filed; f != nil {
					first := w.id == 0
					w.id, w.deadline, backoff = f.ID, f.Deadline, firstRetry
					if first {
						// The gateway expires the call at its deadline
						// (listed expired); the proxy ends it itself only
						// when that decision is late.
						deadline.Reset(w.c.Timeout + w.r.cfg.Unreachable)
						w.progress()
					}
				}
				if armed {
					unreachable.Stop()
					armed = false
				}
			}
		}
	}
}

// open opens a stream for the call and reads it until it ends or ctx
// does, on a goroutine the waiter waits for.
func (w *waiter) open(ctx context.Context) {
	w.wg.Go(func() {
		st, err := w.r.filer.Open(ctx, w.c)
		if err != nil {
			w.send(ctx, event{err: err})
			return
		}
		if !w.send(ctx, event{st: st, opened: true}) {
			return
		}
		for {
			m, err := st.Recv()
			if !w.send(ctx, event{st: st, msg: m, err: err}) || err != nil {
				return
			}
		}
	})
}

func (w *waiter) send(ctx context.Context, e event) bool {
	select {
	case w.events <- e:
		return true
	case <-ctx.Done():
		return false
	}
}

func (w *waiter) progress() {
	if w.opt.Progress != nil {
		w.opt.Progress(Progress{ID: w.id, Deadline: w.deadline, Waited: time.Since(w.start)})
	}
}

// end stops holding the call undecided: the gateway is told why
// (CallEnded) on the stream open now, which is then given endWait to
// close before it is cancelled.
func (w *waiter) end(code, reason string) Outcome {
	out := Outcome{Code: code, Reason: reason, ID: w.id}
	if w.st == nil {
		return out
	}
	if err := w.st.End(code + ": " + reason); err != nil {
		w.r.log.Debug("could not tell the gateway a held call ended", "key", w.c.Key, "err", err)
		return out
	}
	timer := time.NewTimer(endWait)
	defer timer.Stop()
	for {
		select {
		case ev := <-w.events:
			if ev.st == w.st && ev.err != nil {
				return out
			}
		case <-timer.C:
			return out
		}
	}
}

// decided is the outcome of the gateway's decision: approved only when
// it names this call's id, arguments digest and policy version.
func (w *waiter) decided(d *Decision) Outcome {
	out := Outcome{ID: w.id, DecidedBy: d.DecidedBy, Reason: d.Reason}
	switch d.Status {
	case "approved":
		if w.id == 0 || d.ID != w.id || d.ArgumentsDigest != w.c.ArgumentsDigest || d.PolicyVersion != w.c.PolicyVersion {
			out.Code = ReviewUnavailable
			out.Reason = fmt.Sprintf("the gateway's approval does not name this call (id %d, digest %s, version %d)", w.id, w.c.ArgumentsDigest, w.c.PolicyVersion)
			return out
		}
		out.Approved = true
	case "denied":
		out.Code = ReviewDenied
	case "expired":
		out.Code = ReviewTimeout
	default:
		out.Code = ReviewUnavailable
		out.Reason = "the gateway ended the call (" + d.Status + "): " + d.Reason
	}
	return out
}
