package distribution

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"sync"

	"google.golang.org/protobuf/proto"

	"github.com/portcullis-dev/portcullis/internal/signing"
	"github.com/portcullis-dev/portcullis/lifecycle"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
	"github.com/portcullis-dev/portcullis/store"
)

// signer holds the gateway's signing key chain, loaded from the store
// (shared by every replica) and created there on first use.
type signer struct {
	st   store.Reader
	life *lifecycle.Lifecycle // adds keys to the chain

	mu     sync.RWMutex
	loaded bool
	chain  []*portcullisv1.GatewayKey
	active ed25519.PrivateKey
}

func newSigner(st store.Reader, life *lifecycle.Lifecycle) *signer {
	return &signer{st: st, life: life}
}

// ensure loads the chain, creating the first key when the store has none.
func (s *signer) ensure(ctx context.Context) error {
	s.mu.RLock()
	loaded := s.loaded
	s.mu.RUnlock()
	if loaded {
		return nil
	}
	return s.reload(ctx)
}

// reload reads the chain from the store (another replica may have rotated
// the key), creating the first key if there is none.
func (s *signer) reload(ctx context.Context) error {
	keys, err := s.st.SigningKeys(ctx)
	if err != nil {
		return fmt.Errorf("load signing keys: %w", err)
	}
	if len(keys) == 0 {
		pub, priv, _, err := signing.NewKey(nil)
		if err != nil {
			return err
		}
		_, err = s.life.AddSigningKey(ctx, store.SigningKey{ID: signing.KeyID(pub), PublicKey: pub, PrivateKey: priv}, "", "gateway")
		if err != nil && !errors.Is(err, store.ErrConflict) {
			return fmt.Errorf("store the first signing key: %w", err)
		}
		// On a conflict another replica created it first: use theirs.
		if keys, err = s.st.SigningKeys(ctx); err != nil {
			return fmt.Errorf("load signing keys: %w", err)
		}
		if len(keys) == 0 {
			return errors.New("no signing key after creating one")
		}
	}
	chain := make([]*portcullisv1.GatewayKey, len(keys))
	for i, k := range keys {
		chain[i] = &portcullisv1.GatewayKey{Id: k.ID, PublicKey: k.PublicKey, Endorsement: k.Endorsement}
	}
	newest := keys[len(keys)-1]
	if len(newest.PrivateKey) != ed25519.PrivateKeySize {
		return fmt.Errorf("signing key %s: stored private key has %d bytes", newest.ID, len(newest.PrivateKey))
	}
	s.mu.Lock()
	s.chain, s.active, s.loaded = chain, ed25519.PrivateKey(newest.PrivateKey), true
	s.mu.Unlock()
	return nil
}

// rotate adds a key endorsed by the current one; from then on it signs.
func (s *signer) rotate(ctx context.Context, actor string) (string, error) {
	if err := s.reload(ctx); err != nil {
		return "", err
	}
	s.mu.RLock()
	prev, prevID := s.active, s.chain[len(s.chain)-1].GetId()
	s.mu.RUnlock()
	pub, priv, endorsement, err := signing.NewKey(prev)
	if err != nil {
		return "", err
	}
	k, err := s.life.AddSigningKey(ctx, store.SigningKey{ID: signing.KeyID(pub), PublicKey: pub, PrivateKey: priv, Endorsement: endorsement}, prevID, actor)
	if err != nil {
		return "", err
	}
	return k.ID, s.reload(ctx)
}

// sign signs sp with the active key and returns the chain to send with it.
func (s *signer) sign(ctx context.Context, sp *portcullisv1.SignedPolicy) ([]*portcullisv1.GatewayKey, error) {
	if err := s.ensure(ctx); err != nil {
		return nil, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	signing.SignPolicy(sp, s.active)
	return s.chain, nil
}

// publicKey is the active key, as proxies take it in --gateway-key.
func (s *signer) publicKey(ctx context.Context) (string, error) {
	if err := s.ensure(ctx); err != nil {
		return "", err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	return signing.FormatPublicKey(s.active.Public().(ed25519.PublicKey)), nil
}

// RotateSigningKey adds a signing key to st's chain (through life),
// endorsed by the current one, and returns its id. Every replica signs
// with it from its next version check (Config.VersionCheckInterval);
// proxies follow the endorsement and re-pin, after which versions signed
// by the old key are refused.
func RotateSigningKey(ctx context.Context, st store.Reader, life *lifecycle.Lifecycle, actor string) (string, error) {
	return newSigner(st, life).rotate(ctx, actor)
}

// SigningKeyChain returns st's signing key chain, oldest first, as
// public keys in the form --gateway-key takes (creating the first key,
// through life, if there is none).
func SigningKeyChain(ctx context.Context, st store.Reader, life *lifecycle.Lifecycle) ([]string, error) {
	res, err := ListSigningKeys(ctx, st, life)
	return res.GetKeys(), err
}

// ListSigningKeys is SigningKeyChain as ProxyService.ListSigningKeys
// answers it: the keys, and the chain with each key's endorsement, as
// proxies receive it.
func ListSigningKeys(ctx context.Context, st store.Reader, life *lifecycle.Lifecycle) (*portcullisv1.ListSigningKeysResponse, error) {
	s := newSigner(st, life)
	if err := s.ensure(ctx); err != nil {
		return nil, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	res := &portcullisv1.ListSigningKeysResponse{}
	for _, k := range s.chain {
		res.Keys = append(res.Keys, signing.FormatPublicKey(k.GetPublicKey()))
		res.Chain = append(res.Chain, proto.CloneOf(k))
	}
	return res, nil
}
