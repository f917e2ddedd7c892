package distribution

import (
	"bytes"
	"connectrpc.com/connect/v2"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/portcullis-dev/portcullis/gateway/transport"
	"github.com/portcullis-dev/portcullis/internal/events"
	"github.com/portcullis-dev/portcullis/lifecycle"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
	"github.com/portcullis-dev/portcullis/provider"
	"github.com/portcullis-dev/portcullis/store"
	"github.com/portcullis-dev/portcullis/store/sqlite"
	"github.com/portcullis-dev/portcullis/store/storetest"
)

// fakeSource is a CredentialSource: one bearer provider whose token
// (and the generation) a test sets, as the lifecycle keeps them.
type fakeSource struct {
	mu      sync.Mutex
	gen     uint64
	token   string
	err     error
	genRead atomic.Int64 // CredentialsGeneration calls
	read    atomic.Int64 // SandboxCredentials calls
}

func (f *fakeSource) set(gen uint64, token string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gen, f.token = gen, token
}

func (f *fakeSource) fail(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.err = err
}

func (f *fakeSource) CredentialsGeneration(_ context.Context, sandbox string) (uint64, error) {
	f.genRead.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.gen, f.err
}

func (f *fakeSource) SandboxCredentials(_ context.Context, sandbox string) (*provider.Bundle, error) {
	f.read.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	return &provider.Bundle{Sandbox: sandbox, Generation: f.gen, Providers: []provider.Provider{{
		Spec:     provider.Spec{Name: "github", Type: provider.TypeBearer, Hosts: []string{"api.github.com"}},
		Revision: f.gen,
		Secret:   map[string]string{provider.FieldToken: f.token},
	}}}, nil
}

// fakeConn is a policy stream the test plays the proxy on.
type fakeConn struct {
	in   chan *portcullisv1.StreamPolicyRequest
	out  chan *portcullisv1.StreamPolicyResponse
	stop chan struct{}
	done chan error // StreamPolicy's result
	// interrupted is closed when the handler ends its own stream (the
	// transport's interrupter does that to a real one's Receive).
	interrupted chan struct{}
	interrupt   sync.Once
}

func (c *fakeConn) Interrupt(error) { c.interrupt.Do(func() { close(c.interrupted) }) }

func (c *fakeConn) Receive() (*portcullisv1.StreamPolicyRequest, error) {
	select {
	case m, ok := <-c.in:
		if !ok {
			return nil, io.EOF
		}
		return m, nil
	case <-c.stop:
		return nil, io.EOF
	case <-c.interrupted:
		return nil, io.EOF
	}
}

func (c *fakeConn) Send(m *portcullisv1.StreamPolicyResponse) error {
	select {
	case c.out <- m:
		return nil
	case <-c.stop:
		return io.EOF
	}
}

type liveToken struct{}

func (liveToken) Reauthenticate(context.Context, string) error { return nil }

// revocableToken is live until revoked.
type revocableToken struct{ revoked atomic.Bool }

func (r *revocableToken) Reauthenticate(context.Context, string) error {
	if r.revoked.Load() {
		return connect.NewError(connect.CodeUnauthenticated, "token revoked")
	}
	return nil
}

// credHarness is a Distribution on a real store with a fake credential
// source, running until the test ends; logs holds everything it logged.
type credHarness struct {
	d      *Distribution
	src    *fakeSource
	events *events.Stream
	logs   *os.File
	t      *testing.T
}

// logged returns what the harness's Distribution logged.
func (h *credHarness) logged() string {
	data, err := os.ReadFile(h.logs.Name())
	if err != nil {
		h.t.Fatal(err)
	}
	return string(data)
}

func newCredHarness(t *testing.T, interval time.Duration) *credHarness {
	t.Helper()
	lite, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "p.db"), sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	st := store.New(lite)
	// With a policy, each stream's sender sends a version as credentials
	// come.
	if _, err := st.CreateSandbox(t.Context(), store.CreateSandbox{Name: "agent-1", Actor: "test", Token: storetest.NewToken("sandbox-agent-1", "", ""),
		Policy: &store.PolicyVersion{Hash: "h1", Document: []byte("version: 1\n")}}); err != nil {
		t.Fatal(err)
	}
	logs, err := os.Create(filepath.Join(t.TempDir(), "gateway.log"))
	if err != nil {
		t.Fatal(err)
	}
	h := &credHarness{src: &fakeSource{}, events: events.New(), logs: logs, t: t}
	log := slog.New(slog.NewJSONHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	h.d = New(Config{Replica: "r1", Stream: h.events, Credentials: h.src, CredentialsCheckInterval: interval}, st,
		lifecycle.New(lifecycle.Config{Logger: log}, st), log)
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { _ = h.d.Run(ctx); close(ran) }()
	t.Cleanup(func() { cancel(); <-ran; st.Close(); logs.Close() })
	return h
}

// open starts a policy stream of proxyID with key (nil: none) and sends
// its hello; the stream ends when the test does.
func (h *credHarness) open(proxyID string, key []byte) *fakeConn {
	return h.openWith(proxyID, key, liveToken{})
}

// openWith is open with the token's liveness check auth.
func (h *credHarness) openWith(proxyID string, key []byte, auth interface {
	Reauthenticate(context.Context, string) error
}) *fakeConn {
	c := &fakeConn{in: make(chan *portcullisv1.StreamPolicyRequest, 16), out: make(chan *portcullisv1.StreamPolicyResponse, 64),
		stop: make(chan struct{}), done: make(chan error, 1), interrupted: make(chan struct{})}
	c.in <- &portcullisv1.StreamPolicyRequest{Message: &portcullisv1.StreamPolicyRequest_Hello{Hello: &portcullisv1.ProxyHello{
		Sandbox: "agent-1", ProxyId: proxyID, Instance: "run-" + proxyID, CredentialKey: key}}}
	go func() {
		c.done <- h.d.StreamPolicy(transport.WithInterrupter(context.Background(), c), Caller{Sandbox: "agent-1", Token: "t", Auth: auth}, c)
	}()
	h.t.Cleanup(func() {
		close(c.stop)
		<-c.done
	})
	return c
}

// next returns the next credentials delivery on c (policies and
// heartbeats are skipped).
func (h *credHarness) next(c *fakeConn) *portcullisv1.SealedCredentials {
	h.t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case m := <-c.out:
			if sc := m.GetCredentials(); sc != nil {
				return sc
			}
		case err := <-c.done:
			h.t.Fatalf("the stream ended: %v", err)
		case <-deadline:
			h.t.Fatal("no credentials delivered within 10s")
		}
	}
}

// sync sends a heartbeat on c and waits for its answer: every message
// sent before it has been handled. It fails on a credentials delivery
// met on the way, when none is allowed.
func (h *credHarness) sync(c *fakeConn, credentialsAllowed bool) {
	h.t.Helper()
	c.in <- &portcullisv1.StreamPolicyRequest{Message: &portcullisv1.StreamPolicyRequest_Heartbeat{Heartbeat: &portcullisv1.Heartbeat{}}}
	deadline := time.After(10 * time.Second)
	for {
		select {
		case m := <-c.out:
			if m.GetCredentials() != nil && !credentialsAllowed {
				h.t.Fatalf("credentials delivered on a stream that may get none: generation %d", m.GetCredentials().GetGeneration())
			}
			if m.GetHeartbeat() != nil {
				return
			}
		case <-deadline:
			h.t.Fatal("no heartbeat answer within 10s")
		}
	}
}

// status is proxyID's status as the tracker holds it.
func (h *credHarness) status(proxyID string) store.ProxyStatus {
	h.d.proxies.mu.Lock()
	defer h.d.proxies.mu.Unlock()
	return h.d.proxies.live[proxyKey{"agent-1", proxyID}].status
}

func ack(nonce string, gen uint64, providers uint32, msg string) *portcullisv1.StreamPolicyRequest {
	return &portcullisv1.StreamPolicyRequest{Message: &portcullisv1.StreamPolicyRequest_CredentialsAck{CredentialsAck: &portcullisv1.CredentialsAck{
		Nonce: nonce, Generation: gen, Providers: providers, Error: msg}}}
}

func newKey(t *testing.T) *provider.Key {
	t.Helper()
	k, err := provider.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// A stream whose hello gives a key is sent its sandbox's bundle sealed
// to that key for that proxy: it opens with the proxy's key, not with
// another's nor for another proxy id. Its ACK is the proxy's status; an
// ACK naming no delivery, or a generation never read, changes nothing.
// No part of the secret is logged.
func TestCredentialsSealedToTheProxy(t *testing.T) {
	const secret = "ghp_sealed-secret-0123456789"
	h := newCredHarness(t, time.Hour)
	h.src.set(1, secret)
	k1 := newKey(t)
	c := h.open("p1", k1.Public())
	sc := h.next(c)
	if sc.GetGeneration() != 1 || sc.GetNonce() == "" || bytes.Contains(sc.GetCiphertext(), []byte(secret)) {
		t.Fatalf("delivery: generation %d nonce %q; want generation 1, a nonce and no plaintext", sc.GetGeneration(), sc.GetNonce())
	}
	b, err := k1.Open("agent-1", "p1", 1, sc.GetEnc(), sc.GetCiphertext())
	if err != nil {
		t.Fatalf("the proxy's key does not open its bundle: %v", err)
	}
	if len(b.Providers) != 1 || b.Providers[0].Secret[provider.FieldToken] != secret {
		t.Fatalf("bundle holds %d providers, want github with its token", len(b.Providers))
	}
	if _, err := newKey(t).Open("agent-1", "p1", 1, sc.GetEnc(), sc.GetCiphertext()); err == nil {
		t.Error("another key opened the bundle")
	}
	if _, err := k1.Open("agent-1", "p2", 1, sc.GetEnc(), sc.GetCiphertext()); err == nil {
		t.Error("the bundle opened for another proxy id")
	}

	c.in <- ack(sc.GetNonce(), 1, 1, "")
	h.sync(c, false)
	if s := h.status("p1"); s.CredentialsGeneration != 1 || s.CredentialsError != "" {
		t.Fatalf("after the ACK: status generation %d error %q; want 1 and none", s.CredentialsGeneration, s.CredentialsError)
	}
	c.in <- ack("not-a-nonce", 1, 0, "forged")         // no such delivery
	c.in <- ack(sc.GetNonce(), 1, 0, "answered twice") // answered already
	h.sync(c, false)
	if s := h.status("p1"); s.CredentialsGeneration != 1 || s.CredentialsError != "" {
		t.Fatalf("ACKs of no delivery changed the status: generation %d error %q", s.CredentialsGeneration, s.CredentialsError)
	}
	if bytes.Contains([]byte(h.logged()), []byte(secret)) {
		t.Fatal("the secret is in the gateway's log")
	}
}

// A proxy that cannot open its delivery says so: the status shows the
// error. An ACK naming a generation above any read is ignored.
func TestCredentialsAckError(t *testing.T) {
	h := newCredHarness(t, time.Hour)
	h.src.set(3, "tok")
	c := h.open("p1", newKey(t).Public())
	sc := h.next(c)
	c.in <- ack(sc.GetNonce(), 9, 1, "")
	h.sync(c, false)
	if s := h.status("p1"); s.CredentialsGeneration != 0 {
		t.Fatalf("an ACK of generation 9, never read, was recorded: %d", s.CredentialsGeneration)
	}
	// The same delivery again, on a fresh event: answered with an error.
	h.src.set(4, "tok2")
	h.events.Publish(events.CredentialsChanged{Sandboxes: []string{"agent-1"}})
	sc = h.next(c)
	c.in <- ack(sc.GetNonce(), 4, 0, "credentials do not open: message authentication failed")
	h.sync(c, false)
	if s := h.status("p1"); s.CredentialsGeneration != 4 || s.CredentialsError == "" {
		t.Fatalf("status generation %d error %q; want 4 with the proxy's error", s.CredentialsGeneration, s.CredentialsError)
	}
}

// A change made through this replica (events.CredentialsChanged) reaches
// the stream at once: the check runs only every hour here.
func TestCredentialsChangedDeliversAtOnce(t *testing.T) {
	h := newCredHarness(t, time.Hour)
	h.src.set(1, "old-token")
	k := newKey(t)
	c := h.open("p1", k.Public())
	if sc := h.next(c); sc.GetGeneration() != 1 {
		t.Fatalf("first delivery has generation %d, want 1", sc.GetGeneration())
	}
	h.src.set(2, "new-token")
	h.events.Publish(events.CredentialsChanged{Sandboxes: []string{"other"}}) // not this one's: nothing read
	h.events.Publish(events.CredentialsChanged{Sandboxes: []string{"agent-1"}})
	sc := h.next(c)
	b, err := k.Open("agent-1", "p1", sc.GetGeneration(), sc.GetEnc(), sc.GetCiphertext())
	if err != nil || sc.GetGeneration() != 2 || b.Providers[0].Secret[provider.FieldToken] != "new-token" {
		t.Fatalf("after the change: generation %d, %v; want generation 2 with the new token", sc.GetGeneration(), err)
	}
}

// A new stream is sent the sandbox's credentials whatever they are: none
// at generation 0 (its proxy may hold a restored store's predecessor's),
// with no secret read; and a stream is sent a generation lower than it
// holds when the store went back (restored from a backup).
func TestCredentialsNoneAndRestored(t *testing.T) {
	h := newCredHarness(t, time.Hour)
	k := newKey(t)
	c := h.open("p1", k.Public())
	sc := h.next(c)
	b, err := k.Open("agent-1", "p1", sc.GetGeneration(), sc.GetEnc(), sc.GetCiphertext())
	if err != nil || sc.GetGeneration() != 0 || len(b.Providers) != 0 {
		t.Fatalf("first delivery at generation 0: %d, %v, %d providers; want 0, none", sc.GetGeneration(), err, len(b.Providers))
	}
	if n := h.src.read.Load(); n != 0 {
		t.Fatalf("generation 0 read the sandbox's secrets %d times; it has none", n)
	}
	h.src.set(5, "before-the-restore")
	h.events.Publish(events.CredentialsChanged{Sandboxes: []string{"agent-1"}})
	if sc := h.next(c); sc.GetGeneration() != 5 {
		t.Fatalf("generation %d, want 5", sc.GetGeneration())
	}
	h.src.set(2, "restored")
	h.events.Publish(events.CredentialsChanged{Sandboxes: []string{"agent-1"}})
	sc = h.next(c)
	b, err = k.Open("agent-1", "p1", sc.GetGeneration(), sc.GetEnc(), sc.GetCiphertext())
	if err != nil || sc.GetGeneration() != 2 || b.Providers[0].Secret[provider.FieldToken] != "restored" {
		t.Fatalf("after the store went back: generation %d, %v; want 2 with the restored secret", sc.GetGeneration(), err)
	}
}

// A stream whose token was revoked after it opened (a stolen sandbox
// token, rotated) gets no new secret: the delivery ends its stream.
func TestCredentialsNotToARevokedToken(t *testing.T) {
	h := newCredHarness(t, time.Hour)
	h.src.set(1, "old-token")
	k := newKey(t)
	tok := &revocableToken{}
	c := h.openWith("p1", k.Public(), tok)
	if sc := h.next(c); sc.GetGeneration() != 1 {
		t.Fatalf("first delivery has generation %d, want 1", sc.GetGeneration())
	}
	tok.revoked.Store(true)
	h.src.set(2, "rotated-after-the-theft")
	h.events.Publish(events.CredentialsChanged{Sandboxes: []string{"agent-1"}})
	deadline := time.After(10 * time.Second)
	for {
		select {
		case m := <-c.out:
			if sc := m.GetCredentials(); sc != nil {
				t.Fatalf("a revoked token's stream got generation %d", sc.GetGeneration())
			}
		case err := <-c.done:
			if connect.CodeOf(err) != connect.CodeUnauthenticated {
				t.Fatalf("the stream ended with %v, want Unauthenticated", err)
			}
			c.done <- err // for the cleanup
			return
		case <-deadline:
			t.Fatal("the revoked token's stream did not end")
		}
	}
}

// A change made on another replica is seen only in the generation: the
// check finds it and delivers it to every keyed stream of the sandbox,
// with one read of the bundle for all of them.
func TestCredentialsCheckFindsAnotherReplicasChange(t *testing.T) {
	h := newCredHarness(t, 20*time.Millisecond)
	h.src.set(1, "old-token")
	k1, k2 := newKey(t), newKey(t)
	c1, c2 := h.open("p1", k1.Public()), h.open("p2", k2.Public())
	h.next(c1)
	h.next(c2)
	reads := h.src.read.Load()
	h.src.set(2, "rotated-token")
	for _, s := range []struct {
		c *fakeConn
		k *provider.Key
		p string
	}{{c1, k1, "p1"}, {c2, k2, "p2"}} {
		sc := h.next(s.c)
		b, err := s.k.Open("agent-1", s.p, sc.GetGeneration(), sc.GetEnc(), sc.GetCiphertext())
		if err != nil || sc.GetGeneration() != 2 || b.Providers[0].Secret[provider.FieldToken] != "rotated-token" {
			t.Fatalf("%s: generation %d, %v; want 2 with the rotated token", s.p, sc.GetGeneration(), err)
		}
	}
	if n := h.src.read.Load() - reads; n != 1 {
		t.Errorf("the bundle was read %d times for two streams, want once", n)
	}
}

// A stream whose hello gives no key is sent no credentials, whatever
// changes; one with a key that is not an X25519 public key is refused
// before anything is sent.
func TestCredentialsOnlyToAKey(t *testing.T) {
	h := newCredHarness(t, 20*time.Millisecond)
	h.src.set(1, "tok")
	plain := h.open("p0", nil)
	keyed := h.open("p1", newKey(t).Public())
	h.next(keyed)
	h.src.set(2, "tok2")
	h.events.Publish(events.CredentialsChanged{Sandboxes: []string{"agent-1"}})
	if sc := h.next(keyed); sc.GetGeneration() != 2 {
		t.Fatalf("keyed stream got generation %d, want 2", sc.GetGeneration())
	}
	h.sync(plain, false)

	for name, key := range map[string][]byte{"short": []byte("12345"), "low order": make([]byte, 32)} {
		c := h.open("bad", key)
		select {
		case err := <-c.done:
			var fe *lifecycle.FieldError
			if !errors.As(err, &fe) || fe.Path != "hello.credential_key" {
				t.Errorf("%s key: %v; want a field error at hello.credential_key", name, err)
			}
			c.done <- err // for the cleanup
		case <-time.After(10 * time.Second):
			t.Fatalf("%s key: the stream was not refused", name)
		}
		if len(c.out) != 0 {
			t.Errorf("%s key: %d messages sent before the refusal", name, len(c.out))
		}
	}
}

// A failed read (no secrets key, say) is logged once per sandbox and
// error while it lasts, retried every check, and the stream keeps
// serving; once the read succeeds the bundle is delivered.
func TestCredentialsReadFailureRetried(t *testing.T) {
	h := newCredHarness(t, 10*time.Millisecond)
	h.src.set(1, "tok")
	h.src.fail(errors.New("no secrets key configured"))
	c := h.open("p1", newKey(t).Public())
	for start := h.src.genRead.Load(); h.src.genRead.Load() < start+5; {
		h.sync(c, false) // the stream serves meanwhile
	}
	if n := bytes.Count([]byte(h.logged()), []byte("no secrets key configured")); n != 1 {
		t.Errorf("the failure was logged %d times over five checks, want once", n)
	}
	h.src.fail(nil)
	if sc := h.next(c); sc.GetGeneration() != 1 {
		t.Fatalf("after the failure cleared: generation %d, want 1", sc.GetGeneration())
	}
}
