package exetrim

import (
	"context"
	"log/slog"
	"runtime/debug"
	"time"
)

// Schedule releases a server's memory between bursts of work: Settle
// after Ready closes (its start-up done), and again, with the heap the Go
// runtime no longer uses, whenever Activity's count has stood still for
// Idle after moving. A server idle since its last release is left alone:
// what it mapped since is what it runs.
type Schedule struct {
	Ready    <-chan struct{} // closed once the server does its work (the proxy: its first policy version)
	Activity func() uint64   // a count of the work done (the proxy: decisions)
	Settle   time.Duration
	Idle     time.Duration
	Logger   *slog.Logger

	release func(afterWork bool) // tests' seam; nil: Release, after work debug.FreeOSMemory too
}

// Run releases as the schedule says until ctx ends.
func (s Schedule) Run(ctx context.Context) {
	if s.release == nil {
		s.release = s.releaseMemory
	}
	select {
	case <-s.Ready:
	case <-ctx.Done():
		return
	}
	timer := time.NewTimer(s.Settle)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-ctx.Done():
		return
	}
	released := s.Activity()
	s.release(false)
	tick := time.NewTicker(s.Idle)
	defer tick.Stop()
	last := released
	for {
		select {
		case <-tick.C:
		case <-ctx.Done():
			return
		}
		n := s.Activity()
		if n == last && n != released {
			s.release(true)
			released = n
		}
		last = n
	}
}

func (s Schedule) releaseMemory(afterWork bool) {
	if afterWork {
		debug.FreeOSMemory()
	}
	n, err := Release()
	if err != nil {
		s.Logger.Warn("could not release the executable's pages", "err", err)
		return
	}
	s.Logger.Debug("released the executable's pages", "bytes", n, "after_traffic", afterWork)
}
