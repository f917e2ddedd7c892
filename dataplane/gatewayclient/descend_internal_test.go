package gatewayclient

import (
	"bytes"
	"crypto/ed25519"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/portcullis-dev/portcullis/internal/ca"
	"github.com/portcullis-dev/portcullis/internal/signing"
	"github.com/portcullis-dev/portcullis/policy"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

// hashEnforcer remembers the hash of the policy in force.
type hashEnforcer struct{ hash string }

func (e *hashEnforcer) SetPolicy(pol *policy.Policy, _ string) error {
	e.hash = pol.Hash()
	return nil
}

func (e *hashEnforcer) SetCA(*ca.CA) {}

// history signs versions of agent-1 as a gateway does: each names its
// parent's lineage, or none when legacy (signed before parents existed).
type history struct {
	t      *testing.T
	priv   ed25519.PrivateKey
	chain  []*portcullisv1.GatewayKey
	legacy bool
	hashes []string // of versions 1, 2, …
	sent   []*portcullisv1.SignedPolicy
}

func newHistory(t *testing.T, priv ed25519.PrivateKey, chain []*portcullisv1.GatewayKey) *history {
	return &history{t: t, priv: priv, chain: chain}
}

// fork is a copy of h up to now, to diverge from it.
func (h *history) fork() *history {
	c := *h
	c.hashes = append([]string(nil), h.hashes...)
	c.sent = append([]*portcullisv1.SignedPolicy(nil), h.sent...)
	return &c
}

// next signs the next version, allowing host; ancestry (the last n
// hashes before it) comes with it.
func (h *history) next(host string, ancestry int) *portcullisv1.SignedPolicy {
	h.t.Helper()
	doc := fmt.Sprintf(`{"version":1,"network_policies":{"api":{"name":"api","endpoints":[{"host":%q,"port":443}]}}}`, host)
	pol, _, err := policy.Parse([]byte(doc))
	if err != nil {
		h.t.Fatal(err)
	}
	canon := pol.CanonicalJSON()
	sp := &portcullisv1.SignedPolicy{Sandbox: "agent-1", Version: uint32(len(h.hashes) + 1), Hash: pol.Hash(), Document: canon, Keys: h.chain}
	if !h.legacy {
		lineage := ""
		for i, hash := range h.hashes {
			lineage = signing.Lineage(lineage, uint32(i+1), hash)
		}
		sp.Parent = lineage
	}
	sp.Ancestry = h.hashes[len(h.hashes)-min(ancestry, len(h.hashes)):]
	signing.SignPolicy(sp, h.priv)
	h.hashes = append(h.hashes, sp.Hash)
	h.sent = append(h.sent, sp)
	return cloneSP(sp)
}

func testSubscriber(t *testing.T, pinned ed25519.PublicKey) (*Subscriber, *hashEnforcer) {
	t.Helper()
	return testSubscriberIn(t, pinned, t.TempDir())
}

// testSubscriberIn is testSubscriber keeping its state in dir.
func testSubscriberIn(t *testing.T, pinned ed25519.PublicKey, dir string) (*Subscriber, *hashEnforcer) {
	t.Helper()
	e := &hashEnforcer{}
	s, err := NewSubscriber(SubscribeConfig{Gateway: "http://127.0.0.1:1", Sandbox: "agent-1", Token: func() (string, error) { return "t", nil },
		ProxyID: "p1", DataDir: dir, GatewayKey: pinned, Logger: slog.New(slog.DiscardHandler)}, e)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, e
}

// answer is receive's answer: "ack", or "nack" or "fork" and the error.
func answer(s *Subscriber, sp *portcullisv1.SignedPolicy) (string, string) {
	res := s.receive(sp)
	if res.GetAck() != nil {
		return "ack", ""
	}
	if res.GetNack().GetFork() {
		return "fork", res.GetNack().GetError()
	}
	return "nack", res.GetNack().GetError()
}

func keyChain(t *testing.T) (ed25519.PublicKey, ed25519.PrivateKey, []*portcullisv1.GatewayKey) {
	t.Helper()
	pub, priv, _, err := signing.NewKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	return pub, priv, []*portcullisv1.GatewayKey{{Id: signing.KeyID(pub), PublicKey: pub}}
}

// A proxy applies versions that descend from the one it holds — the next
// one, or a later one with the hashes of those between — and refuses, as
// a fork, another version with the number held, a version of another
// history, and one whose ancestry does not lead to its signed parent; a
// parent forged or added after signing is refused as untrusted, and a
// version sent with too few hashes between is refused without being
// called a fork. Refusals leave the version held in force.
func TestReceiveAppliesOnlyDescendants(t *testing.T) {
	pub, priv, chain := keyChain(t)
	s, e := testSubscriber(t, pub)
	main := newHistory(t, priv, chain)
	want := func(name string, sp *portcullisv1.SignedPolicy, kind, errHas string) {
		t.Helper()
		held, heldHash := s.AppliedVersion(), e.hash
		got, msg := answer(s, sp)
		if got != kind || !strings.Contains(msg, errHas) {
			t.Fatalf("%s: %s %q; want %s naming %q", name, got, msg, kind, errHas)
		}
		if kind != "ack" && (s.AppliedVersion() != held || e.hash != heldHash) {
			t.Fatalf("%s: refused, yet the proxy moved from %d (%s) to %d (%s)", name, held, heldHash, s.AppliedVersion(), e.hash)
		}
		if kind == "ack" && (s.AppliedVersion() != sp.GetVersion() || e.hash != sp.GetHash()) {
			t.Fatalf("%s: ACKed, yet the proxy holds %d (%s)", name, s.AppliedVersion(), e.hash)
		}
	}

	want("v1", main.next("a1.example.com", 0), "ack", "")
	forked := main.fork()
	want("v2", main.next("a2.example.com", 0), "ack", "")
	want("v2 again", cloneSP(main.sent[1]), "ack", "")

	want("the fork's v2", forked.next("b2.example.com", 0), "fork", "version 2 has hash")
	want("the fork's v3", forked.next("b3.example.com", 0), "fork", "does not descend from the version 2 held")
	forked.next("b4.example.com", 0)
	want("the fork's v5 with its ancestry", forked.next("b5.example.com", 2), "fork", "does not descend")

	// Skipping: v5 carries the hashes of 3 and 4 (and more than needed).
	main.next("a3.example.com", 0)
	main.next("a4.example.com", 0)
	v5 := main.next("a5.example.com", 3)
	short := cloneSP(v5)
	short.Ancestry = short.Ancestry[2:]
	want("v5 with too few hashes", short, "nack", "needs those of the 2 between")
	lying := cloneSP(v5)
	lying.Ancestry = []string{forked.hashes[2], forked.hashes[3]}
	want("v5 with another history's hashes", lying, "fork", "does not descend")
	forged := cloneSP(v5)
	forged.Parent = signing.Lineage(forged.Parent, 9, "x")
	want("v5 with a forged parent", forged, "nack", "parent signature of version")
	want("v5", v5, "ack", "")

	// A parent added to a version signed without one is refused.
	legacy := main.fork()
	legacy.legacy = true
	unsigned := legacy.next("a6.example.com", 0)
	unsigned.Parent = signing.Lineage("", 5, v5.GetHash())
	want("v6 with an unsigned parent", unsigned, "nack", "parent signature of version")

	if n, f := s.Forks(); n != 4 || f.Version != 5 || f.Held != 2 {
		t.Fatalf("forks: %d, the last %+v; want 4, the last of version 5 while holding 2", n, f)
	}
}

func cloneSP(sp *portcullisv1.SignedPolicy) *portcullisv1.SignedPolicy {
	return proto.Clone(sp).(*portcullisv1.SignedPolicy)
}

// Versions signed before parents existed (legacy) are taken on their
// number, as before, except another content with the number held, a
// fork whatever signed it. Once the current version comes again with its
// parent (an upgraded gateway re-signs it on the next stream), the proxy
// keeps that parent and checks every later version's descent.
func TestReceiveLegacyVersions(t *testing.T) {
	pub, priv, chain := keyChain(t)
	s, e := testSubscriber(t, pub)
	old := newHistory(t, priv, chain)
	old.legacy = true
	for v := 1; v <= 3; v++ {
		if got, msg := answer(s, old.next(fmt.Sprintf("a%d.example.com", v), 0)); got != "ack" {
			t.Fatalf("legacy version %d: %s %q", v, got, msg)
		}
	}
	other := old.fork()
	other.hashes = other.hashes[:2]
	if got, msg := answer(s, other.next("b3.example.com", 0)); got != "fork" || s.AppliedVersion() != 3 || e.hash != old.hashes[2] {
		t.Fatalf("another legacy version 3: %s %q, holds %d", got, msg, s.AppliedVersion())
	}

	upgraded := old.fork()
	upgraded.legacy = false
	upgraded.hashes = upgraded.hashes[:2]
	if got, msg := answer(s, upgraded.next("a3.example.com", 0)); got != "ack" || s.applied.GetParent() == "" {
		t.Fatalf("version 3 again, with its parent: %s %q; kept parent %q", got, msg, s.applied.GetParent())
	}
	forked := upgraded.fork()
	forked.hashes[1] = "another version 2"
	if got, msg := answer(s, forked.next("b4.example.com", 0)); got != "fork" {
		t.Fatalf("a version 4 of another history after the upgrade: %s %q", got, msg)
	}
	if got, msg := answer(s, upgraded.next("a4.example.com", 0)); got != "ack" || s.AppliedVersion() != 4 {
		t.Fatalf("version 4: %s %q", got, msg)
	}
}

// stripped is sp without its parent and the parent's signature, as a
// replica older than parents sends it, or one that removed them.
func stripped(sp *portcullisv1.SignedPolicy) *portcullisv1.SignedPolicy {
	c := cloneSP(sp)
	c.Parent, c.ParentSignature, c.Ancestry = "", nil, nil
	return c
}

// Once the proxy holds a version with its parent, a newer version without
// one cannot be checked to descend from it and is refused as a fork (a
// parent stripped from another history's version, or a replica older than
// parents: either way the proxy moves on to another replica); the version
// held, sent again without its parent, is ACKed without giving up the
// parent held or rewriting the kept state. Both hold after a restart: the
// kept version has its parent.
func TestReceiveParentlessAfterLineage(t *testing.T) {
	pub, priv, chain := keyChain(t)
	dir := t.TempDir()
	s, e := testSubscriberIn(t, pub, dir)
	main := newHistory(t, priv, chain)
	if got, msg := answer(s, main.next("a1.example.com", 0)); got != "ack" {
		t.Fatalf("v1: %s %q", got, msg)
	}
	forked := main.fork()
	v2 := main.next("a2.example.com", 0)
	if got, msg := answer(s, v2); got != "ack" {
		t.Fatalf("v2: %s %q", got, msg)
	}
	state := filepath.Join(dir, stateFile)
	kept, err := os.ReadFile(state)
	if err != nil {
		t.Fatal(err)
	}
	refused := func(s *Subscriber, e *hashEnforcer, name string, sp *portcullisv1.SignedPolicy, errHas string) {
		t.Helper()
		got, msg := answer(s, sp)
		if got != "fork" || !strings.Contains(msg, errHas) {
			t.Fatalf("%s: %s %q; want a fork naming %q", name, got, msg, errHas)
		}
		if s.AppliedVersion() != 2 || e.hash != v2.GetHash() || s.applied.GetParent() != v2.GetParent() {
			t.Fatalf("%s: refused, yet the proxy holds %d (%s, parent %q)", name, s.AppliedVersion(), e.hash, s.applied.GetParent())
		}
		if now, err := os.ReadFile(state); err != nil || !bytes.Equal(now, kept) {
			t.Fatalf("%s: refused, yet the kept state changed (%v)", name, err)
		}
	}

	// (a) A forked history's newer version, its parent stripped.
	forked.next("b2.example.com", 0)
	b3 := forked.next("b3.example.com", 1)
	refused(s, e, "the fork's v3 without its parent", stripped(b3), "without a parent")
	// A version of the proxy's own history without its parent (a replica
	// older than parents) cannot be told from it.
	a3 := main.next("a3.example.com", 0)
	refused(s, e, "v3 without its parent", stripped(a3), "without a parent")

	// (b) The version held, sent again without its parent: ACKed, the
	// held parent and the kept state unchanged.
	if got, msg := answer(s, stripped(v2)); got != "ack" || s.AppliedVersion() != 2 || s.applied.GetParent() != v2.GetParent() {
		t.Fatalf("v2 again without its parent: %s %q; holds %d with parent %q, want %q", got, msg, s.AppliedVersion(), s.applied.GetParent(), v2.GetParent())
	}
	if now, err := os.ReadFile(state); err != nil || !bytes.Equal(now, kept) {
		t.Fatalf("v2 again without its parent rewrote the kept state (%v)", err)
	}
	// … so the fork's v3 with its parent is still checked.
	refused(s, e, "the fork's v3 after v2 without its parent", b3, "does not descend")

	// A restart reloads the version kept, with its parent.
	s.Close()
	r, re := testSubscriberIn(t, pub, dir)
	if err := r.Restore(); err != nil {
		t.Fatal(err)
	}
	refused(r, re, "after a restart, the fork's v3", b3, "does not descend")
	if got, msg := answer(r, stripped(v2)); got != "ack" || r.applied.GetParent() != v2.GetParent() {
		t.Fatalf("after a restart, v2 again without its parent: %s %q; kept parent %q", got, msg, r.applied.GetParent())
	}
	refused(r, re, "after a restart, the fork's v3 without its parent", stripped(b3), "without a parent")
	if got, msg := answer(r, a3); got != "ack" || r.AppliedVersion() != 3 || re.hash != a3.GetHash() {
		t.Fatalf("after a restart, v3: %s %q; holds %d", got, msg, r.AppliedVersion())
	}
}
