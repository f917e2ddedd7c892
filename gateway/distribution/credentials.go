package distribution

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/portcullis-dev/portcullis/internal/events"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
	"github.com/portcullis-dev/portcullis/provider"
)

// Credentials on the policy stream. A proxy run that gives a credential
// key in its hello is sent its sandbox's bundle (the attached providers
// with their secrets), sealed to that key for that proxy id
// (provider.Seal), once its stream is set up and whenever the sandbox's
// credentials generation moves; it answers with a CredentialsAck, which
// the proxy tracker records as the status's credentials generation and
// error.
//
// The generation moves on this replica's lifecycle (events.
// CredentialsChanged: the sandbox is read at once) or on another
// replica's, which a read of the generation of every sandbox with keyed
// streams here, every CredentialsCheckInterval, finds (one read per
// sandbox, however many of its proxies stream here). A bundle is read
// once per sandbox and generation, sealed for each stream that needs it,
// and dropped: the gateway keeps no secret between deliveries, and logs
// and traces no part of one.

// CredentialsCheckInterval is the default of
// Config.CredentialsCheckInterval: with the delivery itself, a rotation
// on another replica reaches every proxy within a second.
const CredentialsCheckInterval = 250 * time.Millisecond

// CredentialSource reads sandboxes' credentials (lifecycle, which
// decrypts the providers' secrets).
type CredentialSource interface {
	// SandboxCredentials returns the bundle of sandbox's attached
	// providers with their secrets, at its current generation. The
	// bundle is the caller's: distribution clears its secret maps once
	// it is sealed, so it must not be shared (a cache's own copy).
	SandboxCredentials(ctx context.Context, sandbox string) (*provider.Bundle, error)
	// CredentialsGeneration returns sandbox's current credentials
	// generation; 0: it never had credentials.
	CredentialsGeneration(ctx context.Context, sandbox string) (uint64, error)
}

// maxCredentialReads bounds the sandboxes whose credentials a replica
// reads at once.
const maxCredentialReads = 4

// credHub keeps the keyed streams by sandbox and delivers their bundles.
type credHub struct {
	src      CredentialSource
	log      *slog.Logger
	interval time.Duration

	mu      sync.Mutex
	streams map[string]map[*policyStream]struct{} // keyed streams by sandbox
	// dirty holds the sandboxes to read at once (a change here, a new
	// stream); kick wakes run for them.
	dirty map[string]struct{}
	kick  chan struct{}
	// failed is the last read error logged per sandbox: logged once
	// until it changes or a read succeeds.
	failed map[string]string
}

func newCredHub(src CredentialSource, log *slog.Logger, interval time.Duration) *credHub {
	return &credHub{src: src, log: log, interval: interval, streams: make(map[string]map[*policyStream]struct{}),
		dirty: make(map[string]struct{}), kick: make(chan struct{}, 1), failed: make(map[string]string)}
}

// credStream is the credentials side of one keyed stream.
type credStream struct {
	sandbox string
	key     []byte // the hello's credential_key
	// caller's token is checked again before anything is sealed for the
	// stream: a token revoked (rotated, or the proxy stolen) since the
	// stream opened gets no secret, and its stream ends.
	caller Caller
	// sent is the generation last sealed for the stream (delivered: one
	// was); due the delivery waiting for its sender.
	sent      atomic.Uint64
	delivered atomic.Bool
	due       atomic.Pointer[portcullisv1.SealedCredentials]

	mu     sync.Mutex
	nonces map[string]uint64 // deliveries not yet answered: their generations
}

// maxCredentialsUnanswered bounds the deliveries remembered for ACKs.
const maxCredentialsUnanswered = 8

// checkCredentialKey checks a hello's credential key by sealing an empty
// bundle to it: a key that is not an X25519 public key, or one no
// secret can be sealed to, is refused before anything is.
func checkCredentialKey(key []byte, sandbox, proxyID string) error {
	if _, _, err := provider.Seal(key, proxyID, &provider.Bundle{Sandbox: sandbox}); err != nil {
		return invalidField("hello.credential_key", "is not a usable HPKE X25519 public key: %v", err)
	}
	return nil
}

// register adds a keyed stream and has its sandbox read at once.
func (c *credHub) register(ps *policyStream) {
	c.mu.Lock()
	sb := ps.cred.sandbox
	if c.streams[sb] == nil {
		c.streams[sb] = make(map[*policyStream]struct{})
	}
	c.streams[sb][ps] = struct{}{}
	c.dirty[sb] = struct{}{}
	c.mu.Unlock()
	c.wake()
}

func (c *credHub) unregister(ps *policyStream) {
	c.mu.Lock()
	defer c.mu.Unlock()
	sb := ps.cred.sandbox
	delete(c.streams[sb], ps)
	if len(c.streams[sb]) == 0 {
		delete(c.streams, sb)
		delete(c.failed, sb)
	}
}

func (c *credHub) wake() {
	select {
	case c.kick <- struct{}{}:
	default: // a read is already asked for; it takes this one too
	}
}

// handle is the event stream's subscriber: a change on this replica is
// delivered at once.
func (c *credHub) handle(e events.Event) {
	ch, ok := e.(events.CredentialsChanged)
	if !ok {
		return
	}
	c.mu.Lock()
	n := 0
	for _, sb := range ch.Sandboxes {
		if _, ok := c.streams[sb]; ok {
			c.dirty[sb] = struct{}{}
			n++
		}
	}
	c.mu.Unlock()
	if n > 0 {
		c.wake()
	}
}

// run delivers until ctx ends: the dirty sandboxes when woken, every
// sandbox with keyed streams every interval.
func (c *credHub) run(ctx context.Context) {
	tick := time.NewTicker(c.interval)
	defer tick.Stop()
	for {
		var sandboxes []string
		select {
		case <-ctx.Done():
			return
		case <-c.kick:
			sandboxes = c.take(true)
		case <-tick.C:
			sandboxes = c.take(false)
		}
		c.refreshAll(ctx, sandboxes)
	}
}

// take returns the dirty sandboxes (dirty) or every sandbox with keyed
// streams, and clears the dirty ones it returns.
func (c *credHub) take(dirty bool) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	if dirty {
		for sb := range c.dirty {
			if _, ok := c.streams[sb]; ok {
				out = append(out, sb)
			}
		}
	} else {
		for sb := range c.streams {
			out = append(out, sb)
		}
	}
	clear(c.dirty)
	return out
}

// refreshAll refreshes sandboxes, at most maxCredentialReads at once: a
// slow read for one holds up few others.
func (c *credHub) refreshAll(ctx context.Context, sandboxes []string) {
	sem := make(chan struct{}, maxCredentialReads)
	var wg sync.WaitGroup
	for _, sb := range sandboxes {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := c.refresh(ctx, sb); err != nil {
				c.failure(ctx, sb, err)
				return
			}
			c.mu.Lock()
			delete(c.failed, sb)
			c.mu.Unlock()
		})
	}
	wg.Wait()
}

// failure logs a read failure once per sandbox and distinct error; the
// next interval tries again.
func (c *credHub) failure(ctx context.Context, sandbox string, err error) {
	if ctx.Err() != nil {
		return
	}
	msg := err.Error()
	c.mu.Lock()
	_, live := c.streams[sandbox]
	logged := c.failed[sandbox] == msg
	if live {
		c.failed[sandbox] = msg
	}
	c.mu.Unlock()
	if live && !logged {
		c.log.Warn("could not deliver a sandbox's credentials to its proxies; retrying", "sandbox", sandbox, "err", err)
	}
}

// behind returns sandbox's keyed streams that were sent no generation
// yet, or another than gen: a new stream gets the sandbox's credentials
// whatever they are (none at generation 0: its proxy, connected to a store
// restored from a backup, may hold another's), and a stream is sent the
// generation read whether it is newer or, the store restored, older.
func (c *credHub) behind(sandbox string, gen uint64) []*policyStream {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*policyStream
	for ps := range c.streams[sandbox] {
		if !ps.cred.delivered.Load() || ps.cred.sent.Load() != gen {
			out = append(out, ps)
		}
	}
	return out
}

// refresh sends sandbox's bundle to its streams that lack its current
// generation: one read of the generation, and of the bundle only if a
// stream needs it.
func (c *credHub) refresh(ctx context.Context, sandbox string) error {
	gen, err := c.src.CredentialsGeneration(ctx, sandbox)
	if err != nil {
		return fmt.Errorf("read credentials generation: %w", err)
	}
	if len(c.behind(sandbox, gen)) == 0 {
		return nil
	}
	b := &provider.Bundle{Sandbox: sandbox} // generation 0: never a provider, no secret to read
	if gen > 0 {
		if b, err = c.src.SandboxCredentials(ctx, sandbox); err != nil {
			return fmt.Errorf("read credentials: %w", err)
		}
		defer drop(b)
		if b == nil || b.Sandbox != sandbox {
			return fmt.Errorf("read credentials: the bundle read is not one of sandbox %q", sandbox)
		}
	}
	checked := map[string]error{} // a sandbox's proxies mostly share one token: checked once
	for _, ps := range c.behind(sandbox, b.Generation) {
		tok := ps.cred.caller.Token
		err, ok := checked[tok]
		if !ok {
			err = ps.cred.caller.Auth.Reauthenticate(ctx, tok)
			checked[tok] = err
		}
		if err != nil {
			ps.fail(err)
			continue
		}
		msg, err := seal(ps, b)
		if err != nil {
			return err
		}
		ps.cred.sent.Store(b.Generation)
		ps.cred.delivered.Store(true)
		ps.cred.due.Store(msg)
		ps.wake()
	}
	return nil
}

// seal seals b for ps's proxy and remembers the delivery's nonce.
func seal(ps *policyStream, b *provider.Bundle) (*portcullisv1.SealedCredentials, error) {
	enc, ct, err := provider.Seal(ps.cred.key, ps.proxyID, b)
	if err != nil {
		return nil, fmt.Errorf("seal credentials for proxy %q: %w", ps.proxyID, err)
	}
	var n [8]byte
	if _, err := rand.Read(n[:]); err != nil {
		return nil, err
	}
	msg := &portcullisv1.SealedCredentials{Generation: b.Generation, Enc: enc, Ciphertext: ct, Nonce: hex.EncodeToString(n[:])}
	cs := ps.cred
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.nonces == nil || len(cs.nonces) >= maxCredentialsUnanswered {
		cs.nonces = make(map[string]uint64)
	}
	cs.nonces[msg.Nonce] = b.Generation
	return msg, nil
}

// drop forgets b's secrets. Go strings cannot be overwritten; the
// plaintext buffer sealing makes is (provider.Seal clears it).
func drop(b *provider.Bundle) {
	if b == nil {
		return
	}
	for i := range b.Providers {
		clear(b.Providers[i].Secret)
	}
	b.Providers = nil
}

// sentFor returns (and forgets) the generation of the delivery sent
// with nonce.
func (cs *credStream) sentFor(nonce string) (uint64, bool) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	gen, ok := cs.nonces[nonce]
	delete(cs.nonces, nonce)
	return gen, ok
}

// credentialsAck records a proxy's answer to a delivery: the generation
// it holds is the one delivered. An answer to no delivery of this
// stream, or naming another generation than it, is ignored.
func (d *Distribution) credentialsAck(ctx context.Context, ps *policyStream, e *proxyEntry, a *portcullisv1.CredentialsAck, now time.Time) {
	if ps.cred == nil {
		d.log.DebugContext(ctx, "ignored a credentials ACK on a stream sent no credentials", "sandbox", e.key.sandbox, "proxy", e.key.proxyID)
		return
	}
	sent, ok := ps.cred.sentFor(a.GetNonce())
	if !ok || a.GetGeneration() != sent {
		d.log.DebugContext(ctx, "ignored a credentials ACK for a delivery or generation never sent", "sandbox", e.key.sandbox, "proxy", e.key.proxyID,
			"generation", a.GetGeneration())
		return
	}
	msg := truncate(a.GetError(), maxNackError)
	d.proxies.credentials(e, a.GetGeneration(), msg, now)
	if msg != "" {
		d.log.WarnContext(ctx, "proxy could not open its credentials; it holds none and denies requests bound to a provider",
			"sandbox", e.key.sandbox, "proxy", e.key.proxyID, "generation", a.GetGeneration(), "error", msg)
	}
}
