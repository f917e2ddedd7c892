package secretbox

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func testKey(t *testing.T) *Key {
	t.Helper()
	k, err := Generate(filepath.Join(t.TempDir(), "secrets.key"))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestRoundTrip(t *testing.T) {
	k := testKey(t)
	plain := []byte(`{"token":"s3cr3t"}`)
	blob, err := k.Seal(plain, []byte("provider\x00gh\x001"))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(blob, plain) || bytes.Contains(blob, []byte("s3cr3t")) {
		t.Fatal("the sealed blob holds the plaintext")
	}
	if KeyID(blob) != k.ID() || len(k.ID()) != 12 {
		t.Errorf("KeyID = %q, key id %q", KeyID(blob), k.ID())
	}
	got, err := k.Open(blob, []byte("provider\x00gh\x001"))
	if err != nil || !bytes.Equal(got, plain) {
		t.Fatalf("Open = %q, %v", got, err)
	}
	again, _ := k.Seal(plain, []byte("provider\x00gh\x001"))
	if bytes.Equal(again, blob) {
		t.Error("two seals of one plaintext are equal: no fresh data key or nonce")
	}
}

func TestWrongKey(t *testing.T) {
	k1, k2 := testKey(t), testKey(t)
	blob, _ := k1.Seal([]byte("x"), nil)
	_, err := k2.Open(blob, nil)
	if !errors.Is(err, ErrWrongKey) || !strings.Contains(err.Error(), k1.ID()) || !strings.Contains(err.Error(), k2.ID()) ||
		!strings.Contains(err.Error(), "--secrets-key-file") {
		t.Errorf("Open under another key = %v", err)
	}
}

func TestTamperedAndWrongAAD(t *testing.T) {
	k := testKey(t)
	blob, _ := k.Seal([]byte("hello"), []byte("a"))
	for i := 2 + len(k.ID()); i < len(blob); i++ {
		b := bytes.Clone(blob)
		b[i] ^= 1
		if _, err := k.Open(b, []byte("a")); !errors.Is(err, ErrOpen) {
			t.Fatalf("byte %d flipped: Open = %v, want ErrOpen", i, err)
		}
	}
	if _, err := k.Open(blob, []byte("b")); !errors.Is(err, ErrOpen) {
		t.Errorf("wrong AAD: Open = %v", err)
	}
	for _, b := range [][]byte{nil, {1}, blob[:20], append([]byte{2}, blob[1:]...)} {
		if _, err := k.Open(b, []byte("a")); !errors.Is(err, ErrOpen) {
			t.Errorf("Open(%x) = %v, want ErrOpen", b, err)
		}
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "k")
	k, err := Generate(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("generated key file mode %v", fi.Mode().Perm())
	}
	got, err := Load(path)
	if err != nil || got.ID() != k.ID() {
		t.Fatalf("Load = %v, %v", got, err)
	}
	if _, err := Generate(path); err == nil {
		t.Error("Generate over an existing file succeeded")
	}
	if got, _ := Load(path); got.ID() != k.ID() {
		t.Error("Generate over an existing file changed it")
	}
	if err := os.Chmod(path, 0o640); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(path); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("Load of a group-readable file = %v", err)
	}
	for name, content := range map[string]string{
		"raw":      strings.Repeat("k", 32),
		"short":    "AAAA\n",
		"two":      string(Encode(make([]byte, 32))) + string(Encode(make([]byte, 32))),
		"urlsafe":  strings.ReplaceAll(strings.ReplaceAll(string(Encode(bytes.Repeat([]byte{0xfb, 0xff}, 16))), "+", "-"), "/", "_"),
		"empty":    "",
		"spaced":   " " + string(Encode(make([]byte, 32))),
		"nopadlen": string(Encode(make([]byte, 31))),
	} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := Load(p); err == nil || !strings.Contains(err.Error(), "base64") {
			t.Errorf("Load(%s) = %v, want a refusal", name, err)
		}
	}
	if _, err := Load(filepath.Join(dir, "none")); err == nil {
		t.Error("Load of a missing file succeeded")
	}
}
