package provider

import (
	"crypto/ecdh"
	"crypto/hpke"
	"encoding/json"
	"fmt"
)

// Bundle is what a sandbox's proxies hold: the providers attached to it,
// with their secrets, at one generation of the sandbox's credentials.
type Bundle struct {
	Sandbox    string     `json:"sandbox"`
	Generation uint64     `json:"generation"`
	Providers  []Provider `json:"providers"`
}

// Provider is one provider with its secret, as a proxy holds it.
type Provider struct {
	Spec
	Revision uint64            `json:"revision"`
	Secret   map[string]string `json:"secret"`
}

// The HPKE suite credentials are sealed with.
var (
	kem  = hpke.DHKEM(ecdh.X25519())
	kdf  = hpke.HKDFSHA256()
	aead = hpke.AES256GCM()
)

// Key is a proxy run's credential key: made at start, held in memory only.
type Key struct {
	priv hpke.PrivateKey
}

// NewKey makes a credential key.
func NewKey() (*Key, error) {
	priv, err := kem.GenerateKey()
	if err != nil {
		return nil, err
	}
	return &Key{priv: priv}, nil
}

// Public is the key's public half, as ProxyHello.credential_key carries it.
func (k *Key) Public() []byte { return k.priv.PublicKey().Bytes() }

// SealInfo is the HPKE info a bundle for sandbox's proxy proxyID is sealed
// with: a bundle sealed for one proxy opens for no other.
func SealInfo(sandbox, proxyID string) []byte {
	return []byte("portcullis credentials v1\x00" + sandbox + "\x00" + proxyID)
}

// Seal encrypts b to the public key pub (ProxyHello.credential_key) for
// proxyID: the encapsulated key and the ciphertext.
func Seal(pub []byte, proxyID string, b *Bundle) (enc, ciphertext []byte, err error) {
	pk, err := kem.NewPublicKey(pub)
	if err != nil {
		return nil, nil, fmt.Errorf("credential key: %w", err)
	}
	plain, err := json.Marshal(b)
	if err != nil {
		return nil, nil, err
	}
	defer clear(plain)
	enc, sender, err := hpke.NewSender(pk, kdf, aead, SealInfo(b.Sandbox, proxyID))
	if err != nil {
		return nil, nil, err
	}
	ciphertext, err = sender.Seal(nil, plain)
	return enc, ciphertext, err
}

// Open decrypts a bundle sealed to k for sandbox's proxy proxyID and
// checks it: it names sandbox and generation, and every provider's spec
// and secret pass Check.
func (k *Key) Open(sandbox, proxyID string, generation uint64, enc, ciphertext []byte) (*Bundle, error) {
	r, err := hpke.NewRecipient(enc, k.priv, kdf, aead, SealInfo(sandbox, proxyID))
	if err != nil {
		return nil, fmt.Errorf("credentials do not open: %w", err)
	}
	plain, err := r.Open(nil, ciphertext)
	if err != nil {
		return nil, fmt.Errorf("credentials do not open: %w", err)
	}
	defer clear(plain)
	var b Bundle
	if err := json.Unmarshal(plain, &b); err != nil {
		return nil, fmt.Errorf("credentials: %w", err)
	}
	if b.Sandbox != sandbox || b.Generation != generation {
		return nil, fmt.Errorf("credentials are for sandbox %q generation %d, not %q generation %d", b.Sandbox, b.Generation, sandbox, generation)
	}
	seen := map[string]bool{}
	for _, p := range b.Providers {
		secret := make(map[string][]byte, len(p.Secret))
		for f, v := range p.Secret {
			secret[f] = []byte(v)
		}
		if err := Check(p.Spec, secret); err != nil {
			return nil, fmt.Errorf("credentials: provider %q: %w", p.Name, err)
		}
		if seen[p.Name] {
			return nil, fmt.Errorf("credentials: provider %q twice", p.Name)
		}
		seen[p.Name] = true
	}
	return &b, nil
}
