package sentry

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// signingDomain starts the signed bytes, so that a signature made for a
// Sentry event cannot be replayed as any other message signed by the key.
const signingDomain = "portcullis-sentry-v1"

// Signature errors, for errors.Is.
var (
	ErrUnsigned     = errors.New("event is not signed")
	ErrBadSignature = errors.New("signature does not verify")
)

// SigningBytes returns the bytes an event's Ed25519 signature covers:
//
//	"portcullis-sentry-v1\n" + id + "\n" + source + "\n" + type + "\n" +
//	subject + "\n" + time + "\n" + sequence + "\n" + hex(sha256(JCS(data)))
//
// time is the event time in UTC as RFC 3339 with only the fraction digits
// needed (Go's time.RFC3339Nano), empty for an event sent without one, sequence is decimal, and JCS(data) is
// the RFC 8785 canonical form of data, so whitespace and key order do not
// matter. The reader refuses control characters in id, source, type and
// subject, so the newlines separate the fields unambiguously. Subject and
// type are covered so that a signed event cannot be pointed at another
// sandbox or read as another class.
func SigningBytes(ev Event) ([]byte, error) {
	canon, err := canonicalJSON(ev.Data)
	if err != nil {
		return nil, fmt.Errorf("canonical data: %w", err)
	}
	sum := sha256.Sum256(canon)
	s := signingDomain + "\n" + ev.ID + "\n" + ev.Source + "\n" + ev.Type + "\n" + ev.Subject + "\n" +
		signingTime(ev.Time) + "\n" + strconv.FormatUint(ev.Sequence, 10) + "\n" +
		hex.EncodeToString(sum[:])
	return []byte(s), nil
}

// signingTime is t as the signed bytes hold it: empty for an event that
// had no time.
func signingTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// Sign returns the signature of ev by key; the caller sets ev.Signature.
func Sign(key ed25519.PrivateKey, ev Event) ([]byte, error) {
	msg, err := SigningBytes(ev)
	if err != nil {
		return nil, err
	}
	return ed25519.Sign(key, msg), nil
}

// Verify checks ev.Signature against pub. It returns ErrUnsigned when the
// event has no signature and ErrBadSignature when it does not verify.
func Verify(pub ed25519.PublicKey, ev Event) error {
	if len(ev.Signature) == 0 {
		return ErrUnsigned
	}
	if len(pub) != ed25519.PublicKeySize {
		return fmt.Errorf("public key is %d bytes, want %d", len(pub), ed25519.PublicKeySize)
	}
	msg, err := SigningBytes(ev)
	if err != nil {
		return err
	}
	if !ed25519.Verify(pub, msg, ev.Signature) {
		return ErrBadSignature
	}
	return nil
}
