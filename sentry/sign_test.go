package sentry

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
)

// The vector was computed outside Go (Python's cryptography package and
// json.dumps with sorted keys, which equals RFC 8785 for this data), so
// that the test checks the documented format, not this code against
// itself. docs/sentry-events.md shows the same vector.
const (
	vectorSeed  = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"
	vectorPub   = "03a107bff3ce10be1d70dd18e74bc09967e4d6309ba50d5f1ddc8664125531b8"
	vectorSig   = "tmO119ID4cP3BEL2gpBbbZKU/BN5qcjHOzU8jlYLo3H7ddMBiUmjAwjwNF0ZppJLHj7z/7gAZx4QQxuXWc/DBA=="
	vectorEvent = `{
  "specversion": "1.0",
  "id": "q-1",
  "source": "sentry://node-3",
  "type": "portcullis.sentry.v1.quarantine",
  "subject": "sandbox-a",
  "time": "2026-12-01T21:00:00.500+02:00",
  "sequence": 42,
  "data": {
    "severity": "critical", "processing": "remediate",
    "process": {"pid": 4242, "executable": "/usr/bin/curl"},
    "finding": {"title": "exfiltration to an unlisted host", "confidence": 0.97}
  },
  "signature": "` + vectorSig + `"
}`
	vectorBytes = "portcullis-sentry-v1\nq-1\nsentry://node-3\nportcullis.sentry.v1.quarantine\nsandbox-a\n" +
		"2026-12-01T19:00:00.5Z\n42\n08fa2ea9a7e10eacd39aca7d1e08f0d9a63380812fe9fa6452863e85e7352031"
)

func vectorKey(t *testing.T) ed25519.PrivateKey {
	t.Helper()
	seed, _ := hex.DecodeString(vectorSeed)
	key := ed25519.NewKeyFromSeed(seed)
	if got := hex.EncodeToString(key.Public().(ed25519.PublicKey)); got != vectorPub {
		t.Fatalf("public key %s, want %s", got, vectorPub)
	}
	return key
}

func TestSignatureVector(t *testing.T) {
	key := vectorKey(t)
	ev, err := ParseCloudEvent([]byte(vectorEvent))
	if err != nil {
		t.Fatal(err)
	}
	msg, err := SigningBytes(ev)
	if err != nil {
		t.Fatal(err)
	}
	if string(msg) != vectorBytes {
		t.Fatalf("signing bytes\n%q\nwant\n%q", msg, vectorBytes)
	}
	sig, err := Sign(key, ev)
	if err != nil {
		t.Fatal(err)
	}
	if got := base64.StdEncoding.EncodeToString(sig); got != vectorSig {
		t.Fatalf("signature %s, want %s", got, vectorSig)
	}
	if err := Verify(key.Public().(ed25519.PublicKey), ev); err != nil {
		t.Fatalf("verify: %v", err)
	}
}

// TestVerifyRefuses: each part the signature covers, changed, breaks it.
func TestVerifyRefuses(t *testing.T) {
	pub := vectorKey(t).Public().(ed25519.PublicKey)
	for name, edit := range map[string]func(string) string{
		"id":       func(s string) string { return strings.Replace(s, `"q-1"`, `"q-2"`, 1) },
		"source":   func(s string) string { return strings.Replace(s, `"sentry://node-3"`, `"sentry://node-4"`, 1) },
		"type":     func(s string) string { return strings.Replace(s, `quarantine"`, `boundary_breach"`, 1) },
		"subject":  func(s string) string { return strings.Replace(s, `"sandbox-a"`, `"sandbox-b"`, 1) },
		"time":     func(s string) string { return strings.Replace(s, `00.500+02:00`, `00.501+02:00`, 1) },
		"sequence": func(s string) string { return strings.Replace(s, `"sequence": 42`, `"sequence": 43`, 1) },
		"data":     func(s string) string { return strings.Replace(s, `4242`, `4243`, 1) },
	} {
		ev, err := ParseCloudEvent([]byte(edit(vectorEvent)))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := Verify(pub, ev); !errors.Is(err, ErrBadSignature) {
			t.Errorf("%s changed: Verify = %v, want ErrBadSignature", name, err)
		}
	}
	// Whitespace, key order and equivalent spellings of data and time do
	// not change what is signed.
	same := strings.NewReplacer(`"severity": "critical", "processing": "remediate"`, `"processing":"remediate","severity":"critical"`,
		`0.97`, `9.7e-1`, `21:00:00.500+02:00`, `19:00:00.5Z`, `"sequence": 42`, `"sequence": "42"`).Replace(vectorEvent)
	ev, err := ParseCloudEvent([]byte(same))
	if err != nil {
		t.Fatal(err)
	}
	if err := Verify(pub, ev); err != nil {
		t.Errorf("an equivalent spelling: %v", err)
	}
	ev.Signature = nil
	if err := Verify(pub, ev); !errors.Is(err, ErrUnsigned) {
		t.Errorf("unsigned: %v", err)
	}
	if err := Verify(pub[:31], ev); err == nil {
		t.Error("a short public key verified")
	}
}

// TestCanonicalJSON checks RFC 8785's rules, with examples from the RFC.
func TestCanonicalJSON(t *testing.T) {
	for in, want := range map[string]string{
		`{"b": 1, "a": [true, null, "x"]}`:               `{"a":[true,null,"x"],"b":1}`,
		`[1E21, 1e-7, 0.000001, -0, 333333333.33333329]`: `[1e+21,1e-7,0.000001,0,333333333.3333333]`,
		`[4.50, 2e-3, 0.000001000, 1e+30, 100]`:          `[4.5,0.002,0.000001,1e+30,100]`,
		`"\u20ac\u000f\/\"\\\n"`:                         `"€\u000f/\"\\\n"`,
		`{"\ufb33": 1, "\ud83d\ude00": 2, "\u0080": 3}`:  `{"` + "\u0080" + `":3,"😀":2,"` + "\ufb33" + `":1}`,
		`{"peach": 1, "péché": 2, "pêche": 3, "sin": 4}`: `{"peach":1,"péché":2,"pêche":3,"sin":4}`,
	} {
		got, err := canonicalJSON([]byte(in))
		if err != nil {
			t.Fatalf("%s: %v", in, err)
		}
		if string(got) != want {
			t.Errorf("canonical %s\n got %s\nwant %s", in, got, want)
		}
	}
	if _, err := canonicalJSON([]byte(`[1e400]`)); err == nil {
		t.Error("1e400 has no canonical form; want an error")
	}
}
