package gatewayclient

import (
	"encoding/json"
	"errors"
	"sync"

	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
	"github.com/portcullis-dev/portcullis/provider"
)

// Credentials at the proxy's end of the policy stream. With
// SubscribeConfig.Credentials set, the Subscriber makes a credential key
// when it is created (one per run, in memory only: never in the data
// dir) and gives its public half in every hello, reconnects included.
// The gateway seals the sandbox's bundle to it for this proxy id; the
// Subscriber opens it, hands it to the CredentialHolder and answers with
// a CredentialsAck. A bundle that does not open (tampered, for another
// proxy or generation, not a valid bundle) leaves the holder with none
// (fail closed: requests bound to a provider are denied) and the ACK says
// why. Every delivery replaces what was held, a lower generation too (a
// store restored from a backup). No part of a bundle is logged, traced or
// kept.

// CredentialHolder keeps, in memory only, the credentials the gateway
// delivers: each call replaces what it held (a bundle with no providers
// drops them all).
type CredentialHolder interface {
	SetCredentials(*provider.Bundle)
}

// credentialState is a Subscriber's credential key and what it holds.
type credentialState struct {
	key *provider.Key // nil: the proxy takes no credentials

	mu sync.Mutex
	// generation is the generation last delivered (0: none); providers
	// how many it held, 0 when it did not open.
	generation uint64
	providers  uint32
}

// public is the key's public half for the hello (nil without a key).
func (c *credentialState) public() []byte {
	if c.key == nil {
		return nil
	}
	return c.key.Public()
}

// CredentialsGeneration returns the generation of the credentials the
// proxy holds (0: none delivered yet) and how many providers they hold
// (0 when the last delivery did not open).
func (s *Subscriber) CredentialsGeneration() (generation uint64, providers uint32) {
	s.creds.mu.Lock()
	defer s.creds.mu.Unlock()
	return s.creds.generation, s.creds.providers
}

// receiveCredentials opens one delivery, hands it to the holder and
// returns the ACK (nil: none is due, the proxy took no key).
func (s *Subscriber) receiveCredentials(sc *portcullisv1.SealedCredentials) *portcullisv1.StreamPolicyRequest {
	c := &s.creds
	if c.key == nil {
		s.log.Debug("ignored credentials: this proxy gave no credential key")
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	gen := sc.GetGeneration()
	ack := func(generation uint64, providers uint32, msg string) *portcullisv1.StreamPolicyRequest {
		return &portcullisv1.StreamPolicyRequest{Message: &portcullisv1.StreamPolicyRequest_CredentialsAck{CredentialsAck: &portcullisv1.CredentialsAck{
			Nonce: sc.GetNonce(), Generation: generation, Providers: providers, Error: msg}}}
	}
	// Every delivery is applied, a lower generation too: the gateway
	// sends a stream only generations newer than it sent that stream, and
	// a new stream the current one, so a lower number means the store's
	// count went back (a restore) and what it sends now is what stands.
	b, err := c.key.Open(s.cfg.Sandbox, s.cfg.ProxyID, gen, sc.GetEnc(), sc.GetCiphertext())
	if err != nil {
		msg := openError(err)
		// Fail closed: whatever was held goes, so nothing stale is used.
		s.cfg.Credentials.SetCredentials(&provider.Bundle{Sandbox: s.cfg.Sandbox, Generation: gen})
		c.generation, c.providers = gen, 0
		s.log.Warn("could not open the credentials the gateway sent; holding none until a delivery opens", "generation", gen, "err", msg)
		return ack(gen, 0, msg)
	}
	n := uint32(len(b.Providers))
	s.cfg.Credentials.SetCredentials(b)
	c.generation, c.providers = gen, n
	s.log.Info("credentials received", "generation", gen, "providers", n)
	return ack(gen, n, "")
}

// openError is why a delivery did not open, as the ACK and the log say
// it. A bundle that decrypted but does not parse gets a fixed message:
// encoding/json's errors may quote what they read (a number, a
// character), and that is secret.
func openError(err error) string {
	var (
		syntax *json.SyntaxError
		typ    *json.UnmarshalTypeError
	)
	if errors.As(err, &syntax) || errors.As(err, &typ) {
		return "credentials: the bundle opened but is not a valid bundle"
	}
	return err.Error()
}
