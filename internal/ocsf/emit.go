package ocsf

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Sink delivers encoded events (one JSON object each, no newline). A
// Write that fails loses its batch: the emitter counts it as dropped and
// never retries it. After a failure the emitter rests the sink (one
// second, doubling up to MaxRest while it keeps failing): events emitted
// meanwhile are dropped and counted at once, never built or encoded, so a
// sink that is down costs its callers next to nothing; the first batch
// after the rest tries the sink again.
type Sink interface {
	// Name says where events go, for logs and the drop report.
	Name() string
	Write(ctx context.Context, events [][]byte) error
	Close() error
}

// Config configures an Emitter.
type Config struct {
	// Queue is how many events may wait for the sink. Default 4096.
	Queue int
	// Batch is the most events handed to one Write. Default 256.
	Batch int
	// WriteTimeout bounds one Write. Default 10s.
	WriteTimeout time.Duration
	// Rest is how long a sink that failed rests before it is tried again,
	// doubling while it keeps failing, up to MaxRest. Default FirstRest.
	Rest time.Duration
	// Product names the writer in the drop report. Default Gateway.
	Product Product
	// Logger receives the sink's failures and recoveries. Default
	// slog.Default().
	Logger *slog.Logger
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// Emitter queues events for one sink and writes them on its own
// goroutine (Run). Emit never blocks.
type Emitter struct {
	cfg   Config
	sink  Sink
	queue chan func() Event

	dropped atomic.Uint64 // every event lost, for metrics
	written atomic.Uint64
	// restUntil is when a failing sink is tried again (UnixNano; 0 while
	// it takes events); rest is the current rest, Run's own.
	restUntil atomic.Int64
	rest      time.Duration

	afterWrite func() // tests: called after each write attempt

	mu         sync.Mutex
	unreported uint64 // lost since the last drop report
	since      time.Time
}

// NewEmitter returns an emitter for sink; call Run to start writing.
func NewEmitter(sink Sink, cfg Config) *Emitter {
	if cfg.Queue <= 0 {
		cfg.Queue = 4096
	}
	if cfg.Batch <= 0 {
		cfg.Batch = 256
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = 10 * time.Second
	}
	if cfg.Rest <= 0 {
		cfg.Rest = FirstRest
	}
	if cfg.Product.Name == "" {
		cfg.Product = Gateway
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Emitter{cfg: cfg, sink: sink, queue: make(chan func() Event, cfg.Queue)}
}

// Rests of a failing sink (Config.Rest).
const (
	FirstRest = time.Second
	MaxRest   = 30 * time.Second
)

// Emit queues the event build returns; build runs later on the emitter's
// goroutine, so the caller pays for the closure and a channel send only.
// When the queue is full, or the sink rests after failing, the event is
// dropped and counted.
func (e *Emitter) Emit(build func() Event) {
	if e.resting() {
		e.drop(1)
		return
	}
	select {
	case e.queue <- build:
	default:
		e.drop(1)
	}
}

// Dropped returns how many events were lost: the queue was full or the
// sink refused them.
func (e *Emitter) Dropped() uint64 { return e.dropped.Load() }

// Written returns how many events the sink took.
func (e *Emitter) Written() uint64 { return e.written.Load() }

func (e *Emitter) drop(n int) {
	e.dropped.Add(uint64(n))
	e.mu.Lock()
	if e.unreported == 0 {
		e.since = e.cfg.Now()
	}
	e.unreported += uint64(n)
	e.mu.Unlock()
}

// Run writes queued events until ctx ends, then writes what is still
// queued (bounded by WriteTimeout) and closes the sink.
func (e *Emitter) Run(ctx context.Context) {
	defer e.sink.Close()
	down := false
	batch := make([]func() Event, 0, e.cfg.Batch)
	for {
		select {
		case <-ctx.Done():
			// Drain with a fresh bounded context, never the ended one.
			fin, cancel := context.WithTimeout(context.Background(), e.cfg.WriteTimeout)
			defer cancel()
			for {
				batch = batch[:0]
				for len(batch) < e.cfg.Batch {
					select {
					case b := <-e.queue:
						batch = append(batch, b)
						continue
					default:
					}
					break
				}
				if len(batch) == 0 {
					return
				}
				down = e.write(fin, batch, down)
			}
		case b := <-e.queue:
			batch = append(batch[:0], b)
		more:
			for len(batch) < e.cfg.Batch {
				select {
				case b := <-e.queue:
					batch = append(batch, b)
				default:
					break more
				}
			}
			wctx, cancel := context.WithTimeout(ctx, e.cfg.WriteTimeout)
			down = e.write(wctx, batch, down)
			cancel()
		}
	}
}

// resting reports whether the sink rests after failing.
func (e *Emitter) resting() bool {
	until := e.restUntil.Load()
	return until != 0 && e.cfg.Now().UnixNano() < until
}

// write hands one batch to the sink and, once the sink takes events
// after losing some, reports the loss. It returns whether the sink is
// down. A batch taken while the sink rests is dropped unbuilt.
func (e *Emitter) write(ctx context.Context, batch []func() Event, down bool) bool {
	if e.afterWrite != nil {
		defer e.afterWrite()
	}
	if e.resting() {
		e.drop(len(batch))
		return down
	}
	lines := make([][]byte, 0, len(batch))
	for _, b := range batch {
		ev := b()
		line, err := json.Marshal(ev)
		if err != nil { // our own types always encode; never expected
			e.cfg.Logger.Error("encode OCSF event", "class_uid", ev.ClassUID, "err", err)
			e.drop(1)
			continue
		}
		lines = append(lines, line)
	}
	if len(lines) == 0 {
		return down
	}
	if err := e.sink.Write(ctx, lines); err != nil {
		e.drop(len(lines))
		if !down {
			e.cfg.Logger.Warn("OCSF sink is failing; events are dropped and counted until it recovers", "sink", e.sink.Name(), "err", err)
		}
		e.rest = min(max(2*e.rest, e.cfg.Rest), MaxRest)
		e.restUntil.Store(e.cfg.Now().Add(e.rest).UnixNano())
		return true
	}
	e.rest = 0
	e.restUntil.Store(0)
	e.written.Add(uint64(len(lines)))
	e.mu.Lock()
	n, since := e.unreported, e.since
	e.unreported = 0
	e.mu.Unlock()
	if n == 0 {
		return false
	}
	report, _ := json.Marshal(SinkDrops(e.sink.Name(), n, since, e.cfg.Now(), e.cfg.Product))
	if err := e.sink.Write(ctx, [][]byte{report}); err != nil {
		e.mu.Lock()
		if e.unreported == 0 {
			e.since = since
		}
		e.unreported += n
		e.mu.Unlock()
		return true
	}
	e.written.Add(1)
	e.cfg.Logger.Info("OCSF sink recovered", "sink", e.sink.Name(), "dropped", n, "since", since)
	return false
}

// Emitters is every configured sink's emitter; Emit queues to each.
type Emitters []*Emitter

// Emit queues build for every emitter.
func (es Emitters) Emit(build func() Event) {
	for _, e := range es {
		e.Emit(build)
	}
}

// Dropped sums the emitters' drops.
func (es Emitters) Dropped() uint64 {
	var n uint64
	for _, e := range es {
		n += e.Dropped()
	}
	return n
}

// Run runs every emitter until ctx ends and all have closed their sinks.
func (es Emitters) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, e := range es {
		wg.Go(func() { e.Run(ctx) })
	}
	wg.Wait()
}

// Close closes the sink of an emitter that never ran (Run closes it when
// it returns).
func (e *Emitter) Close() error { return e.sink.Close() }
