package sentry

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"strings"
	"testing"
)

func TestParsePublicKey(t *testing.T) {
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ecDER, err := x509.MarshalPKIXPublicKey(&ec.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	block := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
	for _, tt := range []struct {
		name string
		data []byte
		want string // the error's text, "" for pub
	}{
		{"base64", []byte(base64.StdEncoding.EncodeToString(pub) + "\n"), ""},
		{"base64 without padding", []byte(base64.RawStdEncoding.EncodeToString(pub)), ""},
		{"PEM", block, ""},
		{"text", []byte("not a key\n"), "base64 of its 32 bytes or a PEM PUBLIC KEY block"},
		{"short", []byte(base64.StdEncoding.EncodeToString(pub[:16])), "base64 of 16 bytes"},
		{"ecdsa", pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: ecDER}), "not an Ed25519 public key"},
		{"certificate", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), `PEM "CERTIFICATE" block`},
		{"two blocks", append(block, block...), "more than one PEM block"},
		{"broken PEM", []byte("-----BEGIN PUBLIC KEY-----\n!!\n"), "not a readable PEM block"},
	} {
		got, err := ParsePublicKey(tt.data)
		switch {
		case tt.want == "" && (err != nil || !got.Equal(pub)):
			t.Errorf("%s: %x, %v; want the key", tt.name, got, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%s: %x, %v; want an error mentioning %q", tt.name, got, err, tt.want)
		}
	}
}
