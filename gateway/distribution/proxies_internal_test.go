package distribution

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
	"github.com/portcullis-dev/portcullis/store"
	"github.com/portcullis-dev/portcullis/store/sqlite"
	"github.com/portcullis-dev/portcullis/store/storetest"
)

// A proxy's ACK reaches the store (what `proxies list` reads) at once,
// not at the writer's next tick: with the tick an hour away, the stored
// status shows the applied version as soon as the writer has run.
func TestProxyStatusAckWrittenPromptly(t *testing.T) {
	lite, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "p.db"), sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	st := store.New(lite)
	defer st.Close()
	if _, err := st.CreateSandbox(t.Context(), store.CreateSandbox{Name: "agent-1", Actor: "test", Token: storetest.NewToken("sandbox-agent-1", "", "")}); err != nil {
		t.Fatal(err)
	}
	tr := newProxyTracker(writer(st), "r1", time.Now)
	tr.interval = time.Hour
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { tr.run(ctx, func(err error) { t.Errorf("flush: %v", err) }); close(done) }()
	defer func() { cancel(); <-done }()

	e := tr.connect(proxyKey{"agent-1", "p1"}, &portcullisv1.ProxyHello{Sandbox: "agent-1", ProxyId: "p1"})
	sv := &signedVersion{policy: &portcullisv1.SignedPolicy{Sandbox: "agent-1", Version: 3, Hash: "abc"}}
	tr.ack(e, sv, 5*time.Millisecond, time.Now())

	deadline := time.Now().Add(10 * time.Second) // far beyond a write; far below the hour
	for {
		list, err := st.ListProxyStatuses(t.Context(), "agent-1")
		if err != nil {
			t.Fatal(err)
		}
		if len(list) == 1 && list[0].AppliedVersion == 3 && list[0].LastAckAt != nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("stored statuses %+v; want p1's ACK of version 3 written without waiting for the tick", list)
		}
		select {
		case <-time.After(5 * time.Millisecond):
		case <-t.Context().Done():
			t.Fatal(t.Context().Err())
		}
	}
}

// Enforcement.LastAck is when the last ACK of that very version arrived:
// a proxy still behind or one that ACKed a later version does not count.
func TestEnforcementLastAck(t *testing.T) {
	tr := newProxyTracker(nil, "r1", time.Now)
	version := func(v uint32) *signedVersion {
		return &signedVersion{policy: &portcullisv1.SignedPolicy{Sandbox: "agent-1", Version: v, Hash: "h"}}
	}
	connect := func(id string) *proxyEntry {
		return tr.connect(proxyKey{"agent-1", id}, &portcullisv1.ProxyHello{Sandbox: "agent-1", ProxyId: id})
	}
	p1, p2, p3 := connect("p1"), connect("p2"), connect("p3")
	at := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	tr.ack(p1, version(4), time.Millisecond, at)
	tr.ack(p2, version(4), time.Millisecond, at.Add(30*time.Millisecond))
	if e, _ := tr.enforcement("agent-1", 4); !e.LastAck().Equal(at.Add(30*time.Millisecond)) || e.Count(Pending) != 1 {
		t.Fatalf("with p3 pending: last ACK %v, %d pending; want p2's and 1 pending", e.LastAck(), e.Count(Pending))
	}
	tr.ack(p3, version(5), time.Millisecond, at.Add(time.Second)) // a later version: acked, but not this one's ACK
	e, _ := tr.enforcement("agent-1", 4)
	if !e.Settled() || e.Count(Acked) != 3 {
		t.Fatalf("enforcement %+v, want 3 acked", e)
	}
	if got, want := e.LastAck(), at.Add(30*time.Millisecond); !got.Equal(want) {
		t.Errorf("LastAck = %v, want p2's ACK at %v", got, want)
	}
}

// A credentials ACK is part of the proxy's status: pending for the
// writer (the batch SaveProxyStatuses stores) at once, with its error;
// a new stream of the proxy starts with none, until its own ACK.
func TestProxyStatusCredentials(t *testing.T) {
	tr := newProxyTracker(nil, "r1", time.Now)
	key := proxyKey{"agent-1", "p1"}
	e := tr.connect(key, &portcullisv1.ProxyHello{Sandbox: "agent-1", ProxyId: "p1"})
	changed := tr.changed
	tr.credentials(e, 3, "", time.Now())
	select {
	case <-changed:
	default:
		t.Error("a credentials ACK did not wake the writer and the watchers")
	}
	if s := tr.dirty[key]; s.CredentialsGeneration != 3 || s.CredentialsError != "" {
		t.Fatalf("pending status: generation %d error %q; want 3 and none", s.CredentialsGeneration, s.CredentialsError)
	}
	tr.credentials(e, 4, "credentials do not open", time.Now())
	if s := tr.dirty[key]; s.CredentialsGeneration != 4 || s.CredentialsError != "credentials do not open" {
		t.Fatalf("pending status: generation %d error %q; want 4 with the error", s.CredentialsGeneration, s.CredentialsError)
	}
	tr.connect(key, &portcullisv1.ProxyHello{Sandbox: "agent-1", ProxyId: "p1"})
	if s := tr.dirty[key]; s.CredentialsGeneration != 0 || s.CredentialsError != "" {
		t.Fatalf("a new stream's status: generation %d error %q; want none until its ACK", s.CredentialsGeneration, s.CredentialsError)
	}
}
