package distribution

import (
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/portcullis-dev/portcullis/lifecycle"
	"github.com/portcullis-dev/portcullis/store"
	"github.com/portcullis-dev/portcullis/store/sqlite"
	"github.com/portcullis-dev/portcullis/store/storetest"
)

// A proxy that moved from a replica which heard of a commit first holds
// a version newer than this replica's topic: subscribing, it has the
// topic read again from the store, and is offered the current version
// rather than an older one it would refuse. A proxy holding nothing
// newer leaves the topic as it is (the commit feed and the check keep it).
func TestSubscribeCatchesUpWithTheProxy(t *testing.T) {
	lite, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "p.db"), sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	st := store.New(lite)
	defer st.Close()
	doc := []byte("version: 1\n")
	if _, err := st.CreateSandbox(t.Context(), store.CreateSandbox{Name: "agent-1", Actor: "test", Token: storetest.NewToken("sandbox-agent-1", "", ""),
		Policy: &store.PolicyVersion{Hash: "h1", Document: doc}}); err != nil {
		t.Fatal(err)
	}
	h := newHub(st, newSigner(st, writer(st)))
	ps1 := &policyStream{closed: true} // nothing to send on: woken, it sends nothing
	tp, err := h.subscribe(t.Context(), "agent-1", ps1, 0)
	if err != nil || tp.latest.Load().version() != 1 {
		t.Fatalf("first subscriber: %v, %v", tp, err)
	}
	// Version 2 is committed; this hub runs no commit listener, as a
	// replica that has not heard of it yet.
	if _, err := storetest.AppendVersion(t.Context(), st, store.AppendPolicy{Sandbox: "agent-1", ExpectedVersion: 1, Hash: "h2", Document: doc, Author: "test"}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.subscribe(t.Context(), "agent-1", &policyStream{closed: true}, 1); err != nil || tp.latest.Load().version() != 1 {
		t.Fatalf("a proxy holding version 1 made the topic read again: version %d, %v", tp.latest.Load().version(), err)
	}
	if _, err := h.subscribe(t.Context(), "agent-1", &policyStream{closed: true}, 2); err != nil || tp.latest.Load().version() != 2 {
		t.Fatalf("a proxy holding version 2 is offered version %d (%v); want 2", tp.latest.Load().version(), err)
	}
}

// writer is the lifecycle a test's distribution writes through.
func writer(st *store.Store) *lifecycle.Lifecycle {
	return lifecycle.New(lifecycle.Config{Logger: slog.New(slog.DiscardHandler)}, st)
}
