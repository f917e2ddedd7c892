package gatewayclient

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/portcullis-dev/portcullis/dataplane/decision"
	"github.com/portcullis-dev/portcullis/decision/decisionpb"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

// Decision-log shipping: a gateway-mode proxy sends its decision records
// to the gateway in batches. Traffic never waits for it: records go into a
// bounded buffer, and when the buffer is full (the gateway unreachable for
// long) new records are counted as dropped, and the count travels with the
// next batch. A batch leaves the buffer only once the gateway said it
// stored it, so a failed send is retried (a batch stored whose answer was
// lost is stored twice: records are delivered at least once).
//
// The MCP tool definitions the proxy sees change travel the same way, in
// the same batches (ShipDecisionsRequest.tool_definitions): a buffer of
// their own (DefinitionBuffer), at most DefinitionBatch a message, kept
// until the gateway stored them. They are rare; one dropped from a full
// buffer is logged, and the tool's next change is shipped.

// ShipperConfig configures a Shipper. Zero values take the defaults.
type ShipperConfig struct {
	// Buffer bounds the records waiting to be shipped. Default 10,000.
	Buffer int
	// Batch is the most records per batch. Default 500.
	Batch int
	// Interval is the longest a record waits for a batch. Default 500ms.
	Interval time.Duration
	// DefinitionBuffer bounds the tool definition changes waiting to be
	// shipped. Default 1,024.
	DefinitionBuffer int
	// DefinitionBatch is the most tool definitions per batch. Default 256
	// (the gateway's bound).
	DefinitionBatch int
	Logger          *slog.Logger
	// OCSFDropped, if set, returns how many OCSF events the proxy's sinks
	// have dropped in all (ocsf.Emitters.Dropped); each batch carries the
	// increase since the last one the gateway took.
	OCSFDropped func() uint64
}

// Bounds on the definition bytes a shipper holds and sends at once: a
// server that lists many large, changing definitions must not grow the
// proxy, nor make a message the gateway refuses (which would stall
// shipping, decision records included).
const (
	maxBufferedDefinitionBytes = 8 << 20
	maxBatchDefinitionBytes    = 1 << 20
)

// Shipper ships decision records to the gateway.
type Shipper struct {
	cfg ShipperConfig
	log *slog.Logger

	mu       sync.Mutex
	buf      []decision.Record
	dropped  uint64 // since the last batch that carried the count
	defs     []decision.ToolDefinitionChange
	defBytes int    // the definition bytes defs holds
	defsLost uint64 // tool definition changes dropped from a full buffer, in all
	ocsfSent uint64 // of OCSFDropped, what the gateway has taken
	wake     chan struct{}
	// urgent wakes Run even while it backs off after a failure: a Flush
	// is waiting.
	urgent chan struct{}
	// offered counts the records ever buffered and shipped those the
	// gateway stored; progress is closed (and replaced) whenever shipped
	// moves or an attempt fails, so Flush can wait for a mark.
	offered, shipped uint64
	progress         chan struct{}
	// failures counts failed attempts; lastErr is the latest attempt's
	// error (nil after a success).
	failures uint64
	lastErr  error
}

// NewShipper returns a shipper; Offer buffers, Run ships.
func NewShipper(cfg ShipperConfig) *Shipper {
	if cfg.Buffer <= 0 {
		cfg.Buffer = 10_000
	}
	if cfg.Batch <= 0 {
		cfg.Batch = 500
	}
	if cfg.Interval <= 0 {
		cfg.Interval = 500 * time.Millisecond
	}
	if cfg.DefinitionBuffer <= 0 {
		cfg.DefinitionBuffer = 1024
	}
	if cfg.DefinitionBatch <= 0 {
		cfg.DefinitionBatch = 256
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Shipper{cfg: cfg, log: cfg.Logger.With("component", "shipper"), wake: make(chan struct{}, 1), urgent: make(chan struct{}, 1), progress: make(chan struct{})}
}

// Offer buffers r for shipping; it never blocks. Use it as
// Config.OnRecord. A denial (decision.Folds) finds the buffer full once
// three quarters of it are taken; an allowed or audited record only when
// all of it is.
func (s *Shipper) Offer(r decision.Record) {
	s.mu.Lock()
	// Denials may not take the buffer's last quarter: a flood of them
	// while the gateway is away leaves room for the allowed requests.
	if len(s.buf) >= s.cfg.Buffer || (decision.Folds(r.Decision) && len(s.buf) >= s.cfg.Buffer-s.cfg.Buffer/4) {
		s.dropped++
		n := s.dropped
		s.mu.Unlock()
		if n&(n-1) == 0 { // log at 1, 2, 4, 8, …
			s.log.Warn("decision shipping buffer full; records dropped (the count goes to the gateway)", "dropped", n)
		}
		return
	}
	s.buf = append(s.buf, r)
	s.offered++
	full := len(s.buf) >= s.cfg.Batch
	s.mu.Unlock()
	if full {
		s.poke()
	}
}

// OfferDefinition buffers a tool definition change for shipping; it
// never blocks. Use it as Config.OnToolDefinition.
func (s *Shipper) OfferDefinition(c decision.ToolDefinitionChange) {
	if c.After == "" && len(c.Definition) == 0 {
		return // neither a fingerprint nor a definition: nothing to keep
	}
	s.mu.Lock()
	if len(s.defs) >= s.cfg.DefinitionBuffer || s.defBytes+len(c.Definition) > maxBufferedDefinitionBytes {
		s.defsLost++
		n := s.defsLost
		s.mu.Unlock()
		if n&(n-1) == 0 { // log at 1, 2, 4, 8, …
			s.log.Warn("tool definition shipping buffer full; changes dropped", "dropped", n, "tool", c.Tool, "host", c.Host)
		}
		return
	}
	s.defs = append(s.defs, c)
	s.defBytes += len(c.Definition)
	full := len(s.defs) >= s.cfg.DefinitionBatch
	s.mu.Unlock()
	if full {
		s.poke()
	}
}

// poke wakes Run without waiting for its interval.
func (s *Shipper) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Flush asks Run to ship now (cutting short a backoff after failures)
// and returns once every record buffered before the call has been stored
// by the gateway, or with ctx's error. A proposal quoting a denial_id
// relies on it: the gateway finds the denial only once it has it.
// Records dropped from a full buffer never arrive; Flush does not wait
// for them. It needs Run to be running.
//
// When an attempt made after the call fails with the gateway unreachable
// (gRPC Unavailable: refused, reset, no route), Flush returns at once
// with that error (status.Code reads Unavailable through the wrapping),
// rather than waiting out ctx for a gateway that is not there.
func (s *Shipper) Flush(ctx context.Context) error {
	s.mu.Lock()
	mark, failures := s.offered, s.failures
	s.mu.Unlock()
	s.poke()
	select {
	case s.urgent <- struct{}{}:
	default:
	}
	for {
		s.mu.Lock()
		done, progress := s.shipped >= mark, s.progress
		failed := s.failures > failures && s.lastErr != nil && status.Code(s.lastErr) == codes.Unavailable
		lastErr := s.lastErr
		s.mu.Unlock()
		if done {
			return nil
		}
		if failed {
			return fmt.Errorf("decision records not shipped: the gateway is unreachable: %w", lastErr)
		}
		select {
		case <-progress:
		case <-ctx.Done():
			return fmt.Errorf("decision records not shipped yet: %w", context.Cause(ctx))
		}
	}
}

// PendingDefinitions returns how many tool definition changes wait to be
// shipped.
func (s *Shipper) PendingDefinitions() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.defs)
}

// Pending returns how many records wait to be shipped and how many were
// dropped since the last shipped count.
func (s *Shipper) Pending() (buffered int, dropped uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.buf), s.dropped
}

// Run ships batches through sub's gateway connections until ctx ends,
// backing off after failures (1 s doubling to 30 s, each wait drawn
// between half the bound and the bound). A batch goes to the replica of
// sub's policy stream, or to another while that one is unavailable.
func (s *Shipper) Run(ctx context.Context, sub *Subscriber) {
	client := sub.distribution()
	tick := time.NewTicker(s.cfg.Interval)
	defer tick.Stop()
	backoff := time.Duration(0)
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-s.wake:
		case <-s.urgent:
			backoff = 0 // a Flush waits: try now
		}
		if backoff > 0 {
			// Equal jitter: the proxies of a replica that went away do not
			// all come back at the same moment.
			t := time.NewTimer(backoff/2 + jitter(backoff/2))
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			case <-s.urgent:
				t.Stop()
			}
		}
		for {
			more, err := s.shipOnce(ctx, client, sub.cfg.ProxyID)
			s.attempted(err)
			if err != nil {
				backoff = min(max(2*backoff, time.Second), 30*time.Second)
				if ctx.Err() == nil {
					s.log.Warn("could not ship decision records; will retry", "err", err, "in", backoff)
				}
				break
			}
			backoff = 0
			if !more {
				break
			}
		}
	}
}

// attempted records how an attempt ended and wakes Flush when it failed.
func (s *Shipper) attempted(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lastErr = err
	if err != nil {
		s.failures++
		close(s.progress)
		s.progress = make(chan struct{})
	}
}

// shipOnce sends one batch (the oldest records and definitions) and
// removes it from the buffers once the gateway answered. more reports a
// full batch: more may be waiting.
func (s *Shipper) shipOnce(ctx context.Context, client portcullisv1.DistributionServiceClient, proxyID string) (more bool, err error) {
	s.mu.Lock()
	n := min(len(s.buf), s.cfg.Batch)
	batch := s.buf[:n:n]
	nd, ndBytes := 0, 0
	for nd < min(len(s.defs), s.cfg.DefinitionBatch) {
		b := len(s.defs[nd].Definition)
		if nd > 0 && ndBytes+b > maxBatchDefinitionBytes {
			break // the rest go in the next batch: a message stays well under the gateway's bound
		}
		nd, ndBytes = nd+1, ndBytes+b
	}
	defs := s.defs[:nd:nd]
	dropped := s.dropped
	var ocsfDropped uint64
	if s.cfg.OCSFDropped != nil {
		ocsfDropped = s.cfg.OCSFDropped() - s.ocsfSent
	}
	s.mu.Unlock()
	if n == 0 && nd == 0 && dropped == 0 && ocsfDropped == 0 {
		return false, nil
	}
	req := &portcullisv1.ShipDecisionsRequest{ProxyId: proxyID, Dropped: dropped, OcsfDropped: ocsfDropped, Records: make([]*portcullisv1.DecisionRecord, n)}
	for i := range batch {
		req.Records[i] = decisionpb.ToProto(&batch[i])
	}
	for _, c := range defs {
		req.ToolDefinitions = append(req.ToolDefinitions, definitionToProto(c))
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	st, err := client.ShipDecisions(ctx)
	if err != nil {
		return false, err
	}
	if err := st.Send(req); err != nil {
		return false, err
	}
	if _, err := st.CloseAndRecv(); err != nil {
		return false, err
	}
	s.mu.Lock()
	// Offer only appends, so the batch is still the buffers' front.
	s.buf = append(s.buf[:0], s.buf[n:]...)
	s.defs = append(s.defs[:0], s.defs[nd:]...)
	s.defBytes -= ndBytes
	s.dropped -= dropped
	s.ocsfSent += ocsfDropped
	if n > 0 {
		s.shipped += uint64(n)
		close(s.progress)
		s.progress = make(chan struct{})
	}
	s.mu.Unlock()
	return n == s.cfg.Batch || nd == s.cfg.DefinitionBatch, nil
}

// definitionToProto is a change as the gateway keeps it: the definition
// seen, with its fingerprint (the one before is the gateway's to know).
func definitionToProto(c decision.ToolDefinitionChange) *portcullisv1.ToolDefinitionSeen {
	return &portcullisv1.ToolDefinitionSeen{
		Time: timestamppb.New(c.Time), Host: c.Host, Port: uint32(c.Port), Path: c.Path, Tool: c.Tool,
		Fingerprint: c.After, Definition: string(c.Definition),
	}
}
