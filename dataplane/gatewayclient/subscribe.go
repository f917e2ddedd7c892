package gatewayclient

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/portcullis-dev/portcullis/internal/atomicfile"
	"github.com/portcullis-dev/portcullis/internal/ca"
	"github.com/portcullis-dev/portcullis/internal/signing"
	"github.com/portcullis-dev/portcullis/policy"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
	"github.com/portcullis-dev/portcullis/provider"
)

// The policy subscription: a proxy in gateway mode streams its sandbox's
// signed versions from the gateway, verifies each against the gateway key
// it pinned, applies it with the same atomic swap as file mode, keeps the
// last good one in its data dir, and answers ACK or NACK. Started while
// the gateway is unreachable it enforces the version it kept, verified
// again; with none (or a forged one) it denies everything.
//
// It applies only a version that descends from the one it holds (descends):
// each version names, signed, its parent's lineage, a hash over the whole
// history before it. A version with the number held and another content,
// or a newer one whose history does not pass through the version held, is
// a fork — a replica on a restored or forked store — and is refused (NACK
// with fork set), logged at Error and counted (Forks); so is a newer one
// without a parent once the version held has one (it cannot be checked,
// and stripping a parent takes only removing two fields), and the
// version held sent again without its parent keeps the parent held, in
// the data dir too (a legacy version is taken on its number only while
// the proxy holds no lineage). The proxy keeps enforcing what it holds
// until an operator settles which history stands, and leaves that replica
// as one that failed, for another that may serve its history (it comes
// back to it after the replica's backoff).

// Files in the data dir.
const (
	stateFile      = "policy.signed" // the last good SignedPolicy, protobuf
	gatewayKeyFile = "gateway.key"   // the pinned key, FormatPublicKey form
)

// SubscribeConfig configures a Subscriber.
type SubscribeConfig struct {
	// Gateway is the gateway's URL (http://host:port or https://…), and
	// Gateways more replicas of it: the proxy uses one at a time, moves
	// to another when it fails or asks the proxy to go away, and resolves
	// each name into all its addresses (fleet.go). At least one is
	// required.
	Gateway  string
	Gateways []string
	Sandbox  string
	// Token returns the sandbox token; it is asked again for every RPC,
	// so a token file rewritten after a rotation is picked up.
	Token   func() (string, error)
	ProxyID string
	// DataDir keeps the last good version and the pinned key.
	DataDir string
	// GatewayKey pins the gateway's key; nil pins the key of the first
	// version received (and keeps it in DataDir).
	GatewayKey ed25519.PublicKey
	// RootCAs verifies an https gateway (nil: the system roots).
	RootCAs *x509.CertPool
	// Build is the proxy's software version, shown in proxies list.
	Build string
	// Credentials holds the providers' secrets the gateway seals to this
	// run's credential key (nil: the proxy asks for none, and requests
	// bound to a provider are denied).
	Credentials CredentialHolder
	// Heartbeat is the interval of heartbeats. Default 10s; the stream is
	// dead after three without an answer.
	Heartbeat time.Duration
	// MinBackoff and MaxBackoff bound the wait before reconnecting to a
	// replica. Defaults 100ms and 30s; each wait is drawn at random up to
	// the bound (full jitter), which doubles per failure of that replica
	// and starts over after a stream that lasted MaxBackoff.
	MinBackoff, MaxBackoff time.Duration
	Logger                 *slog.Logger
	// Refuse, if set, is asked about every verified version before it is
	// applied; an error refuses it (NACK) as a failed compile would. It is
	// a test seam: end-to-end tests make a proxy refuse a version as one
	// too old for a new feature would.
	Refuse func(*policy.Policy) error
	// Tracer, if set, makes a span of each version received — verify,
	// apply, keep, answer — the child of the gateway's push span its
	// message names (trace.go). Default nil: no spans.
	Tracer trace.TracerProvider
	// Now is the proxy's clock, which heartbeats carry and GatewayAhead
	// measures against. Default time.Now.
	Now func() time.Time
	// ExitOnAuthFailure makes Run return an error wrapping
	// ErrTokenRefused once the gateway has refused the token on every
	// attempt for AuthFailureGrace (refused.go); false (the zero value)
	// keeps retrying, denying every request meanwhile. Either way the
	// refusal is logged once, at Error.
	ExitOnAuthFailure bool
	// AuthFailureGrace is how long refusals last before ExitOnAuthFailure
	// gives up. Default 10s.
	AuthFailureGrace time.Duration
}

func (c *SubscribeConfig) setDefaults() {
	if c.Heartbeat <= 0 {
		c.Heartbeat = 10 * time.Second
	}
	if c.MinBackoff <= 0 {
		c.MinBackoff = 100 * time.Millisecond
	}
	if c.MaxBackoff <= 0 {
		c.MaxBackoff = 30 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.AuthFailureGrace <= 0 {
		c.AuthFailureGrace = defaultAuthFailureGrace
	}
}

// How the gateway connection finds a dead path (drills/proxy's cut drill
// measures it). A path can die silently — packets dropped, a middlebox's
// state lost — and neither end hears of it: with nothing read for
// keepaliveTime the proxy pings, and a ping unanswered for
// keepaliveTimeout closes the connection, so the proxy gives up a silent
// path within 15 s instead of waiting out three heartbeats (the stream's
// own check, which ends the stream but not the connection under it).
// keepaliveTime is the least the gateway permits (gateway/transport's
// enforcement policy). A connection attempt the dead path swallows is
// given up after minConnectTimeout (grpc-go waits the current backoff
// instead when that is longer), so once the path is back the proxy is
// too within about that much and one reconnect wait.
const (
	keepaliveTime     = 10 * time.Second
	keepaliveTimeout  = 5 * time.Second
	minConnectTimeout = 3 * time.Second
)

// Enforcer is what a Subscriber keeps in step: the proxy's compiled
// policy and the sandbox CA it terminates TLS with.
type Enforcer interface {
	SetPolicy(pol *policy.Policy, version string) error
	SetCA(*ca.CA)
}

// Subscriber keeps a proxy's policy in step with the gateway.
type Subscriber struct {
	cfg   SubscribeConfig
	proxy Enforcer
	// fleet holds the gateway replicas and their connections.
	fleet *fleet
	log   *slog.Logger

	mu     sync.Mutex
	pinned ed25519.PublicKey
	chain  []*portcullisv1.GatewayKey
	// ca is the sandbox CA the last verified version brought (the gateway
	// sends it once a stream, with the first version).
	ca      *portcullisv1.SandboxCA
	applied *portcullisv1.SignedPolicy // the version enforced, nil if none
	nacked  struct {
		version uint32
		hash    string
		parent  string
		// ancestry too: whether a version descends may depend on it.
		ancestry []string
		err      string
		fork     bool
	}
	// forks counts the versions refused as forks; lastFork is the last.
	forks    uint64
	lastFork Fork

	clock gatewayClock // the gateway's clock, from heartbeats (clock.go)
	// instance names this run of the proxy (Instance).
	instance string
	// refusals is the current run of attempts that the gateway refused
	// the token on (refused.go).
	refusals refusals
	// creds holds this run's credential key and what it was last sent
	// (credentials.go); its key is nil without Credentials.
	creds credentialState
}

// NewSubscriber prepares the subscription of proxy; it does not connect
// until Run.
func NewSubscriber(cfg SubscribeConfig, proxy Enforcer) (*Subscriber, error) {
	cfg.setDefaults()
	if cfg.Sandbox == "" || cfg.Token == nil || cfg.ProxyID == "" || cfg.DataDir == "" {
		return nil, errors.New("subscribe: sandbox, token, proxy id and data dir are required")
	}
	f, err := newFleet(&cfg)
	if err != nil {
		return nil, err
	}
	s := &Subscriber{cfg: cfg, proxy: proxy, fleet: f, log: cfg.Logger.With("component", "subscriber"), instance: rand.Text()}
	if cfg.Credentials != nil {
		// One key for the run, in memory only: a bundle sealed to it
		// opens nowhere else, and dies with the process.
		if s.creds.key, err = provider.NewKey(); err != nil {
			s.Close()
			return nil, fmt.Errorf("credential key: %w", err)
		}
	}
	if err := s.loadPin(); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// bearer sends the sandbox token with every RPC.
type bearer struct {
	token func() (string, error)
}

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	tok, err := b.token()
	if err != nil {
		return nil, err
	}
	return map[string]string{"authorization": "Bearer " + tok}, nil
}

// RequireTransportSecurity is false so a plaintext gateway on loopback
// works; the command refuses plaintext elsewhere.
func (b bearer) RequireTransportSecurity() bool { return false }

// AdvisorClient returns an AdvisorService client on gateway connections
// of the subscription's (not the policy stream's), which carry the
// sandbox token: policy.local relays an agent's proposals through it
// (policylocal.Server.SetAdvisor). A call goes to the policy stream's
// replica first, then to the others while it finds none available.
func (s *Subscriber) AdvisorClient() portcullisv1.AdvisorServiceClient {
	return portcullisv1.NewAdvisorServiceClient(fleetConn{s.fleet, apiConn})
}

// distribution is DistributionService on the fleet (decision shipping).
func (s *Subscriber) distribution() portcullisv1.DistributionServiceClient {
	return portcullisv1.NewDistributionServiceClient(fleetConn{s.fleet, distConn})
}

// Close releases the gateway connections.
func (s *Subscriber) Close() error { return s.fleet.close() }

// loadPin reads the pinned key: the configured one wins; one kept in the
// data dir must then agree with it.
func (s *Subscriber) loadPin() error {
	data, err := os.ReadFile(filepath.Join(s.cfg.DataDir, gatewayKeyFile))
	var kept ed25519.PublicKey
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return fmt.Errorf("read pinned gateway key: %w", err)
	default:
		if kept, err = signing.ParsePublicKey(strings.TrimSpace(string(data))); err != nil {
			return fmt.Errorf("%s: %w", filepath.Join(s.cfg.DataDir, gatewayKeyFile), err)
		}
	}
	s.pinned = kept
	if s.cfg.GatewayKey != nil {
		// The command line is outside the data dir: it wins, and a kept
		// key it does not lead to is ignored.
		s.pinned = s.cfg.GatewayKey
	}
	return nil
}

// ErrNoState: the data dir holds no version to restore.
var ErrNoState = errors.New("no kept policy version")

// Restore enforces the version kept in the data dir after verifying it
// again. On any failure the proxy keeps denying everything.
func (s *Subscriber) Restore() error {
	data, err := os.ReadFile(filepath.Join(s.cfg.DataDir, stateFile))
	if errors.Is(err, os.ErrNotExist) {
		return ErrNoState
	}
	if err != nil {
		return fmt.Errorf("read kept version: %w", err)
	}
	var sp portcullisv1.SignedPolicy
	if err := proto.Unmarshal(data, &sp); err != nil {
		return fmt.Errorf("kept version: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pinned == nil {
		return fmt.Errorf("kept version: %w: no pinned gateway key to check it with", signing.ErrUntrusted)
	}
	pol, trusted, err := s.verify(&sp, sp.GetKeys())
	if err != nil {
		return fmt.Errorf("kept version %d refused: %w", sp.GetVersion(), err)
	}
	if err := s.apply(&sp, pol); err != nil {
		return fmt.Errorf("kept version %d: %w", sp.GetVersion(), err)
	}
	s.chain, s.ca = sp.GetKeys(), sp.GetCa()
	s.pinned = trusted
	s.log.Info("enforcing the kept policy version until the gateway answers", "version", sp.GetVersion(), "hash", sp.GetHash())
	return nil
}

// verify checks sp against the pinned key through chain and parses it.
func (s *Subscriber) verify(sp *portcullisv1.SignedPolicy, chain []*portcullisv1.GatewayKey) (*policy.Policy, ed25519.PublicKey, error) {
	pinned := s.pinned
	if pinned == nil {
		// First contact: trust the key signing now, and pin it.
		if len(chain) == 0 {
			return nil, nil, fmt.Errorf("%w: no key chain to pin", signing.ErrUntrusted)
		}
		pinned = ed25519.PublicKey(chain[len(chain)-1].GetPublicKey())
	}
	trusted, err := signing.Follow(pinned, chain)
	if err != nil {
		return nil, nil, err
	}
	if err := signing.VerifyPolicy(sp, trusted); err != nil {
		return nil, nil, err
	}
	if sp.GetSandbox() != s.cfg.Sandbox {
		return nil, nil, fmt.Errorf("%w: version is for sandbox %q, not %q", signing.ErrUntrusted, sp.GetSandbox(), s.cfg.Sandbox)
	}
	pol, _, err := policy.Parse(sp.GetDocument())
	if err != nil {
		return nil, nil, fmt.Errorf("parse: %w", err)
	}
	if got := pol.Hash(); got != sp.GetHash() {
		return nil, nil, fmt.Errorf("the document's hash is %s, the version says %s", got, sp.GetHash())
	}
	return pol, trusted, nil
}

// apply compiles and swaps in pol, and the CA that came with sp.
func (s *Subscriber) apply(sp *portcullisv1.SignedPolicy, pol *policy.Policy) error {
	if s.cfg.Refuse != nil {
		if err := s.cfg.Refuse(pol); err != nil {
			return err
		}
	}
	var sandboxCA *ca.CA
	c := sp.GetCa()
	if c == nil && s.applied.GetCa() == nil {
		c = s.ca // brought by a version refused before this one
	}
	if c != nil {
		var err error
		if sandboxCA, err = ca.Parse(c.GetCertPem(), c.GetKeyPem()); err != nil {
			return fmt.Errorf("sandbox CA: %w", err)
		}
	}
	// The CA first: it is the sandbox's, whatever the version, and a
	// version seen in force must come with the CA to intercept its TLS
	// (a caller that waits for the version then reads the CA).
	if sandboxCA != nil {
		s.proxy.SetCA(sandboxCA)
	}
	if err := s.proxy.SetPolicy(pol, fmt.Sprint(sp.GetVersion())); err != nil {
		return err
	}
	s.applied = sp
	return nil
}

// ErrFork is wrapped by the refusal of a version that does not descend
// from the version held.
var ErrFork = errors.New("policy fork")

// Fork is a version refused because it does not descend from the version
// held.
type Fork struct {
	// Version and Hash name the version refused; Held and HeldHash the
	// version the proxy kept enforcing.
	Version  uint32
	Hash     string
	Held     uint32
	HeldHash string
	Err      string
}

// Forks returns how many versions were refused as forks, and the last of
// them (zero if none): the proxy's own count of what the gateway counts
// as portcullis_push_forks_total and shows in proxies list.
func (s *Subscriber) Forks() (uint64, Fork) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.forks, s.lastFork
}

// descends checks that sp, verified and not older than held, descends
// from held (nil: the proxy holds none). The same number must carry the
// same content and history; a newer version's parent must be the lineage
// of held extended by the hashes of the versions between (sp.Ancestry,
// unsigned: the signed parent proves them). A version signed before
// parents existed (none, beyond version 1) cannot be checked: while the
// proxy holds no lineage (a legacy version, or version 1, which has no
// parent) it is taken on its number alone, as it always was; once held
// has a parent, a newer version without one is a fork (its parent may
// have been stripped: it takes only removing two fields), and the version
// held without its parent is the version held (receive keeps the held
// parent).
func descends(held, sp *portcullisv1.SignedPolicy) error {
	if held == nil {
		return nil
	}
	if sp.GetVersion() == held.GetVersion() {
		if sp.GetHash() != held.GetHash() {
			return fmt.Errorf("%w: version %d has hash %s but the version %d held has hash %s: the gateway's history differs from the one this proxy followed",
				ErrFork, sp.GetVersion(), sp.GetHash(), held.GetVersion(), held.GetHash())
		}
		if sp.GetParent() != "" && held.GetParent() != "" && sp.GetParent() != held.GetParent() {
			return fmt.Errorf("%w: version %d has the content held but another history before it (parent %s, held %s)",
				ErrFork, sp.GetVersion(), sp.GetParent(), held.GetParent())
		}
		return nil
	}
	lineage, known := lineageOf(held)
	if !known {
		return nil
	}
	if sp.GetParent() == "" {
		if held.GetParent() == "" {
			return nil // held is version 1: a legacy version 2 looks the same
		}
		return fmt.Errorf("%w: version %d comes without a parent while the version %d held has one, so it cannot be checked to descend from it: a parent removed from another history's version, or a replica older than the descent check",
			ErrFork, sp.GetVersion(), held.GetVersion())
	}
	gap := int(sp.GetVersion() - held.GetVersion() - 1)
	anc := sp.GetAncestry()
	if len(anc) < gap {
		return fmt.Errorf("version %d came with the hashes of %d versions before it; the proxy holds version %d and needs those of the %d between to check that it descends from it",
			sp.GetVersion(), len(anc), held.GetVersion(), gap)
	}
	for i, h := range anc[len(anc)-gap:] {
		lineage = signing.Lineage(lineage, held.GetVersion()+uint32(i)+1, h)
	}
	if lineage != sp.GetParent() {
		return fmt.Errorf("%w: version %d does not descend from the version %d held (hash %s): the gateway's history differs from the one this proxy followed",
			ErrFork, sp.GetVersion(), held.GetVersion(), held.GetHash())
	}
	return nil
}

// lineageOf returns sp's lineage, unknown for a version (beyond 1) signed
// without its parent.
func lineageOf(sp *portcullisv1.SignedPolicy) (string, bool) {
	if sp.GetParent() == "" && sp.GetVersion() != 1 {
		return "", false
	}
	return signing.Lineage(sp.GetParent(), sp.GetVersion(), sp.GetHash()), true
}

// AppliedVersion is the version enforced (0 if none).
func (s *Subscriber) AppliedVersion() uint32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.applied.GetVersion()
}

// GatewayAhead returns how far the gateway's clock is ahead of the
// proxy's (Now), by the latest heartbeat answered: an upper bound, so a
// grant judged at Now()+GatewayAhead() ends no later than the gateway
// says. 0 when the gateway is not ahead or has not answered yet; the last
// estimate holds while the gateway is unreachable.
func (s *Subscriber) GatewayAhead() time.Duration { return s.clock.aheadOf() }

// Run keeps a policy stream open until ctx ends. When a stream ends it
// moves to another replica (fleet.next): at once after a goaway, after a
// short random wait after a failure, and waiting out each replica's own
// backoff (exponential, full jitter) while none answers. Every stream
// starts with the version held (ProxyHello.held_version) and receive
// never applies an older one, so moving between replicas never makes
// the proxy regress; a replica that offers a version of another history
// (a fork) is left as one that failed. It returns early only with
// ExitOnAuthFailure, when the gateway keeps refusing the token
// (ErrTokenRefused).
func (s *Subscriber) Run(ctx context.Context) error {
	ep := s.fleet.first(ctx)
	for {
		start := time.Now()
		err := s.stream(ctx, ep)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var goaway *goawayError
		isGoaway := errors.As(err, &goaway)
		refused, giveUp := s.refused(err, ep.String())
		if giveUp != nil {
			return giveUp
		}
		s.fleet.ended(ep, isGoaway, time.Since(start) > s.cfg.MaxBackoff)
		next, wait := s.fleet.next(ctx, ep, isGoaway)
		if !refused { // a refusal was said once, at Error
			s.log.Warn("policy stream ended; reconnecting", "gateway", ep.String(), "err", err, "goaway", isGoaway,
				"to", next.String(), "in", wait.Round(time.Millisecond))
		}
		if wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			case <-t.C:
			}
		}
		ep = next
	}
}

var errGatewaySilent = errors.New("no answer from the gateway to three heartbeats")

// goawayError: the gateway asked the proxy to reconnect.
type goawayError struct{ reason string }

func (e *goawayError) Error() string { return "the gateway asked to reconnect: " + e.reason }

// stream runs one policy stream on ep until it fails.
func (s *Subscriber) stream(ctx context.Context, ep *endpoint) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	cc, err := s.fleet.conn(ep, distConn)
	if err != nil {
		return err
	}
	// This attempt is paced by the fleet's backoff: a connection still
	// waiting out grpc-go's own tries again now.
	cc.ResetConnectBackoff()
	st, err := portcullisv1.NewDistributionServiceClient(cc).StreamPolicy(ctx)
	if err != nil {
		return err
	}
	s.mu.Lock()
	hello := &portcullisv1.ProxyHello{Sandbox: s.cfg.Sandbox, ProxyId: s.cfg.ProxyID, HeldVersion: s.applied.GetVersion(), HeldHash: s.applied.GetHash(), Build: s.cfg.Build, Instance: s.instance,
		CredentialKey: s.creds.public()}
	s.mu.Unlock()
	var sendMu sync.Mutex
	send := func(m *portcullisv1.StreamPolicyRequest) error {
		sendMu.Lock()
		defer sendMu.Unlock()
		return st.Send(m)
	}
	if err := send(&portcullisv1.StreamPolicyRequest{Message: &portcullisv1.StreamPolicyRequest_Hello{Hello: hello}}); err != nil {
		if errors.Is(err, io.EOF) { // the gateway ended the stream: its status says why
			_, err = st.Recv()
		}
		return err
	}

	// Heartbeats: one at once (the gateway's answer tells its clock,
	// clock.go) and one every interval; the gateway answers each, and any
	// message from it proves it alive.
	silent := time.AfterFunc(3*s.cfg.Heartbeat, func() { cancel(errGatewaySilent) })
	defer silent.Stop()
	done := make(chan struct{})
	var heartbeats sync.WaitGroup
	defer func() {
		// The stream ends with this call: stop the heartbeats (a send
		// blocked on the stream ends with its context) and wait for them.
		close(done)
		cancel(nil)
		heartbeats.Wait()
	}()
	s.clock.restart()
	heartbeats.Go(func() {
		tick := time.NewTicker(s.cfg.Heartbeat)
		defer tick.Stop()
		for {
			t0 := s.cfg.Now()
			s.clock.sent(t0)
			hb := &portcullisv1.Heartbeat{SentAt: timestamppb.New(t0)}
			if err := send(&portcullisv1.StreamPolicyRequest{Message: &portcullisv1.StreamPolicyRequest_Heartbeat{Heartbeat: hb}}); err != nil {
				if !errors.Is(err, io.EOF) { // EOF: the stream ended, and Recv says why
					cancel(err)
				}
				return
			}
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	})

	open := false // a first message came
	for {
		res, err := st.Recv()
		if err != nil {
			if cause := context.Cause(ctx); cause != nil && ctx.Err() != nil {
				return cause
			}
			return err
		}
		silent.Reset(3 * s.cfg.Heartbeat)
		if !open {
			open = true
			s.refusals.clear()
			s.log.Info("policy stream open", "gateway", ep.String(), "held", hello.GetHeldVersion())
		}
		if g := res.GetGoaway(); g != nil {
			return &goawayError{reason: g.GetReason()}
		}
		if hb := res.GetHeartbeat(); hb != nil && hb.GetSentAt() != nil {
			if ahead, news := s.clock.answered(hb.GetSentAt().AsTime()); news {
				s.log.Warn("the gateway's clock differs from the proxy's; expires_at is judged by the later of the two", "gateway_ahead", ahead.Round(time.Millisecond).String())
			}
		}
		if sc := res.GetCredentials(); sc != nil {
			if answer := s.receiveCredentials(sc); answer != nil {
				if err := send(answer); err != nil {
					return err
				}
			}
			continue
		}
		sp := res.GetPolicy()
		if sp == nil {
			continue // a heartbeat
		}
		end := s.traceApply(sp)
		answer := s.receive(sp)
		err = send(answer)
		end(answer, err)
		if err != nil {
			return err
		}
		if n := answer.GetNack(); n.GetFork() {
			// This replica serves another history: leave it as one that
			// failed (its backoff grows), for another replica that may
			// serve the proxy's.
			return fmt.Errorf("%w: the replica offered version %d, which does not descend from the version held", ErrFork, n.GetVersion())
		}
	}
}

// receive verifies and applies one version and returns the answer.
func (s *Subscriber) receive(sp *portcullisv1.SignedPolicy) *portcullisv1.StreamPolicyRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	nack := func(err error) *portcullisv1.StreamPolicyRequest {
		fork := errors.Is(err, ErrFork)
		s.nacked.version, s.nacked.hash, s.nacked.parent, s.nacked.err, s.nacked.fork = sp.GetVersion(), sp.GetHash(), sp.GetParent(), err.Error(), fork
		s.nacked.ancestry = sp.GetAncestry()
		if fork {
			s.forks++
			s.lastFork = Fork{Version: sp.GetVersion(), Hash: sp.GetHash(), Held: s.applied.GetVersion(), HeldHash: s.applied.GetHash(), Err: err.Error()}
			s.log.Error("refused a policy version that does not descend from the one held: the gateway replica serves a forked history (a restored or forked store); still enforcing the version held until an operator settles which history stands",
				"version", sp.GetVersion(), "hash", sp.GetHash(), "held", s.applied.GetVersion(), "held_hash", s.applied.GetHash(), "err", err)
		} else {
			s.log.Error("refused a policy version; still enforcing the last good one", "version", sp.GetVersion(), "held", s.applied.GetVersion(), "err", err)
		}
		return &portcullisv1.StreamPolicyRequest{Message: &portcullisv1.StreamPolicyRequest_Nack{Nack: &portcullisv1.PolicyNack{
			Nonce: sp.GetNonce(), Version: sp.GetVersion(), Hash: sp.GetHash(), Error: err.Error(), Fork: fork,
		}}}
	}
	ack := &portcullisv1.StreamPolicyRequest{Message: &portcullisv1.StreamPolicyRequest_Ack{Ack: &portcullisv1.PolicyAck{
		Nonce: sp.GetNonce(), Version: sp.GetVersion(), Hash: sp.GetHash(),
	}}}
	chain := s.chain
	if len(sp.GetKeys()) > 0 {
		chain = sp.GetKeys()
	}
	if s.nacked.version == sp.GetVersion() && s.nacked.hash == sp.GetHash() && s.nacked.parent == sp.GetParent() &&
		slices.Equal(s.nacked.ancestry, sp.GetAncestry()) && s.nacked.version != 0 {
		// Refused before: say so again, without trying again.
		err := errors.New(s.nacked.err)
		if s.nacked.fork {
			err = fmt.Errorf("%w: %s", ErrFork, strings.TrimPrefix(s.nacked.err, ErrFork.Error()+": "))
		}
		return nack(err)
	}
	if held := s.applied.GetVersion(); sp.GetVersion() < held {
		return nack(fmt.Errorf("version %d is older than the version held, %d", sp.GetVersion(), held))
	}
	pol, trusted, err := s.verify(sp, chain)
	if err != nil {
		return nack(err)
	}
	// Verified: its chain and CA hold for the stream's later versions
	// even if this one is refused below (they come only with the first).
	s.chain = chain
	if sp.GetCa() != nil {
		s.ca = sp.GetCa()
	}
	if err := descends(s.applied, sp); err != nil {
		return nack(err)
	}
	if s.applied.GetVersion() == sp.GetVersion() && s.applied.GetHash() == sp.GetHash() {
		// Already enforced (the gateway sends the current version on
		// every new stream); keep a newer chain or CA it brought, and
		// its parent if the version held was signed without one.
		if sp.GetCa() != nil {
			if sandboxCA, err := ca.Parse(sp.GetCa().GetCertPem(), sp.GetCa().GetKeyPem()); err == nil {
				s.proxy.SetCA(sandboxCA)
			}
		}
		if sp.GetParent() == "" && s.applied.GetParent() != "" {
			// Sent without the parent held (a replica older than the
			// descent check sends it so): keep the version held, its
			// parent, the pin and the data dir as they are, or every
			// later version would be taken on its number.
			s.log.Info("policy version held sent again without its parent; keeping the parent held", "version", sp.GetVersion(), "hash", sp.GetHash())
			return ack
		}
	} else if err := s.apply(sp, pol); err != nil {
		return nack(err)
	}
	// First contact pins the key; a rotation moves the pin forward.
	repinned := !s.pinned.Equal(trusted)
	s.pinned = trusted
	if err := s.keep(sp, chain, repinned); err != nil {
		// Enforced all the same; the gateway hears it with the ACK.
		ack.GetAck().KeepError = err.Error()
	}
	s.log.Info("policy version applied", "version", sp.GetVersion(), "hash", sp.GetHash())
	return ack
}

// keep writes the applied version (with its chain and the CA in force)
// and, when it moved, the pinned key to the data dir. A failure (a full
// or read-only disk) is logged and returned for the ACK to carry: the
// version is enforced either way.
func (s *Subscriber) keep(sp *portcullisv1.SignedPolicy, chain []*portcullisv1.GatewayKey, repinned bool) error {
	kept := proto.Clone(sp).(*portcullisv1.SignedPolicy)
	kept.Keys = chain
	kept.Nonce = ""
	kept.Traceparent = ""
	kept.Ancestry = nil // the kept parent (signed) is what later checks start from
	if kept.Ca == nil && s.ca != nil {
		kept.Ca = s.ca
	}
	s.applied = kept
	data, err := proto.Marshal(kept)
	if err == nil {
		err = writeFileAtomic(filepath.Join(s.cfg.DataDir, stateFile), data)
	}
	if err == nil && repinned {
		err = writeFileAtomic(filepath.Join(s.cfg.DataDir, gatewayKeyFile), []byte(signing.FormatPublicKey(s.pinned)+"\n"))
	}
	if err != nil {
		s.log.Error("could not keep the applied version in the data dir", "err", err)
	}
	return err
}

// writeFileAtomic replaces path with data (0600): a crash leaves the old
// file or the new one, never a mix.
func writeFileAtomic(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return atomicfile.Replace(path, data)
}
