package decision

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// NewDenialID returns a fresh identifier for a denial.
func NewDenialID() string {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return "dn_" + hex.EncodeToString(b[:])
}

// Log keeps the last records in a bounded ring and writes every record
// to its file as a JSON line. Traffic never waits for the file: Add only
// appends to a pending list under the ring's lock, and a writer goroutine
// (Write) gathers what arrives over FlushInterval into one write.
//
// Durability and order: records reach the file in the order Add saw them,
// at most FlushInterval after their decision while the file keeps up. A
// crash of the proxy loses the records not yet written — at most those of
// the last FlushInterval, and never more than MaxUnwritten. The file is
// not fsynced (a power loss also loses what the system had not written
// back). When MaxUnwritten records await the writer (a stalled disk), a
// new record is counted as dropped from the file and logged; it stays in
// the ring. A write that fails (a full or read-only disk) is logged, its
// records and those of the next RetryAfterFailure are counted as dropped
// (they stay in the ring), then writing is tried again; enforcement never
// waits on the file.
type Log struct {
	mu      sync.Mutex
	ring    []Record
	next    int
	full    bool
	pending []Record // added, not yet taken by the writer
	// unwritten counts the records added and not yet written: pending and
	// the batch the writer holds.
	unwritten int
	added     uint64 // records added since the log was made

	out     io.Writer
	wake    chan struct{} // the writer's signal: records are pending
	dropped atomic.Int64
	log     *slog.Logger
	// retryAfter is RetryAfterFailure (tests shorten it).
	retryAfter time.Duration
}

const (
	// FlushInterval is how long the writer gathers records into one
	// write after the first of them arrives.
	FlushInterval = 10 * time.Millisecond
	// MaxUnwritten bounds the records waiting for the file.
	MaxUnwritten = 4096
	// RetryAfterFailure is how long the writer leaves the file alone
	// after a failed write.
	RetryAfterFailure = 10 * time.Second
)

// NewLog returns a log keeping the last size records, writing each to out
// (nil: none) once Write runs.
func NewLog(size int, out io.Writer, log *slog.Logger) *Log {
	d := &Log{ring: make([]Record, size), out: out, log: log, retryAfter: RetryAfterFailure}
	if out != nil {
		d.wake = make(chan struct{}, 1)
	}
	return d
}

// Add keeps r in the ring and queues it for the file; it never blocks.
func (d *Log) Add(r Record) {
	d.mu.Lock()
	d.added++
	d.ring[d.next] = r
	d.next = (d.next + 1) % len(d.ring)
	if d.next == 0 {
		d.full = true
	}
	if d.wake == nil {
		d.mu.Unlock()
		return
	}
	if d.unwritten >= MaxUnwritten {
		d.mu.Unlock()
		if n := d.dropped.Add(1); n&(n-1) == 0 { // log at 1, 2, 4, 8, …
			d.log.Warn("decision log writer is behind; records dropped from the file (kept in memory)", "dropped", n)
		}
		return
	}
	d.pending = append(d.pending, r)
	d.unwritten++
	// Wake the writer for the first record of a batch, and again when
	// half the room is taken so it writes without waiting out the
	// interval.
	signal := len(d.pending) == 1 || d.unwritten == MaxUnwritten/2
	d.mu.Unlock()
	if signal {
		select {
		case d.wake <- struct{}{}:
		default: // already signalled
		}
	}
}

// Added returns how many records have been added since the log was made.
func (d *Log) Added() uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.added
}

// Write writes the records to the file until ctx ends, then writes what
// is left. The proxy runs it for as long as it serves. After a failed
// write, records are kept in the ring only for retryAfter, then writing
// is tried again; the failure and the recovery are logged once each.
func (d *Log) Write(ctx context.Context) {
	if d.out == nil {
		return
	}
	var (
		batch    []Record
		buf      []byte
		failedAt time.Time // zero while the file takes writes
		missed   int64     // records dropped since failedAt
		timer    = time.NewTimer(FlushInterval)
	)
	timer.Stop()
	defer timer.Stop()
	flush := func() {
		d.mu.Lock()
		batch, d.pending = d.pending, batch[:0]
		d.mu.Unlock()
		if len(batch) == 0 {
			return
		}
		if failedAt.IsZero() || time.Since(failedAt) >= d.retryAfter {
			buf = buf[:0]
			for i := range batch {
				line, err := appendJSON(buf, &batch[i])
				if err != nil {
					continue // a time encoding/json cannot write either
				}
				buf = append(line, '\n')
			}
			_, err := d.out.Write(buf)
			switch {
			case err != nil && failedAt.IsZero():
				d.log.Error("decision log cannot be written; decisions stay in memory only until it can (enforcement goes on)", "err", err)
				failedAt = time.Now()
				missed += int64(len(batch))
				d.dropped.Add(int64(len(batch)))
			case err != nil:
				failedAt = time.Now() // still failing: wait again
				missed += int64(len(batch))
				d.dropped.Add(int64(len(batch)))
			case !failedAt.IsZero():
				d.log.Warn("decision log written again", "missed", missed)
				failedAt, missed = time.Time{}, 0
			}
		} else {
			missed += int64(len(batch))
			d.dropped.Add(int64(len(batch)))
		}
		d.mu.Lock()
		d.unwritten -= len(batch)
		d.mu.Unlock()
		clear(batch) // let the strings go
		if cap(buf) > 1<<20 {
			buf = nil // one burst must not keep a large buffer
		}
	}
	for {
		select {
		case <-d.wake:
		case <-ctx.Done():
			flush()
			return
		}
		// Gather what arrives over the interval (or until half the room
		// is taken) into one write.
		timer.Reset(FlushInterval)
		select {
		case <-timer.C:
		case <-d.wake:
			timer.Stop()
		case <-ctx.Done():
		}
		flush()
	}
}

// Dropped returns how many records the file has missed: the writer was
// behind, or the file could not be written.
func (d *Log) Dropped() int64 { return d.dropped.Load() }

// Snapshot returns the records in the ring, oldest first.
func (d *Log) Snapshot() []Record {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.full {
		return append([]Record(nil), d.ring[:d.next]...)
	}
	out := make([]Record, 0, len(d.ring))
	out = append(out, d.ring[d.next:]...)
	return append(out, d.ring[:d.next]...)
}
