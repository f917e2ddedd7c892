package sentry

import (
	"bytes"
	"crypto/ed25519"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
)

// ParsePublicKey reads the Ed25519 public key a source signs its events
// with, as an operator registers it: a PEM "PUBLIC KEY" block (PKIX, as
// 'openssl pkey -pubout' writes it), or the base64 text of its 32 bytes.
// Its errors say what the data is instead.
func ParsePublicKey(data []byte) (ed25519.PublicKey, error) {
	text := bytes.TrimSpace(data)
	if bytes.HasPrefix(text, []byte("-----BEGIN")) {
		block, rest := pem.Decode(text)
		switch {
		case block == nil:
			return nil, errors.New("not a readable PEM block")
		case block.Type != "PUBLIC KEY":
			return nil, fmt.Errorf("a PEM %q block; want a PUBLIC KEY block (PKIX)", block.Type)
		case len(bytes.TrimSpace(rest)) > 0:
			return nil, errors.New("more than one PEM block; give one PUBLIC KEY block")
		}
		key, err := x509.ParsePKIXPublicKey(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("PEM PUBLIC KEY block: %w", err)
		}
		pub, ok := key.(ed25519.PublicKey)
		if !ok {
			return nil, fmt.Errorf("a %T, not an Ed25519 public key", key)
		}
		return pub, nil
	}
	raw, err := base64.StdEncoding.DecodeString(string(text))
	if err != nil {
		raw, err = base64.RawStdEncoding.DecodeString(string(text))
	}
	if err != nil {
		return nil, errors.New("not an Ed25519 public key: want the base64 of its 32 bytes or a PEM PUBLIC KEY block")
	}
	if len(raw) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("base64 of %d bytes; an Ed25519 public key is %d", len(raw), ed25519.PublicKeySize)
	}
	return ed25519.PublicKey(raw), nil
}
