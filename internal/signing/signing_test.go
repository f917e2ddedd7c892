package signing

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"testing"

	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

func chainOf(t *testing.T, n int) ([]*portcullisv1.GatewayKey, []ed25519.PrivateKey) {
	t.Helper()
	var chain []*portcullisv1.GatewayKey
	var privs []ed25519.PrivateKey
	var prev ed25519.PrivateKey
	for range n {
		pub, priv, end, err := NewKey(prev)
		if err != nil {
			t.Fatal(err)
		}
		chain = append(chain, &portcullisv1.GatewayKey{Id: KeyID(pub), PublicKey: pub, Endorsement: end})
		privs = append(privs, priv)
		prev = priv
	}
	return chain, privs
}

func signed(priv ed25519.PrivateKey) *portcullisv1.SignedPolicy {
	sp := &portcullisv1.SignedPolicy{Sandbox: "agent-1", Version: 3, Hash: "abc", Document: []byte(`{"version":1}`)}
	SignPolicy(sp, priv)
	return sp
}

func TestSignedPolicyVerifies(t *testing.T) {
	chain, privs := chainOf(t, 1)
	sp := signed(privs[0])
	if err := VerifyPolicy(sp, chain[0].PublicKey); err != nil {
		t.Fatal(err)
	}
}

// Changing any signed field, or signing with another key, is refused.
func TestAlteredPolicyIsRefused(t *testing.T) {
	chain, privs := chainOf(t, 1)
	other, _ := chainOf(t, 1)
	for name, alter := range map[string]func(*portcullisv1.SignedPolicy){
		"document": func(sp *portcullisv1.SignedPolicy) { sp.Document = []byte(`{"version":1} `) },
		"version":  func(sp *portcullisv1.SignedPolicy) { sp.Version++ },
		"sandbox":  func(sp *portcullisv1.SignedPolicy) { sp.Sandbox = "agent-2" },
		"hash":     func(sp *portcullisv1.SignedPolicy) { sp.Hash = "abd" },
		"signature": func(sp *portcullisv1.SignedPolicy) {
			sp.Signature = bytes.Clone(sp.Signature)
			sp.Signature[0] ^= 1
		},
		"key id": func(sp *portcullisv1.SignedPolicy) { sp.KeyId = other[0].Id },
	} {
		sp := signed(privs[0])
		alter(sp)
		if err := VerifyPolicy(sp, chain[0].PublicKey); !errors.Is(err, ErrUntrusted) {
			t.Errorf("%s altered: err = %v, want ErrUntrusted", name, err)
		}
	}
	if err := VerifyPolicy(signed(privs[0]), other[0].PublicKey); !errors.Is(err, ErrUntrusted) {
		t.Errorf("verified with another key: %v", err)
	}
}

// A version's parent is signed: forging it, or adding one to a version
// signed without, is refused; removing it but not its signature too.
func TestParentIsSigned(t *testing.T) {
	chain, privs := chainOf(t, 1)
	withParent := func() *portcullisv1.SignedPolicy {
		sp := &portcullisv1.SignedPolicy{Sandbox: "agent-1", Version: 3, Hash: "abc", Document: []byte(`{"version":1}`), Parent: Lineage(Lineage("", 1, "h1"), 2, "h2")}
		SignPolicy(sp, privs[0])
		return sp
	}
	if err := VerifyPolicy(withParent(), chain[0].PublicKey); err != nil {
		t.Fatalf("a version with its parent: %v", err)
	}
	for name, alter := range map[string]func(*portcullisv1.SignedPolicy){
		"forged":   func(sp *portcullisv1.SignedPolicy) { sp.Parent = Lineage(Lineage("", 1, "h1"), 2, "other") },
		"stripped": func(sp *portcullisv1.SignedPolicy) { sp.Parent = "" },
		"signature": func(sp *portcullisv1.SignedPolicy) {
			sp.ParentSignature = bytes.Clone(sp.ParentSignature)
			sp.ParentSignature[0] ^= 1
		},
		"signature removed": func(sp *portcullisv1.SignedPolicy) { sp.ParentSignature = nil },
	} {
		sp := withParent()
		alter(sp)
		if err := VerifyPolicy(sp, chain[0].PublicKey); !errors.Is(err, ErrUntrusted) {
			t.Errorf("parent %s: err = %v, want ErrUntrusted", name, err)
		}
	}
	legacy := signed(privs[0])
	legacy.Parent = Lineage("", 2, "h2")
	if err := VerifyPolicy(legacy, chain[0].PublicKey); !errors.Is(err, ErrUntrusted) {
		t.Errorf("a parent added to a version signed without one: err = %v, want ErrUntrusted", err)
	}
	// A proxy older than parents checks Signature alone: it still holds.
	sp := withParent()
	if !ed25519.Verify(chain[0].PublicKey, PolicyPayload(sp.Sandbox, sp.Version, sp.Hash, sp.Document), sp.Signature) {
		t.Error("a version with a parent is not signed as before for older proxies")
	}
}

// A lineage names the whole history: another hash or number anywhere
// before gives another lineage.
func TestLineageChainsHistory(t *testing.T) {
	a := Lineage(Lineage(Lineage("", 1, "h1"), 2, "h2"), 3, "h3")
	for name, b := range map[string]string{
		"version 1 differs": Lineage(Lineage(Lineage("", 1, "x1"), 2, "h2"), 3, "h3"),
		"version 2 differs": Lineage(Lineage(Lineage("", 1, "h1"), 2, "x2"), 3, "h3"),
		"numbers differ":    Lineage(Lineage(Lineage("", 1, "h1"), 3, "h2"), 4, "h3"),
	} {
		if a == b {
			t.Errorf("%s: same lineage", name)
		}
	}
	if a != Lineage(Lineage(Lineage("", 1, "h1"), 2, "h2"), 3, "h3") {
		t.Error("lineage is not deterministic")
	}
}

// The sandbox and hash fields cannot trade bytes: each is length-prefixed.
func TestPayloadFieldsAreDelimited(t *testing.T) {
	a := PolicyPayload("ab", 1, "c", nil)
	b := PolicyPayload("a", 1, "bc", nil)
	if bytes.Equal(a, b) {
		t.Fatal("payloads of different fields are equal")
	}
}

// A proxy that pinned the first key follows endorsed rotations to the
// newest key; a chain missing the pin, or with a forged link, is refused.
func TestFollowChain(t *testing.T) {
	chain, privs := chainOf(t, 3)
	got, err := Follow(chain[0].PublicKey, chain)
	if err != nil || !got.Equal(ed25519.PublicKey(chain[2].PublicKey)) {
		t.Fatalf("Follow from the first key = %x, %v; want the newest", got, err)
	}
	if err := VerifyPolicy(signed(privs[2]), got); err != nil {
		t.Fatal(err)
	}
	// Pinned to the newest: an older key's signature is refused.
	got, err = Follow(chain[2].PublicKey, chain)
	if err != nil {
		t.Fatal(err)
	}
	if err := VerifyPolicy(signed(privs[0]), got); !errors.Is(err, ErrUntrusted) {
		t.Fatalf("a retired key's signature: %v", err)
	}
	// A chain without the pinned key.
	if _, err := Follow(chain[0].PublicKey, chain[1:]); !errors.Is(err, ErrUntrusted) {
		t.Fatalf("chain without the pin: %v", err)
	}
	// A forged link: an attacker's key appended without endorsement by
	// the previous key (self-endorsed).
	pub, priv, _, _ := NewKey(nil)
	forged := append(chain[:3:3], &portcullisv1.GatewayKey{Id: KeyID(pub), PublicKey: pub, Endorsement: ed25519.Sign(priv, keyPayload(pub))})
	if _, err := Follow(chain[0].PublicKey, forged); !errors.Is(err, ErrUntrusted) {
		t.Fatalf("forged link: %v", err)
	}
}

func TestParsePublicKey(t *testing.T) {
	chain, _ := chainOf(t, 1)
	pub := ed25519.PublicKey(chain[0].PublicKey)
	got, err := ParsePublicKey(FormatPublicKey(pub))
	if err != nil || !got.Equal(pub) {
		t.Fatalf("round trip: %v", err)
	}
	for _, bad := range []string{"", "ed25519:", "zz", FormatPublicKey(pub)[:20]} {
		if _, err := ParsePublicKey(bad); err == nil {
			t.Errorf("ParsePublicKey(%q) accepted", bad)
		}
	}
}
