package sqlite

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"testing"

	"github.com/portcullis-dev/portcullis/store"
)

// TestSigningKeysImmutable: the database itself refuses to change or drop
// a signing key.
func TestSigningKeysImmutable(t *testing.T) {
	s, _ := openInternal(t, Config{})
	ctx := t.Context()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.New(s).AddSigningKey(ctx, store.SigningKey{ID: hex.EncodeToString(pub[:8]), PublicKey: pub, PrivateKey: priv}, "", "boot"); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`UPDATE signing_keys SET endorsement = x'00'`,
		`DELETE FROM signing_keys`,
	} {
		if _, err := s.w.ExecContext(ctx, q); err == nil {
			t.Errorf("%s succeeded, want refused", q)
		}
	}
	if ks, err := s.SigningKeys(ctx); err != nil || len(ks) != 1 || ks[0].Endorsement != nil {
		t.Errorf("keys = %+v, %v; want the one stored, unchanged", ks, err)
	}
}
