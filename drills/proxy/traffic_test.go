//go:build drills

package proxy

import (
	"fmt"
	"sync"
	"time"
)

// traffic drives GETs through a proxy, one after another, cycling through
// paths, and keeps every outcome.
type traffic struct {
	stop chan struct{}
	done chan struct{}

	mu       sync.Mutex
	outcomes []outcome
}

type outcome struct {
	sent, answered time.Time
	path           string // the path's prefix: "allowed", "denied", …
	status         int    // 0: no answer
	err            error
}

// drive starts requests through p to upstream, for /PREFIX/n of each
// prefix in turn, pausing pause between two.
func drive(p *proxy, upstream string, pause time.Duration, prefixes ...string) *traffic {
	tr := &traffic{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(tr.done)
		for i := 0; ; i++ {
			select {
			case <-tr.stop:
				return
			default:
			}
			prefix := prefixes[i%len(prefixes)]
			o := outcome{sent: time.Now(), path: prefix}
			o.status, o.err = p.get(upstream, fmt.Sprintf("/%s/%d", prefix, i))
			o.answered = time.Now()
			tr.mu.Lock()
			tr.outcomes = append(tr.outcomes, o)
			tr.mu.Unlock()
			time.Sleep(pause)
		}
	}()
	return tr
}

func (tr *traffic) halt() []outcome {
	close(tr.stop)
	<-tr.done
	return tr.snapshot()
}

func (tr *traffic) snapshot() []outcome {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return append([]outcome(nil), tr.outcomes...)
}

// firstAfter returns the first outcome sent at or after from for which ok
// holds, waiting up to within for it.
func (tr *traffic) firstAfter(from time.Time, within time.Duration, ok func(outcome) bool) (outcome, bool) {
	deadline := time.Now().Add(within)
	seen := 0
	for {
		all := tr.snapshot()
		for _, o := range all[seen:] {
			if !o.sent.Before(from) && ok(o) {
				return o, true
			}
		}
		seen = len(all)
		if time.Now().After(deadline) {
			return outcome{}, false
		}
		time.Sleep(5 * time.Millisecond)
	}
}
