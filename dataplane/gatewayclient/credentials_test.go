package gatewayclient_test

import (
	"bytes"
	"context"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/portcullis-dev/portcullis/dataplane/gatewayclient"
	"github.com/portcullis-dev/portcullis/gateway/distribution"
	"github.com/portcullis-dev/portcullis/internal/events"
	"github.com/portcullis-dev/portcullis/lifecycle"
	"github.com/portcullis-dev/portcullis/policy"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
	"github.com/portcullis-dev/portcullis/provider"
	"github.com/portcullis-dev/portcullis/store"
	"github.com/portcullis-dev/portcullis/store/sqlite"
	"github.com/portcullis-dev/portcullis/store/storetest"
)

// holder is a CredentialHolder that hands the test each bundle set.
type holder struct{ set chan *provider.Bundle }

func newHolder() *holder { return &holder{set: make(chan *provider.Bundle, 16)} }

func (h *holder) SetCredentials(b *provider.Bundle) { h.set <- b }

func (h *holder) next(t *testing.T) *provider.Bundle {
	t.Helper()
	select {
	case b := <-h.set:
		return b
	case <-time.After(10 * time.Second):
		t.Fatal("no credentials set within 10s")
		return nil
	}
}

// logFile is a Subscriber's log, in a file the test reads.
type logFile struct{ *os.File }

func newLogFile(t *testing.T) logFile {
	t.Helper()
	f, err := os.Create(filepath.Join(t.TempDir(), "proxy.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return logFile{f}
}

func (l logFile) Bytes(t *testing.T) []byte {
	t.Helper()
	data, err := os.ReadFile(l.Name())
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// serveDistribution serves ds's DistributionService on 127.0.0.1 until
// the test ends and returns its URL.
func serveDistribution(t *testing.T, ds portcullisv1.DistributionServiceServer) string {
	t.Helper()
	gs := grpc.NewServer()
	portcullisv1.RegisterDistributionServiceServer(gs, ds)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go gs.Serve(ln)
	t.Cleanup(gs.Stop)
	return "http://" + ln.Addr().String()
}

// subscribeCredentials runs a Subscriber of proxy p1 of agent-1 with h
// as its CredentialHolder (nil: none) until the test ends.
func subscribeCredentials(t *testing.T, url, dir string, h *holder, log logFile) *gatewayclient.Subscriber {
	t.Helper()
	cfg := gatewayclient.SubscribeConfig{
		Gateway: url, Sandbox: "agent-1", ProxyID: "p1", DataDir: dir, Token: func() (string, error) { return "tok", nil },
		MaxBackoff: 200 * time.Millisecond, Logger: slog.New(slog.NewJSONHandler(log, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	if h != nil {
		cfg.Credentials = h
	}
	return startSubscriber(t, cfg, &proxy{})
}

// noSecretIn fails if a file under dir, or the log, holds secret.
func noSecretIn(t *testing.T, dir string, log logFile, secret string) {
	t.Helper()
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if bytes.Contains(data, []byte(secret)) {
			t.Errorf("%s holds the secret", path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(log.Bytes(t), []byte(secret)) {
		t.Error("the proxy's log holds the secret")
	}
}

// source is a distribution.CredentialSource: one bearer provider whose
// token and generation the test sets.
type source struct {
	mu    sync.Mutex
	gen   uint64
	token string
}

func (s *source) set(gen uint64, token string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gen, s.token = gen, token
}

func (s *source) CredentialsGeneration(context.Context, string) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gen, nil
}

func (s *source) SandboxCredentials(_ context.Context, sandbox string) (*provider.Bundle, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return bundle(sandbox, s.gen, s.token), nil
}

func bundle(sandbox string, gen uint64, token string) *provider.Bundle {
	return &provider.Bundle{Sandbox: sandbox, Generation: gen, Providers: []provider.Provider{{
		Spec:   provider.Spec{Name: "github", Type: provider.TypeBearer, Hosts: []string{"api.github.com"}},
		Secret: map[string]string{provider.FieldToken: token},
	}}}
}

// distServer serves the policy stream with a real Distribution, every
// caller being agent-1's sandbox token.
type distServer struct {
	portcullisv1.UnimplementedDistributionServiceServer
	d *distribution.Distribution
}

func (s distServer) StreamPolicy(st grpc.BidiStreamingServer[portcullisv1.StreamPolicyRequest, portcullisv1.StreamPolicyResponse]) error {
	return s.d.StreamPolicy(st.Context(), distribution.Caller{Sandbox: "agent-1", Token: "tok", Auth: liveToken{}}, policyConn{st})
}

type policyConn struct {
	st grpc.BidiStreamingServer[portcullisv1.StreamPolicyRequest, portcullisv1.StreamPolicyResponse]
}

func (c policyConn) Receive() (*portcullisv1.StreamPolicyRequest, error) { return c.st.Recv() }
func (c policyConn) Send(m *portcullisv1.StreamPolicyResponse) error     { return c.st.Send(m) }

type liveToken struct{}

func (liveToken) Reauthenticate(context.Context, string) error { return nil }

// A proxy of a gateway that delivers credentials holds its sandbox's
// bundle, and the next one after a rotation; neither its data dir nor its
// log holds any part of a secret.
func TestCredentialsFromTheGateway(t *testing.T) {
	lite, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "p.db"), sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	st := store.New(lite)
	pol, _, err := policy.Parse([]byte(subscribePolicy))
	if err != nil {
		t.Fatal(err)
	}
	pol = pol.Canonical()
	if _, err := st.CreateSandbox(t.Context(), store.CreateSandbox{Name: "agent-1", Actor: "test", Token: storetest.NewToken("sandbox-agent-1", "", ""),
		Policy: &store.PolicyVersion{Hash: pol.Hash(), Document: pol.CanonicalJSON(), Author: "test"}}); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	src := &source{}
	src.set(1, "ghp_first-secret-0123456789")
	stream := events.New()
	d := distribution.New(distribution.Config{Replica: "r1", Stream: stream, Credentials: src, CredentialsCheckInterval: time.Hour}, st,
		lifecycle.New(lifecycle.Config{Logger: log}, st), log)
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { _ = d.Run(ctx); close(ran) }()
	t.Cleanup(func() { cancel(); <-ran; st.Close() })

	h, logs, dir := newHolder(), newLogFile(t), t.TempDir()
	sub := subscribeCredentials(t, serveDistribution(t, distServer{d: d}), dir, h, logs)
	b := h.next(t)
	if b.Generation != 1 || len(b.Providers) != 1 || b.Providers[0].Secret[provider.FieldToken] != "ghp_first-secret-0123456789" {
		t.Fatalf("held generation %d with %d providers; want generation 1 with the first token", b.Generation, len(b.Providers))
	}
	src.set(2, "ghp_rotated-secret-9876543210")
	stream.Publish(events.CredentialsChanged{Sandboxes: []string{"agent-1"}})
	if b = h.next(t); b.Generation != 2 || b.Providers[0].Secret[provider.FieldToken] != "ghp_rotated-secret-9876543210" {
		t.Fatalf("after the rotation: generation %d; want 2 with the rotated token", b.Generation)
	}
	if gen, n := sub.CredentialsGeneration(); gen != 2 || n != 1 {
		t.Errorf("CredentialsGeneration = %d, %d; want 2, 1", gen, n)
	}
	waitApplied(t, sub, 1, 10*time.Second)
	if _, err := os.Stat(filepath.Join(dir, "policy.signed")); err != nil {
		t.Fatalf("the data dir keeps no version: %v", err)
	}
	noSecretIn(t, dir, logs, "first-secret")
	noSecretIn(t, dir, logs, "rotated-secret")
}

// scripted is a DistributionService whose policy streams the test plays
// the gateway on.
type scripted struct {
	portcullisv1.UnimplementedDistributionServiceServer
	streams chan *scriptedStream
}

type scriptedStream struct {
	hello *portcullisv1.ProxyHello
	st    grpc.BidiStreamingServer[portcullisv1.StreamPolicyRequest, portcullisv1.StreamPolicyResponse]
	end   chan struct{}
}

func (s *scripted) StreamPolicy(st grpc.BidiStreamingServer[portcullisv1.StreamPolicyRequest, portcullisv1.StreamPolicyResponse]) error {
	m, err := st.Recv()
	if err != nil {
		return err
	}
	ss := &scriptedStream{hello: m.GetHello(), st: st, end: make(chan struct{})}
	s.streams <- ss
	select {
	case <-ss.end:
	case <-st.Context().Done():
	}
	return nil
}

func (s *scripted) next(t *testing.T) *scriptedStream {
	t.Helper()
	select {
	case ss := <-s.streams:
		return ss
	case <-time.After(10 * time.Second):
		t.Fatal("no policy stream within 10s")
		return nil
	}
}

// deliver sends a delivery and returns the proxy's ACK of it.
func (ss *scriptedStream) deliver(t *testing.T, sc *portcullisv1.SealedCredentials) *portcullisv1.CredentialsAck {
	t.Helper()
	if err := ss.st.Send(&portcullisv1.StreamPolicyResponse{Message: &portcullisv1.StreamPolicyResponse_Credentials{Credentials: sc}}); err != nil {
		t.Fatal(err)
	}
	for {
		m, err := ss.st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if a := m.GetCredentialsAck(); a != nil {
			return a
		}
	}
}

// sealed seals b to the hello's key for proxy id.
func sealed(t *testing.T, hello *portcullisv1.ProxyHello, proxyID string, b *provider.Bundle, nonce string) *portcullisv1.SealedCredentials {
	t.Helper()
	enc, ct, err := provider.Seal(hello.GetCredentialKey(), proxyID, b)
	if err != nil {
		t.Fatal(err)
	}
	return &portcullisv1.SealedCredentials{Generation: b.Generation, Enc: enc, Ciphertext: ct, Nonce: nonce}
}

// The proxy's side of each delivery: a bundle that opens is held and
// ACKed with its generation and providers; a lower generation (the
// store restored from a backup) is what stands and replaces it; one
// tampered with, or sealed for
// another proxy, leaves the proxy holding none of that generation, and
// the ACK says why without any part of the secret. Every hello of the
// run, reconnects too, gives the same key.
func TestCredentialsDeliveries(t *testing.T) {
	const secret = "ghp_scripted-secret-0123456789"
	srv := &scripted{streams: make(chan *scriptedStream, 4)}
	h, logs, dir := newHolder(), newLogFile(t), t.TempDir()
	sub := subscribeCredentials(t, serveDistribution(t, srv), dir, h, logs)
	ss := srv.next(t)
	key := ss.hello.GetCredentialKey()
	if len(key) != 32 {
		t.Fatalf("hello gives a credential key of %d bytes, want an X25519 public key", len(key))
	}

	a := ss.deliver(t, sealed(t, ss.hello, "p1", bundle("agent-1", 2, secret), "n1"))
	if a.GetNonce() != "n1" || a.GetGeneration() != 2 || a.GetProviders() != 1 || a.GetError() != "" {
		t.Fatalf("ACK %v; want n1, generation 2, 1 provider, no error", a)
	}
	if b := h.next(t); b.Generation != 2 || b.Providers[0].Secret[provider.FieldToken] != secret {
		t.Fatalf("held generation %d; want 2 with the secret", b.Generation)
	}

	a = ss.deliver(t, sealed(t, ss.hello, "p1", bundle("agent-1", 1, "restored-secret"), "n2"))
	if a.GetNonce() != "n2" || a.GetGeneration() != 1 || a.GetProviders() != 1 || a.GetError() != "" {
		t.Fatalf("ACK of a lower generation %v; want n2 naming it, 1", a)
	}
	if b := h.next(t); b.Generation != 1 || b.Providers[0].Secret[provider.FieldToken] != "restored-secret" {
		t.Fatalf("after a restore the proxy holds generation %d; want the restored store's, 1", b.Generation)
	}

	tampered := sealed(t, ss.hello, "p1", bundle("agent-1", 3, secret), "n3")
	tampered.Ciphertext[len(tampered.Ciphertext)/2] ^= 1
	for _, bad := range []*portcullisv1.SealedCredentials{
		tampered,
		sealed(t, ss.hello, "p2", bundle("agent-1", 4, secret), "n4"),       // for another proxy
		sealed(t, ss.hello, "p1", bundle("agent-1", 6, secret), "n5"),       // the message and the bundle disagree on the generation
		sealed(t, ss.hello, "p1", bundle("other-sandbox", 7, secret), "n6"), // another sandbox's
	} {
		if bad.Nonce == "n5" {
			bad.Generation = 5 // the message says 5, the sealed bundle 6
		}
		a = ss.deliver(t, bad)
		if a.GetNonce() != bad.Nonce || a.GetGeneration() != bad.Generation || a.GetProviders() != 0 || a.GetError() == "" ||
			bytes.Contains([]byte(a.GetError()), []byte("secret-0123")) {
			t.Errorf("ACK of a delivery that does not open: %v; want its nonce and generation, no providers, an error without the secret", a)
		}
		if b := h.next(t); b.Generation != bad.Generation || len(b.Providers) != 0 {
			t.Errorf("after %s: held generation %d with %d providers; want none at generation %d", bad.Nonce, b.Generation, len(b.Providers), bad.Generation)
		}
	}
	if gen, n := sub.CredentialsGeneration(); gen != 7 || n != 0 {
		t.Errorf("CredentialsGeneration = %d, %d; want 7 and none", gen, n)
	}

	close(ss.end) // the stream ends; the proxy reconnects with the same key
	ss = srv.next(t)
	if !bytes.Equal(ss.hello.GetCredentialKey(), key) {
		t.Error("the reconnect's hello gives another credential key")
	}
	a = ss.deliver(t, sealed(t, ss.hello, "p1", bundle("agent-1", 8, secret), "n7"))
	if a.GetGeneration() != 8 || a.GetProviders() != 1 || a.GetError() != "" {
		t.Fatalf("ACK after the reconnect %v; want generation 8 held", a)
	}
	if b := h.next(t); b.Generation != 8 || len(b.Providers) != 1 {
		t.Fatalf("held generation %d; want 8", b.Generation)
	}
	close(ss.end)
	noSecretIn(t, dir, logs, "secret-0123")
}

// A proxy with no CredentialHolder gives no key: the gateway seals
// nothing to it.
func TestNoCredentialKeyWithoutHolder(t *testing.T) {
	srv := &scripted{streams: make(chan *scriptedStream, 4)}
	subscribeCredentials(t, serveDistribution(t, srv), t.TempDir(), nil, newLogFile(t))
	ss := srv.next(t)
	defer close(ss.end)
	if k := ss.hello.GetCredentialKey(); len(k) != 0 {
		t.Fatalf("a proxy that takes no credentials gave a key of %d bytes", len(k))
	}
}
