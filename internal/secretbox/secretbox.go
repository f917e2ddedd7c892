// Package secretbox keeps the gateway's secrets (credential providers')
// encrypted at rest: envelope encryption with AES-256-GCM under a
// key-encryption key (KEK) the gateway reads from --secrets-key-file.
//
// Each Seal makes a fresh random data key, encrypts the plaintext with it
// and wraps the data key under the KEK; the sealed blob holds the format
// version, the KEK's id (a short fingerprint), the wrapped data key and
// the ciphertext. Envelope rather than encrypting under the KEK directly:
// rotating the KEK re-wraps the data keys only (a few bytes per secret,
// never the secrets themselves), no data key is used for more than one
// plaintext (so GCM's nonce budget is never a concern), and the wrap and
// unwrap step is where a KMS or HSM would plug in, the KEK then never
// leaving it. The caller's additional data (AAD) is bound to both the
// ciphertext and the wrapped key: a blob copied to another row does not
// open.
//
// The package is the gateway's only: the proxy never holds the KEK.
package secretbox

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
)

// KeySize is the size of a KEK and of a data key: AES-256.
const KeySize = 32

// version is the sealed blob's format: 1 byte version, 1 byte id length,
// the KEK id, the wrapped data key (nonce, key, tag), then the
// ciphertext (nonce, data, tag).
const version = 1

const (
	nonceSize = 12
	tagSize   = 16
	wrapped   = nonceSize + KeySize + tagSize
)

// Key is a key-encryption key.
type Key struct {
	kek cipher.AEAD
	id  string
}

// New returns the Key of the raw bytes k (KeySize of them).
func New(k []byte) (*Key, error) {
	if len(k) != KeySize {
		return nil, fmt.Errorf("secrets key: want %d bytes, got %d", KeySize, len(k))
	}
	kek, err := newGCM(k)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(append([]byte("portcullis secrets key id\x00"), k...))
	return &Key{kek: kek, id: hex.EncodeToString(sum[:6])}, nil
}

// ID is the key's id: a short hex fingerprint, safe to show and log.
func (k *Key) ID() string { return k.id }

// ErrWrongKey: the blob was sealed under another key (the error names
// both ids).
var ErrWrongKey = errors.New("secretbox: sealed under another key")

// ErrOpen: the blob is damaged, tampered with, or not sealed with this
// additional data.
var ErrOpen = errors.New("secretbox: sealed secret does not open (damaged, or moved from where it was sealed)")

// Seal encrypts plain under a fresh data key wrapped under k, binding
// aad.
func (k *Key) Seal(plain, aad []byte) ([]byte, error) {
	dk := make([]byte, KeySize)
	if _, err := rand.Read(dk); err != nil {
		return nil, err
	}
	defer clear(dk)
	data, err := newGCM(dk)
	if err != nil {
		return nil, err
	}
	out := []byte{version, byte(len(k.id))}
	out = append(out, k.id...)
	out = sealNonce(k.kek, out, dk, wrapAAD(aad))
	return sealNonce(data, out, plain, aad), nil
}

// Open decrypts a blob Seal made under k with aad: ErrWrongKey (wrapped,
// naming both keys) when another key sealed it, ErrOpen when it does not
// open.
func (k *Key) Open(blob, aad []byte) ([]byte, error) {
	if len(blob) < 2 || blob[0] != version {
		return nil, fmt.Errorf("%w: unknown format", ErrOpen)
	}
	n := int(blob[1])
	if len(blob) < 2+n+wrapped+nonceSize+tagSize {
		return nil, fmt.Errorf("%w: too short", ErrOpen)
	}
	if id := string(blob[2 : 2+n]); id != k.id {
		return nil, fmt.Errorf("%w: sealed under key %s; this gateway's --secrets-key-file is key %s", ErrWrongKey, id, k.id)
	}
	rest := blob[2+n:]
	dk, err := openNonce(k.kek, rest[:wrapped], wrapAAD(aad))
	if err != nil {
		return nil, ErrOpen
	}
	defer clear(dk)
	data, err := newGCM(dk)
	if err != nil {
		return nil, err
	}
	plain, err := openNonce(data, rest[wrapped:], aad)
	if err != nil {
		return nil, ErrOpen
	}
	return plain, nil
}

// KeyID returns the id of the key blob was sealed under ("" for a blob
// that is not one).
func KeyID(blob []byte) string {
	if len(blob) < 2 || blob[0] != version || len(blob) < 2+int(blob[1]) {
		return ""
	}
	return string(blob[2 : 2+int(blob[1])])
}

func wrapAAD(aad []byte) []byte {
	return append([]byte("portcullis data key\x00"), aad...)
}

func newGCM(k []byte) (cipher.AEAD, error) {
	b, err := aes.NewCipher(k)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(b)
}

func sealNonce(a cipher.AEAD, dst, plain, aad []byte) []byte {
	nonce := make([]byte, nonceSize)
	if _, err := rand.Read(nonce); err != nil {
		panic(err) // crypto/rand never fails on a supported platform
	}
	dst = append(dst, nonce...)
	return a.Seal(dst, nonce, plain, aad)
}

func openNonce(a cipher.AEAD, b, aad []byte) ([]byte, error) {
	return a.Open(nil, b[:nonceSize], b[nonceSize:], aad)
}

// Encode is a key file's content: the key in standard base64 on one
// line.
func Encode(k []byte) []byte {
	return []byte(base64.StdEncoding.EncodeToString(k) + "\n")
}

// Generate writes a new random key to path (mode 0600; it must not
// exist) and returns it.
func Generate(path string) (*Key, error) {
	raw := make([]byte, KeySize)
	if _, err := rand.Read(raw); err != nil {
		return nil, err
	}
	defer clear(raw)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("secrets key: %w", err)
	}
	_, err = f.Write(Encode(raw))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(path)
		return nil, fmt.Errorf("secrets key %s: %w", path, err)
	}
	return New(raw)
}

// maxKeyFile bounds what Load reads: a key file is one line of 45 bytes.
const maxKeyFile = 4096

// Load reads a key file: a regular file (a symbolic link to one is
// followed, as an orchestrator mounts secrets) readable by its owner only,
// holding one line of standard base64 of KeySize bytes. The type and mode
// are those of the file opened (fstat), so a file swapped between a check
// and the read cannot slip through; a FIFO or device is refused without
// blocking on it.
func Load(path string) (*Key, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("secrets key: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("secrets key: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("secrets key %s: not a regular file (%v)", path, fi.Mode().Type())
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("secrets key %s: mode %v lets others read it: chmod 600 %s", path, fi.Mode().Perm(), path)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxKeyFile+1))
	defer clear(data)
	if err != nil {
		return nil, fmt.Errorf("secrets key: %w", err)
	}
	return parse(path, data)
}

func parse(path string, data []byte) (*Key, error) {
	line := bytes.TrimSuffix(bytes.TrimSuffix(data, []byte("\n")), []byte("\r"))
	bad := fmt.Errorf("secrets key %s: want one line of standard base64 of %d random bytes (make one with: head -c %d /dev/urandom | base64)", path, KeySize, KeySize)
	if bytes.ContainsAny(line, "\r\n \t") || len(line) == 0 {
		return nil, bad
	}
	raw, err := base64.StdEncoding.Strict().DecodeString(strings.TrimSpace(string(line)))
	if err != nil || len(raw) != KeySize {
		return nil, bad
	}
	defer clear(raw)
	return New(raw)
}
