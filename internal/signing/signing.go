// Package signing defines what the gateway's policy signatures cover and
// how a proxy checks them: the exact bytes signed, key ids, and the key
// chain a proxy follows from the key it pinned to the key signing now.
//
// A policy signature (Ed25519) covers the sandbox, the version number, the
// policy hash, the SHA-256 of the document bytes and the version's parent,
// each length-prefixed after a domain string, so no field can be shifted
// into another and a signature made for one purpose (a policy, a key
// endorsement) is never valid for the other.
//
// The parent is the Lineage of the version before: a hash over the whole
// history (each version's number and policy hash, chained as commit ids
// are), so that a proxy can tell a version descending from the one it
// holds from one of a forked history with the same number (a replica on a
// restored database). Version 1 has no parent, nor does a version signed
// before parents existed. A version with a parent carries two signatures
// by the same key: Signature over the payload without the parent, as
// before (so a proxy older than parents verifies it and ignores the
// parent), and ParentSignature over that payload and the parent under
// its own domain. A parent cannot be altered or added without a
// ParentSignature to match; removing both leaves a version without
// parent, which a proxy takes on its number (as every version was before
// parents) only while the version it holds has no parent either.
//
// Keys form a chain, oldest first: each key after the first is endorsed
// (signed) by the one before it. A proxy trusts the key it pinned and
// every key the chain leads to from there, never one before it: after
// following a rotation, a version signed by a retired key is refused.
package signing

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"

	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

const (
	policyDomain       = "portcullis policy signature v1"
	policyParentDomain = "portcullis policy signature v2"
	lineageDomain      = "portcullis policy lineage v1"
	keyDomain          = "portcullis gateway key endorsement v1"
)

// KeyID names a public key: "ed25519:" and the first 16 hex digits of its
// SHA-256.
func KeyID(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return "ed25519:" + hex.EncodeToString(sum[:8])
}

// NewKey generates a signing key. prev, when not nil, endorses it.
func NewKey(prev ed25519.PrivateKey) (pub ed25519.PublicKey, priv ed25519.PrivateKey, endorsement []byte, err error) {
	pub, priv, err = ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("generate signing key: %w", err)
	}
	if prev != nil {
		endorsement = ed25519.Sign(prev, keyPayload(pub))
	}
	return pub, priv, endorsement, nil
}

// PolicyPayload is the message a policy's Signature signs.
func PolicyPayload(sandbox string, version uint32, hash string, document []byte) []byte {
	return payload(policyDomain, sandbox, version, hash, document)
}

// ParentPayload is the message a policy's ParentSignature signs: what
// PolicyPayload holds, under another domain, and the parent.
func ParentPayload(sandbox string, version uint32, hash string, document []byte, parent string) []byte {
	return appendField(payload(policyParentDomain, sandbox, version, hash, document), []byte(parent))
}

func payload(domain, sandbox string, version uint32, hash string, document []byte) []byte {
	sum := sha256.Sum256(document)
	var b []byte
	b = appendField(b, []byte(domain))
	b = appendField(b, []byte(sandbox))
	b = binary.BigEndian.AppendUint32(b, version)
	b = appendField(b, []byte(hash))
	b = appendField(b, sum[:])
	return b
}

// Lineage is the hex SHA-256 naming a version and, through parent (the
// lineage of the version before it, "" for version 1), every version
// before it: two histories that differ anywhere up to version have
// different lineages. The next version's Parent is this.
func Lineage(parent string, version uint32, hash string) string {
	b := appendField(nil, []byte(lineageDomain))
	b = appendField(b, []byte(parent))
	b = binary.BigEndian.AppendUint32(b, version)
	b = appendField(b, []byte(hash))
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func keyPayload(pub ed25519.PublicKey) []byte {
	b := appendField(nil, []byte(keyDomain))
	return appendField(b, pub)
}

func appendField(b, field []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(field)))
	return append(b, field...)
}

// SignPolicy signs sp's sandbox, version, hash and document with priv,
// and those and its parent when it has one, and sets its KeyId,
// Signature and ParentSignature.
func SignPolicy(sp *portcullisv1.SignedPolicy, priv ed25519.PrivateKey) {
	sp.KeyId = KeyID(priv.Public().(ed25519.PublicKey))
	sp.Signature = ed25519.Sign(priv, PolicyPayload(sp.GetSandbox(), sp.GetVersion(), sp.GetHash(), sp.GetDocument()))
	sp.ParentSignature = nil
	if sp.GetParent() != "" {
		sp.ParentSignature = ed25519.Sign(priv, ParentPayload(sp.GetSandbox(), sp.GetVersion(), sp.GetHash(), sp.GetDocument(), sp.GetParent()))
	}
}

// ErrUntrusted is wrapped by every refusal of Follow and VerifyPolicy.
var ErrUntrusted = errors.New("not signed by a trusted gateway key")

// Follow walks chain from the pinned key and returns the newest key it
// leads to: the pinned key must be in the chain, and every later key must
// carry its predecessor's endorsement. A chain that does not hold the
// pinned key, or breaks after it, is refused.
func Follow(pinned ed25519.PublicKey, chain []*portcullisv1.GatewayKey) (ed25519.PublicKey, error) {
	start := -1
	for i, k := range chain {
		if pinned.Equal(ed25519.PublicKey(k.GetPublicKey())) {
			start = i
		}
	}
	if start < 0 {
		return nil, fmt.Errorf("%w: the key chain does not hold the pinned key %s", ErrUntrusted, KeyID(pinned))
	}
	cur := pinned
	for _, k := range chain[start+1:] {
		next := ed25519.PublicKey(k.GetPublicKey())
		if len(next) != ed25519.PublicKeySize {
			return nil, fmt.Errorf("%w: key %q has %d bytes", ErrUntrusted, k.GetId(), len(next))
		}
		if !ed25519.Verify(cur, keyPayload(next), k.GetEndorsement()) {
			return nil, fmt.Errorf("%w: key %s is not endorsed by %s", ErrUntrusted, KeyID(next), KeyID(cur))
		}
		cur = next
	}
	return cur, nil
}

// VerifyPolicy checks that sp is signed by key and names it, its parent
// included when it has one.
func VerifyPolicy(sp *portcullisv1.SignedPolicy, key ed25519.PublicKey) error {
	if len(key) != ed25519.PublicKeySize {
		return fmt.Errorf("%w: no key", ErrUntrusted)
	}
	if sp.GetKeyId() != KeyID(key) {
		return fmt.Errorf("%w: signed by %q, trusted key is %s", ErrUntrusted, sp.GetKeyId(), KeyID(key))
	}
	if !ed25519.Verify(key, PolicyPayload(sp.GetSandbox(), sp.GetVersion(), sp.GetHash(), sp.GetDocument()), sp.GetSignature()) {
		return fmt.Errorf("%w: the signature of version %d does not match its content", ErrUntrusted, sp.GetVersion())
	}
	switch {
	case sp.GetParent() != "":
		if !ed25519.Verify(key, ParentPayload(sp.GetSandbox(), sp.GetVersion(), sp.GetHash(), sp.GetDocument(), sp.GetParent()), sp.GetParentSignature()) {
			return fmt.Errorf("%w: the parent signature of version %d does not match its parent", ErrUntrusted, sp.GetVersion())
		}
	case len(sp.GetParentSignature()) > 0:
		return fmt.Errorf("%w: version %d has a parent signature and no parent", ErrUntrusted, sp.GetVersion())
	}
	return nil
}

// ParsePublicKey reads a key as `portcullis gateway` prints it: hex of
// the 32 public key bytes, optionally prefixed "ed25519:".
func ParsePublicKey(s string) (ed25519.PublicKey, error) {
	if len(s) > 8 && s[:8] == "ed25519:" {
		s = s[8:]
	}
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("a gateway key is %d hex-encoded bytes (optionally prefixed ed25519:)", ed25519.PublicKeySize)
	}
	return ed25519.PublicKey(b), nil
}

// FormatPublicKey is the form ParsePublicKey reads.
func FormatPublicKey(pub ed25519.PublicKey) string {
	return "ed25519:" + hex.EncodeToString(pub)
}
