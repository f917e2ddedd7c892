package hold

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"time"
)

// The reason codes of a held call that is not forwarded.
const (
	ReviewDenied      = "review_denied"
	ReviewTimeout     = "review_timeout"
	ReviewUnavailable = "review_unavailable"
	ReviewStale       = "review_stale"
	ReviewBusy        = "review_busy"
)

// Call is what the proxy files for one held call (the gateway's
// CallToHold, without what the Filer adds: sandbox, proxy id, instance).
type Call struct {
	// Key is the proxy's own name for the call, random: a stream opened
	// again sends it again and re-attaches.
	Key             string
	Binary          string
	Host            string
	Port            int
	Method, Path    string
	MCPMethod, Tool string
	// ArgumentsJSON are the arguments exactly as sent (CallOf);
	// ArgumentsDigest their digest.
	ArgumentsJSON   string
	ArgumentsDigest string
	PolicyVersion   uint32
	Entry, Rule     string
	TraceID         string
	// Timeout is the rule's review timeout: the call is refused
	// review_timeout once it has waited that long.
	Timeout time.Duration
}

// Filed says the gateway stored the call: its id and deadline.
type Filed struct {
	ID       uint64
	Deadline time.Time
}

// Decision ends a held call (the gateway's CallDecision).
type Decision struct {
	ID              uint64
	Status          string // "approved", "denied", "expired", "failed"
	Reason          string
	DecidedBy       string
	ArgumentsDigest string
	PolicyVersion   uint32
}

// Message is one message of the gateway on a call's stream: Filed, a
// Decision, or neither (a heartbeat).
type Message struct {
	Filed    *Filed
	Decision *Decision
}

// Filer files held calls with the gateway: dataplane/gatewayclient's
// HoldCall client implements it.
type Filer interface {
	// Open opens a stream for c and sends it (the same Key re-attaches to
	// a call filed before). The stream lives until ctx ends. An error
	// wrapping ErrBusy is a gateway that refuses to hold more.
	Open(ctx context.Context, c *Call) (Stream, error)
}

// Stream is one call's stream to the gateway.
type Stream interface {
	// Recv returns the gateway's next message; an error ends the stream
	// (wrapping ErrBusy when the gateway refused to hold the call).
	Recv() (Message, error)
	// End tells the gateway the proxy stopped holding the call undecided,
	// and why (CallEnded), and closes the sending side.
	End(reason string) error
}

// Errors a Filer's error wraps: the gateway refuses to hold more calls
// (ResourceExhausted: review_busy), or refuses this call in a way trying
// again would not change (its fields, the token's rights, a gateway that
// does not hold calls: review_unavailable at once, saying why).
var (
	ErrBusy    = errors.New("the gateway holds as many calls as it may")
	ErrRefused = errors.New("the gateway refused the call")
)

// Config configures a Registry. Zero values take the defaults.
type Config struct {
	// MaxCalls bounds the calls held at once. Default 16.
	MaxCalls int
	// MaxBytes bounds the bytes held calls keep (their bodies). Default
	// 16 MiB.
	MaxBytes int64
	// Unreachable is how long the gateway may go unheard (no filed
	// answer, a broken stream not re-attached) before a call is refused
	// review_unavailable. Default 2s.
	Unreachable time.Duration
	// ProgressEvery is the interval of progress while a call waits.
	// Default 5s.
	ProgressEvery time.Duration
	// Filer files calls with the gateway (SetFiler sets it later). nil:
	// none, every call is refused review_unavailable, saying NoFiler.
	Filer Filer
	// NoFiler is why calls cannot be filed while no Filer is set. Default:
	// "this proxy has no gateway (it enforces a policy file)".
	NoFiler string
	Logger  *slog.Logger
}

func (c *Config) setDefaults() {
	if c.MaxCalls <= 0 {
		c.MaxCalls = 16
	}
	if c.MaxBytes <= 0 {
		c.MaxBytes = 16 << 20
	}
	if c.Unreachable <= 0 {
		c.Unreachable = 2 * time.Second
	}
	if c.ProgressEvery <= 0 {
		c.ProgressEvery = 5 * time.Second
	}
	if c.NoFiler == "" {
		c.NoFiler = "this proxy has no gateway (it enforces a policy file)"
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Registry is the proxy's held calls. It is safe for concurrent use.
type Registry struct {
	cfg   Config
	log   *slog.Logger
	filer Filer

	mu     sync.Mutex
	calls  map[*held]struct{}
	bytes  int64
	closed bool
	// placed counts the calls admitted and not yet released (Close waits
	// for them).
	placed sync.WaitGroup
}

// held is one call waiting; end tells its waiter to stop holding it.
type held struct {
	size  int64
	stale func() string
	end   chan ended
}

type ended struct{ code, reason string }

// New returns an empty registry; without a Filer calls are refused
// review_unavailable until SetFiler.
func New(cfg Config) *Registry {
	cfg.setDefaults()
	return &Registry{cfg: cfg, log: cfg.Logger.With("component", "hold"), filer: cfg.Filer, calls: map[*held]struct{}{}}
}

// SetFiler sets how calls are filed; before any call is held.
func (r *Registry) SetFiler(f Filer) { r.filer = f }

// Held returns how many calls are held, and their bytes.
func (r *Registry) Held() (int, int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.calls), r.bytes
}

// Options are a held call's ties to its request.
type Options struct {
	// Size is the bytes the call keeps (its body), counted against
	// MaxBytes.
	Size int64
	// Stale, if set, judges the call again by the policy now in force
	// (Recheck): "" keeps holding it, anything else is why it is refused
	// review_stale.
	Stale func() string
	// Progress, if set, hears that the call waits: when it is filed and
	// every ProgressEvery after. It is called on Hold's goroutine.
	Progress func(Progress)
}

// Progress is where a waiting call stands.
type Progress struct {
	ID       uint64 // 0 until filed
	Deadline time.Time
	Waited   time.Duration
}

// Outcome is how a held call ended.
type Outcome struct {
	// Approved: forward the call (once). Otherwise Code is the reason
	// code and Reason says why.
	Approved     bool
	Code, Reason string
	// ID is the call's id at the gateway (0 if never filed); DecidedBy
	// who decided it.
	ID        uint64
	DecidedBy string
}

// Hold files c and waits until it is decided, refused, or ctx ends (the
// agent went away). It holds no lock while it waits. The call keeps its
// place within the bounds (and Close waits for it) until release is
// called: once the agent is answered (an approved call, once forwarded).
func (r *Registry) Hold(ctx context.Context, c *Call, opt Options) (_ Outcome, release func()) {
	h := &held{size: opt.Size, stale: opt.Stale, end: make(chan ended, 1)}
	if out, ok := r.admit(h); !ok {
		return out, func() {}
	}
	release = sync.OnceFunc(func() { r.release(h) })
	if r.filer == nil {
		return Outcome{Code: ReviewUnavailable, Reason: r.cfg.NoFiler + ": a call that needs review cannot be filed"}, release
	}
	w := waiter{r: r, c: c, h: h, opt: opt}
	return w.wait(ctx), release
}

func (r *Registry) admit(h *held) (Outcome, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.closed:
		return Outcome{Code: ReviewUnavailable, Reason: "the proxy is stopping"}, false
	case len(r.calls) >= r.cfg.MaxCalls:
		return Outcome{Code: ReviewBusy, Reason: "the proxy holds as many calls as it may (" + strconv.Itoa(r.cfg.MaxCalls) + ")"}, false
	case r.bytes+h.size > r.cfg.MaxBytes:
		return Outcome{Code: ReviewBusy, Reason: "the calls held would keep more than the proxy's bound (" + strconv.FormatInt(r.cfg.MaxBytes, 10) + " bytes)"}, false
	}
	r.calls[h] = struct{}{}
	r.bytes += h.size
	r.placed.Add(1)
	return Outcome{}, true
}

func (r *Registry) release(h *held) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.calls, h)
	r.bytes -= h.size
	r.placed.Done()
}

func (r *Registry) snapshot() []*held {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*held, 0, len(r.calls))
	for h := range r.calls {
		out = append(out, h)
	}
	return out
}

// Recheck judges every held call again (Options.Stale) — after a new
// policy version, and as time passes (a grant's expires_at) — and those
// no longer allowed are refused review_stale.
func (r *Registry) Recheck() {
	for _, h := range r.snapshot() {
		if h.stale == nil {
			continue
		}
		if why := h.stale(); why != "" {
			h.stop(ended{ReviewStale, "the policy in force no longer allows the call: " + why})
		}
	}
}

// Close ends every held call (review_unavailable: the proxy is stopping),
// refuses those held after, and waits until every call is released (its
// agent answered), or ctx ends.
func (r *Registry) Close(ctx context.Context) {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	for _, h := range r.snapshot() {
		h.stop(ended{ReviewUnavailable, "the proxy is stopping"})
	}
	released := make(chan struct{})
	go func() {
		r.placed.Wait()
		close(released)
	}()
	select {
	case <-released:
	case <-ctx.Done():
	}
}

func (h *held) stop(e ended) {
	select {
	case h.end <- e:
	default: // already told
	}
}
