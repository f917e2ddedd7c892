package distribution

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/portcullis-dev/portcullis/policy"
	"github.com/portcullis-dev/portcullis/store"
	"github.com/portcullis-dev/portcullis/store/sqlite"
	"github.com/portcullis-dev/portcullis/store/storetest"
)

// heldReads holds the reads of one sandbox's versions until released,
// and counts them.
type heldReads struct {
	store.Driver
	sandbox string
	release chan struct{}
	mu      sync.Mutex
	reads   []int64
	reading chan struct{} // closed at the first held read
	once    sync.Once
}

func (d *heldReads) GetPolicyVersion(ctx context.Context, sandbox string, version int64) (store.PolicyVersion, error) {
	if sandbox == d.sandbox {
		d.mu.Lock()
		d.reads = append(d.reads, version)
		d.mu.Unlock()
		d.once.Do(func() { close(d.reading) })
		select {
		case <-d.release:
		case <-ctx.Done():
			return store.PolicyVersion{}, ctx.Err()
		}
	}
	return d.Driver.GetPolicyVersion(ctx, sandbox, version)
}

// TestCommittedLoadsApart: the commit feed's calls return at once; a
// sandbox whose version is slow to read holds up no other sandbox, and
// the commits that arrive meanwhile are read once, the newest.
func TestCommittedLoadsApart(t *testing.T) {
	lite, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "p.db"), sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	d := &heldReads{Driver: lite, sandbox: "slow", release: make(chan struct{}), reading: make(chan struct{})}
	st := store.New(d)
	defer st.Close()
	doc := func(rev int) (string, []byte) {
		p, _, err := policy.Parse(fmt.Appendf(nil, "version: 1\nnetwork_policies:\n  api:\n    endpoints:\n      - {host: api%d.example.com, port: 443}\n    binaries:\n      - {path: /usr/bin/curl}\n", rev))
		if err != nil {
			t.Fatal(err)
		}
		p = p.Canonical()
		return p.Hash(), p.CanonicalJSON()
	}
	for _, name := range []string{"slow", "fast"} {
		h, b := doc(1)
		if _, err := st.CreateSandbox(t.Context(), store.CreateSandbox{Name: name, Actor: "test", Token: storetest.NewToken("sandbox-"+name, "", ""),
			Policy: &store.PolicyVersion{Hash: h, Document: b, Author: "test"}}); err != nil {
			t.Fatal(err)
		}
	}
	for v := 2; v <= 5; v++ {
		h, b := doc(v)
		if _, err := storetest.AppendVersion(t.Context(), st, store.AppendPolicy{Sandbox: "slow", ExpectedVersion: int64(v - 1), Hash: h, Document: b, Author: "test"}); err != nil {
			t.Fatal(err)
		}
	}
	h := newHub(st, newSigner(st, writer(st)))
	for _, name := range []string{"slow", "fast"} {
		h.topics[name] = &topic{sandbox: name, subs: map[*policyStream]struct{}{}}
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer func() { cancel(); h.loaders.Wait() }()
	fail := func(sandbox string, version int64, err error) { t.Errorf("load %s v%d: %v", sandbox, version, err) }
	latest := func(name string) uint32 {
		if v := h.topics[name].latest.Load(); v != nil {
			return v.version()
		}
		return 0
	}
	waitVersion := func(name string, want uint32) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); latest(name) != want; { // a guard, not a measure
			if time.Now().After(deadline) {
				t.Fatalf("topic %s at version %d, want %d", name, latest(name), want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}

	h.committed(ctx, store.Commit{Sandbox: "slow", Version: 2}, fail)
	<-d.reading // slow's version 2 is being read, and held
	for v := int64(3); v <= 5; v++ {
		h.committed(ctx, store.Commit{Sandbox: "slow", Version: v}, fail) // returns at once
	}
	h.committed(ctx, store.Commit{Sandbox: "fast", Version: 1}, fail)
	waitVersion("fast", 1) // not behind slow's read
	if latest("slow") != 0 {
		t.Fatalf("slow's topic at version %d while its read is held", latest("slow"))
	}
	close(d.release)
	waitVersion("slow", 5)
	d.mu.Lock()
	reads := append([]int64(nil), d.reads...)
	d.mu.Unlock()
	if len(reads) != 2 || reads[0] != 2 || reads[1] != 5 {
		t.Fatalf("slow's versions read: %v; want 2, then only the newest (5)", reads)
	}
	// A commit through this replica comes with its row: signed and
	// offered as it is, not read again.
	hash6, doc6 := doc(6)
	v6, err := storetest.AppendVersion(t.Context(), st, store.AppendPolicy{Sandbox: "slow", ExpectedVersion: 5, Hash: hash6, Document: doc6, Author: "test"})
	if err != nil {
		t.Fatal(err)
	}
	h.committed(ctx, store.Commit{Sandbox: "slow", Version: 6, Inserted: &v6}, fail)
	waitVersion("slow", 6)
	d.mu.Lock()
	reads = append([]int64(nil), d.reads...)
	d.mu.Unlock()
	if len(reads) != 2 {
		t.Errorf("versions of slow read after a commit with its row: %v, want none more than 2 and 5", reads)
	}
	if got := h.topics["slow"].latest.Load().policy; got.GetHash() != hash6 || string(got.GetDocument()) != string(doc6) {
		t.Errorf("offered version 6 with hash %s, want the row's %s", got.GetHash(), hash6)
	}
	h.committed(ctx, store.Commit{Sandbox: "nobody", Version: 1}, fail) // no topic: nothing read, no loader
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		h.mu.Lock()
		left := len(h.wanted)
		h.mu.Unlock()
		if left == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d loaders still listed after every load ended", left)
		}
	}
}
