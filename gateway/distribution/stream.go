package distribution

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect/v2"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/portcullis-dev/portcullis/gateway/transport"
	proxyca "github.com/portcullis-dev/portcullis/internal/ca"
	"github.com/portcullis-dev/portcullis/internal/events"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
	"github.com/portcullis-dev/portcullis/store"
)

// Timings of the policy stream. A proxy sends a heartbeat every
// HeartbeatInterval and the gateway answers it; a stream silent for
// Config.StreamIdleTimeout is dead and ends.
const (
	HeartbeatInterval = 10 * time.Second
	helloTimeout      = 10 * time.Second
	// reauthInterval is how often a stream's token is checked again, so a
	// revoked or rotated sandbox token loses its stream.
	reauthInterval = time.Minute
)

var errNoHello = errors.New("no hello within the time allowed")

// PolicyConn is what a policy stream needs of its transport: Connect's
// server stream is one, and the gateway root adapts grpc-go's.
type PolicyConn interface {
	Receive() (*portcullisv1.StreamPolicyRequest, error)
	Send(*portcullisv1.StreamPolicyResponse) error
}

// StreamPolicy serves one proxy's push stream: hello, then the current
// version, then every newer one; ACK, NACK and heartbeats come back. It
// returns when the stream ends, after its senders.
func (d *Distribution) StreamPolicy(ctx context.Context, p Caller, stream PolicyConn) (err error) {
	// Ending the stream also ends a Receive blocked on a silent peer. Why
	// it ended is kept here rather than in a context of its own: an idle
	// stream would keep that context (and its place in its parent's).
	interrupt := transport.StreamInterrupter(ctx)
	var ended atomic.Pointer[error]
	cancel := func(cause error) {
		if ended.CompareAndSwap(nil, &cause) {
			interrupt.Interrupt(endCause(cause))
		}
	}

	helloTimer := time.AfterFunc(helloTimeout, func() { cancel(errNoHello) })
	req, err := stream.Receive()
	helloTimer.Stop()
	if err != nil {
		return streamEnd(&ended, err)
	}
	hello := req.GetHello()
	if hello == nil {
		return invalidField("hello", "the first message of a policy stream must be a hello")
	}
	if hello.GetSandbox() != p.Sandbox {
		return connect.NewError(connect.CodePermissionDenied, "a sandbox token may only stream its own sandbox's policy")
	}
	if err := checkProxyID(hello.GetProxyId()); err != nil {
		return err
	}
	if k := hello.GetCredentialKey(); len(k) > 0 {
		if err := checkCredentialKey(k, p.Sandbox, hello.GetProxyId()); err != nil {
			return err
		}
	}
	// A new run of the proxy: the calls its earlier run held died with it.
	if _, err := transport.OffStack(func() (struct{}, error) {
		return struct{}{}, d.life.FailEarlierCalls(ctx, p.Sandbox, hello.GetProxyId(), hello.GetInstance())
	}); err != nil {
		d.log.WarnContext(ctx, "could not fail an earlier proxy run's held calls", "sandbox", p.Sandbox, "proxy", hello.GetProxyId(), "err", err)
	}
	ca, err := transport.OffStack(func() (*portcullisv1.SandboxCA, error) { return d.SandboxCA(ctx, p.Sandbox) })
	if err != nil {
		return err
	}

	key := proxyKey{sandbox: p.Sandbox, proxyID: hello.GetProxyId()}
	ps := &policyStream{
		stream:  stream,
		ca:      ca,
		fail:    func(err error) { cancel(err) },
		tracer:  d.tracer,
		proxyID: hello.GetProxyId(),
		history: func(from, to uint32) ([]string, error) { return d.hashes(ctx, p.Sandbox, from, to) },
	}
	if k := hello.GetCredentialKey(); len(k) > 0 && d.creds != nil {
		// Before the stream can be woken: its sender reads it.
		ps.cred = &credStream{sandbox: p.Sandbox, key: slices.Clone(k), caller: p}
	}
	ps.held.Store(hello.GetHeldVersion())
	entry := d.proxies.connect(key, hello)
	defer d.proxies.disconnect(entry)
	t, err := transport.OffStack(func() (*topic, error) { return d.hub.subscribe(ctx, p.Sandbox, ps, hello.GetHeldVersion()) })
	if err != nil {
		return err
	}
	if ps.cred != nil {
		d.creds.register(ps)
	}
	defer func() {
		if ps.cred != nil {
			d.creds.unregister(ps)
		}
		d.hub.unsubscribe(t, ps)
		// A send blocked on a proxy that stopped reading ends too.
		interrupt.Interrupt(err)
		ps.close()
	}()
	d.log.InfoContext(ctx, "proxy connected", "sandbox", p.Sandbox, "proxy", key.proxyID, "held_version", hello.GetHeldVersion())
	// At shutdown the proxy is told to go away (hub.goawayAll): it ends
	// the stream (which ends the Receive below) and reconnects, to
	// another replica or to this one once it is back.
	ps.wake()

	// The proxy sends a heartbeat every HeartbeatInterval and the gateway
	// answers each one: the proxy finds a dead gateway by the missing
	// answers, the gateway a dead proxy by the silence.
	idle := time.AfterFunc(d.cfg.StreamIdleTimeout, func() { cancel(errStreamIdle) })
	defer idle.Stop()
	lastAuth := d.cfg.Now()
	for {
		req, err := stream.Receive()
		if err != nil {
			return streamEnd(&ended, err)
		}
		idle.Reset(d.cfg.StreamIdleTimeout)
		now := d.cfg.Now()
		switch m := req.GetMessage().(type) {
		case *portcullisv1.StreamPolicyRequest_Ack:
			if err := d.policyAck(ctx, ps, entry, m.Ack, now); err != nil {
				return err
			}
		case *portcullisv1.StreamPolicyRequest_Nack:
			if err := d.policyNack(ctx, ps, entry, m.Nack, now); err != nil {
				return err
			}
		case *portcullisv1.StreamPolicyRequest_CredentialsAck:
			d.credentialsAck(ctx, ps, entry, m.CredentialsAck, now)
		case *portcullisv1.StreamPolicyRequest_Heartbeat:
			d.proxies.seen(entry, now)
			ps.heartbeatDue.Store(true)
			ps.wake()
		case *portcullisv1.StreamPolicyRequest_Hello:
			return invalidField("hello", "sent twice on one stream")
		default:
			return invalidField("message", "is empty")
		}
		if now.Sub(lastAuth) >= reauthInterval {
			if _, err := transport.OffStack(func() (struct{}, error) { return struct{}{}, p.Auth.Reauthenticate(ctx, p.Token) }); err != nil {
				return err
			}
			lastAuth = now
		}
	}
}

// policyAck records a proxy's ACK of a version sent on ps.
func (d *Distribution) policyAck(ctx context.Context, ps *policyStream, entry *proxyEntry, a *portcullisv1.PolicyAck, now time.Time) error {
	sent, ok := ps.sentFor(a.GetNonce())
	if !ok || sent.sv.version() != a.GetVersion() {
		sent.answered("", "an ACK that names another version")
		return invalidField("ack.nonce", "names no version sent on this stream")
	}
	lag := now.Sub(sent.sv.committedAt())
	ps.held.Store(sent.sv.version())
	d.proxies.ack(entry, sent.sv, lag, now)
	keepErr := a.GetKeepError()
	d.cfg.Stream.Publish(events.ProxyAcked{Sandbox: entry.key.sandbox, Lag: lag, KeepFailed: keepErr != ""})
	if keepErr != "" {
		// Enforced, but a restart would bring back an older version.
		d.log.WarnContext(ctx, "proxy enforces the version but cannot keep it in its data dir", "sandbox", entry.key.sandbox, "proxy", entry.key.proxyID,
			"version", sent.sv.version(), "error", truncate(keepErr, maxNackError))
	}
	sent.answered("ack", "")
	return nil
}

// policyNack records a proxy's refusal of a version sent on ps.
func (d *Distribution) policyNack(ctx context.Context, ps *policyStream, entry *proxyEntry, n *portcullisv1.PolicyNack, now time.Time) error {
	sent, ok := ps.sentFor(n.GetNonce())
	if !ok || sent.sv.version() != n.GetVersion() {
		sent.answered("", "a NACK that names another version")
		return invalidField("nack.nonce", "names no version sent on this stream")
	}
	d.proxies.nack(entry, sent.sv, truncate(n.GetError(), maxNackError), now.Sub(sent.sv.committedAt()), now)
	d.cfg.Stream.Publish(events.ProxyNacked{Sandbox: entry.key.sandbox, Fork: n.GetFork()})
	if n.GetFork() {
		// This replica's history and the proxy's differ (one of
		// them runs on a restored or forked store): an operator
		// must say which one stands.
		d.log.ErrorContext(ctx, "proxy refused a policy version that does not descend from the one it holds: this replica's history forked from the proxy's; the proxy keeps enforcing its own",
			"sandbox", entry.key.sandbox, "proxy", entry.key.proxyID, "version", sent.sv.version(), "hash", sent.sv.policy.GetHash(),
			"held_version", ps.held.Load(), "error", truncate(n.GetError(), maxNackError))
	} else {
		d.log.WarnContext(ctx, "proxy refused a policy version", "sandbox", entry.key.sandbox, "proxy", entry.key.proxyID,
			"version", sent.sv.version(), "error", truncate(n.GetError(), maxNackError))
	}
	sent.answered("nack", truncate(n.GetError(), maxNackError))
	return nil
}

// streamEnd turns the error that ended a Receive into the handler's result:
// the cause when the gateway ended the stream, nil for a clean close.
func streamEnd(ended *atomic.Pointer[error], err error) error {
	if cause := ended.Load(); cause != nil && !errors.Is(*cause, context.Canceled) {
		return endCause(*cause)
	}
	if errors.Is(err, io.EOF) {
		return nil
	}
	return err
}

// endCause is the handler's result when the gateway ended the stream
// with cause.
func endCause(cause error) error {
	if errors.Is(cause, errNoHello) || errors.Is(cause, errStreamIdle) {
		return connect.NewError(connect.CodeDeadlineExceeded, cause.Error())
	}
	return cause
}

var errStreamIdle = errors.New("no message from the proxy within the idle timeout")

const (
	maxNackError = 4 << 10
	maxProxyID   = 128
)

func checkProxyID(id string) error { return checkID("hello.proxy_id", id) }

// checkID checks a proxy's id (field names it in the error).
func checkID(field, id string) error {
	if id == "" {
		return invalidField(field, "is empty")
	}
	if len(id) > maxProxyID {
		return invalidField(field, "is longer than %d bytes", maxProxyID)
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return invalidField(field, "may hold only letters, digits, '-', '_' and '.'")
		}
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// SandboxCA returns the sandbox's CA, creating it on first use (the first
// replica to store one wins; the others use it).
func (d *Distribution) SandboxCA(ctx context.Context, sandbox string) (*portcullisv1.SandboxCA, error) {
	ca, err := d.st.GetSandboxCA(ctx, sandbox)
	if errors.Is(err, store.ErrNotFound) {
		certPEM, keyPEM, gerr := proxyca.Generate(d.cfg.Now())
		if gerr != nil {
			return nil, gerr
		}
		ca, err = d.life.PutSandboxCA(ctx, store.SandboxCA{Sandbox: sandbox, CertPEM: certPEM, KeyPEM: keyPEM})
	}
	if err != nil {
		return nil, missing(err, "sandbox %q not found", sandbox)
	}
	return &portcullisv1.SandboxCA{CertPem: ca.CertPEM, KeyPem: ca.KeyPEM}, nil
}

// policyStream is the sending side of one proxy's stream. Sends happen on
// a goroutine that exists only while there is something to send (a newer
// version, a heartbeat): an idle stream costs its receiving goroutine
// alone.
type policyStream struct {
	stream PolicyConn
	topic  *topic
	ca     *portcullisv1.SandboxCA
	fail   func(error)

	sending      atomic.Bool
	heartbeatDue atomic.Bool
	goawayDue    atomic.Bool
	sentVersion  atomic.Uint32

	mu        sync.Mutex // held while sending
	chainSent int        // length of the key chain last sent

	// life orders wake against close: no sender starts after close, and
	// close waits for the one running (the stream must not be used once
	// its handler returns).
	life    sync.Mutex
	closed  bool
	senders sync.WaitGroup

	sentMu sync.Mutex
	sent   map[string]delivery // by nonce, the versions not yet answered

	// held is the version the proxy enforces, as far as this stream
	// knows (its hello, then each ACK): a version sent after a gap
	// carries the hashes of the versions between (ancestry), read from
	// history when the version keeps too few.
	held    atomic.Uint32
	history func(from, to uint32) ([]string, error)

	tracer  trace.Tracer // nil: no push spans (trace.go)
	proxyID string

	// cred is the credentials side of a stream whose proxy gave a
	// credential key (credentials.go); nil otherwise.
	cred *credStream
}

// maxUnanswered bounds the versions remembered for ACK/NACK matching.
const maxUnanswered = 16

// wake makes sure a sender runs: it starts one unless one is running or
// the stream has ended.
func (ps *policyStream) wake() {
	if !ps.sending.CompareAndSwap(false, true) {
		return
	}
	ps.life.Lock()
	defer ps.life.Unlock()
	if ps.closed {
		ps.sending.Store(false)
		return
	}
	ps.senders.Add(1)
	go func() {
		defer ps.senders.Done()
		ps.drain()
	}()
}

// drain sends until nothing is due, then stops. The check after clearing
// sending catches a wake that came while the last send was in flight.
func (ps *policyStream) drain() {
	for {
		if err := ps.sendDue(); err != nil {
			ps.fail(err)
			ps.sending.Store(false)
			return
		}
		ps.sending.Store(false)
		if !ps.due() || !ps.sending.CompareAndSwap(false, true) {
			return
		}
	}
}

func (ps *policyStream) due() bool {
	if ps.heartbeatDue.Load() || ps.goawayDue.Load() {
		return true
	}
	if ps.cred != nil && ps.cred.due.Load() != nil {
		return true
	}
	if ps.topic == nil {
		return false
	}
	latest := ps.topic.latest.Load()
	return latest != nil && latest.version() > ps.sentVersion.Load()
}

func (ps *policyStream) sendDue() error {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.topic != nil {
		if latest := ps.topic.latest.Load(); latest != nil && latest.version() > ps.sentVersion.Load() {
			msg, err := ps.message(latest)
			if err != nil {
				return err
			}
			if err := ps.stream.Send(&portcullisv1.StreamPolicyResponse{Message: &portcullisv1.StreamPolicyResponse_Policy{Policy: msg}}); err != nil {
				return fmt.Errorf("send version %d: %w", latest.version(), err)
			}
			ps.sentVersion.Store(latest.version())
			return nil
		}
	}
	if ps.cred != nil {
		if msg := ps.cred.due.Swap(nil); msg != nil {
			if err := ps.stream.Send(&portcullisv1.StreamPolicyResponse{Message: &portcullisv1.StreamPolicyResponse_Credentials{Credentials: msg}}); err != nil {
				return fmt.Errorf("send credentials: %w", err)
			}
		}
	}
	if ps.goawayDue.Swap(false) {
		goaway := &portcullisv1.Goaway{Reason: "reconnect: the gateway is shutting down or the sandbox's token changed"}
		if err := ps.stream.Send(&portcullisv1.StreamPolicyResponse{Message: &portcullisv1.StreamPolicyResponse_Goaway{Goaway: goaway}}); err != nil {
			return fmt.Errorf("send goaway: %w", err)
		}
	}
	if ps.heartbeatDue.Swap(false) {
		hb := &portcullisv1.Heartbeat{SentAt: timestamppb.Now()}
		if err := ps.stream.Send(&portcullisv1.StreamPolicyResponse{Message: &portcullisv1.StreamPolicyResponse_Heartbeat{Heartbeat: hb}}); err != nil {
			return fmt.Errorf("send heartbeat: %w", err)
		}
	}
	return nil
}

// message is sv as sent on this stream: its own nonce, and the key chain
// and CA when this stream has not had them yet.
func (ps *policyStream) message(sv *signedVersion) (*portcullisv1.SignedPolicy, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, err
	}
	p := sv.policy
	msg := &portcullisv1.SignedPolicy{
		Sandbox:         p.Sandbox,
		Version:         p.Version,
		Hash:            p.Hash,
		Document:        p.Document,
		CommittedAt:     p.CommittedAt,
		KeyId:           p.KeyId,
		Signature:       p.Signature,
		Parent:          p.Parent,
		ParentSignature: p.ParentSignature,
		Nonce:           hex.EncodeToString(b[:]),
	}
	if held := ps.held.Load(); held > 0 && held+1 < sv.version() {
		// The proxy missed versions: it needs their hashes to tell that
		// this one descends from its own.
		var err error
		if msg.Ancestry, err = sv.ancestry(held+1, ps.history); err != nil {
			return nil, fmt.Errorf("ancestry of version %d: %w", sv.version(), err)
		}
	}
	if len(sv.chain) != ps.chainSent {
		msg.Keys = sv.chain
		ps.chainSent = len(sv.chain)
	}
	if ps.ca != nil {
		// Once per stream; not kept after (it would cost every idle
		// stream a copy).
		msg.Ca, ps.ca = ps.ca, nil
	}
	dv := ps.startPush(sv, msg)
	ps.sentMu.Lock()
	if ps.sent == nil {
		ps.sent = make(map[string]delivery)
	}
	if len(ps.sent) >= maxUnanswered {
		for _, old := range ps.sent {
			old.answered("", "never answered")
		}
		clear(ps.sent)
	}
	ps.sent[msg.Nonce] = dv
	ps.sentMu.Unlock()
	return msg, nil
}

// sentFor returns (and forgets) the delivery sent with nonce.
func (ps *policyStream) sentFor(nonce string) (delivery, bool) {
	ps.sentMu.Lock()
	defer ps.sentMu.Unlock()
	dv, ok := ps.sent[nonce]
	delete(ps.sent, nonce)
	if len(ps.sent) == 0 {
		// An idle stream keeps no map.
		ps.sent = nil
	}
	return dv, ok
}

// close stops new senders and waits for the one running, if any. A send
// blocked on a peer that stopped reading ends within the HTTP/2 write
// timeout (Serve's WriteByteTimeout) on net/http, and when the stream is
// interrupted on grpc-go.
func (ps *policyStream) close() {
	ps.life.Lock()
	ps.closed = true
	ps.life.Unlock()
	ps.senders.Wait()
	ps.sentMu.Lock()
	for _, dv := range ps.sent {
		dv.answered("", "the stream ended before an answer")
	}
	ps.sent = nil
	ps.sentMu.Unlock()
}
