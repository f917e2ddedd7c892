package sqlite

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/portcullis-dev/portcullis/store"
)

// Input checks of the push methods, run before the database is touched.
// They are plain errors, like store's Check and Prepare methods. The
// Postgres engine runs the same ones (store/postgres/check.go); this one
// also refuses times int64 nanoseconds cannot hold (inNanos).

func checkSigningKey(k store.SigningKey) error {
	switch {
	case k.ID == "":
		return errors.New("invalid signing key: empty id")
	case len(k.PublicKey) != ed25519.PublicKeySize:
		return fmt.Errorf("invalid signing key %q: public key of %d bytes, want %d", k.ID, len(k.PublicKey), ed25519.PublicKeySize)
	case len(k.PrivateKey) != ed25519.PrivateKeySize:
		return fmt.Errorf("invalid signing key %q: private key of %d bytes, want %d", k.ID, len(k.PrivateKey), ed25519.PrivateKeySize)
	case !bytes.Equal(k.PrivateKey[ed25519.SeedSize:], k.PublicKey):
		// An Ed25519 private key ends with its public key.
		return fmt.Errorf("invalid signing key %q: the private key does not match the public key", k.ID)
	}
	return nil
}

func checkSandboxCA(ca store.SandboxCA) error {
	switch {
	case ca.Sandbox == "":
		return errors.New("invalid sandbox CA: empty sandbox")
	case len(ca.CertPEM) == 0 || len(ca.KeyPEM) == 0:
		return fmt.Errorf("invalid CA of sandbox %q: empty certificate or key", ca.Sandbox)
	}
	return nil
}

func checkProxyStatuses(statuses []store.ProxyStatus) error {
	for i, st := range statuses {
		switch {
		case st.Sandbox == "":
			return fmt.Errorf("invalid proxy status %d: empty sandbox", i)
		case st.ProxyID == "":
			return fmt.Errorf("invalid proxy status %d (sandbox %q): empty proxy id", i, st.Sandbox)
		}
		for _, t := range []*time.Time{&st.ConnectedAt, &st.LastSeenAt, st.LastAckAt, st.LastNackAt} {
			if t != nil && !inNanos(*t) {
				return fmt.Errorf("invalid proxy status %d (sandbox %q): time %v out of range", i, st.Sandbox, *t)
			}
		}
	}
	return nil
}

func checkDecisions(records []store.Decision) error {
	for i, d := range records {
		switch {
		case d.Sandbox == "":
			return fmt.Errorf("invalid decision record %d: empty sandbox", i)
		case d.ProxyID == "":
			return fmt.Errorf("invalid decision record %d (sandbox %q): empty proxy id", i, d.Sandbox)
		case d.Port < 0 || d.Port > 65535:
			return fmt.Errorf("invalid decision record %d (sandbox %q): port %d", i, d.Sandbox, d.Port)
		case !inNanos(d.Time):
			return fmt.Errorf("invalid decision record %d (sandbox %q): time %v out of range", i, d.Sandbox, d.Time)
		}
	}
	return nil
}

// Times int64 nanoseconds since the epoch can hold (years 1678 to 2262).
var (
	minNanos = time.Unix(0, math.MinInt64)
	maxNanos = time.Unix(0, math.MaxInt64)
)

// inNanos reports whether t is the zero time (stored as NULL) or fits in
// int64 nanoseconds.
func inNanos(t time.Time) bool {
	return t.IsZero() || (!t.Before(minNanos) && !t.After(maxNanos))
}
