package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/portcullis-dev/portcullis/internal/pgtest"
	"github.com/portcullis-dev/portcullis/store"
	"github.com/portcullis-dev/portcullis/store/postgres"
	"github.com/portcullis-dev/portcullis/store/storetest"
)

// openPair opens two stores on one new database, as two gateway replicas.
func openPair(t *testing.T) (*store.Store, *store.Store) {
	t.Helper()
	url := pgtest.Database(t)
	var out [2]*store.Store
	for i := range out {
		s, err := postgres.Open(t.Context(), url, postgres.Config{})
		if err != nil {
			t.Fatalf("postgres.Open: %v", err)
		}
		t.Cleanup(func() { _ = s.Close() })
		out[i] = store.New(s)
	}
	return out[0], out[1]
}

// TestApplyRaceAcrossReplicas: appliers on two replicas racing for one
// proposal; exactly one wins.
func TestApplyRaceAcrossReplicas(t *testing.T) {
	a, b := openPair(t)
	storetest.ApplyRace(t, a, b)
}

// TestApprovalCommitsNotify: applying a proposal, freezing and unfreezing
// commit versions every replica hears of, like any other commit.
func TestApprovalCommitsNotify(t *testing.T) {
	a, b := openPair(t)
	ctx := t.Context()
	heard := make(chan int64, 16)
	lctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- b.ListenPolicyCommits(lctx, func(sandbox string, version int64) {
			if sandbox == "n" {
				heard <- version
			}
		})
	}()
	defer func() {
		cancel()
		<-done
	}()
	wait := func(want int64) {
		t.Helper()
		deadline := time.After(10 * time.Second)
		for {
			select {
			case v := <-heard:
				if v == want {
					return
				}
			case <-deadline:
				t.Fatalf("no notification of version %d", want)
			}
		}
	}

	doc := []byte(`{"version":1}`)
	if _, err := a.CreateSandbox(ctx, store.CreateSandbox{
		Name: "n", Actor: "alice", Token: store.Token{Name: "sandbox-n", Hash: "h-n"},
		Policy: &store.PolicyVersion{Hash: "h1", Document: doc, Author: "alice"},
	}); err != nil {
		t.Fatal(err)
	}
	// Wait until the listener is up: commit versions until one is heard.
	for v := int64(2); ; v++ {
		if _, err := a.AppendPolicyVersion(ctx, store.AppendPolicy{
			Sandbox: "n", ExpectedVersion: v - 1, Hash: "h1", Document: doc, Author: "alice",
		}); err != nil {
			t.Fatal(err)
		}
		select {
		case <-heard: // version 1 or one of these: listening
		case <-time.After(100 * time.Millisecond):
			continue
		}
		break
	}
	sb, err := a.GetSandbox(ctx, "n")
	if err != nil {
		t.Fatal(err)
	}
	p, _, err := a.CreateProposal(ctx, store.NewProposal{Proposal: store.Proposal{
		Sandbox: "n", Document: []byte(`{"operations":[]}`), BaseVersion: sb.CurrentVersion,
		Resulting: []byte(`{"version":1,"x":1}`), ResultingHash: "h2",
	}}, "agent")
	if err != nil {
		t.Fatal(err)
	}
	_, pv, err := a.ApplyProposal(ctx, store.ApplyProposal{
		ID: p.ID, ResultingHash: "h2", Document: p.Resulting, Hash: "h2", Actor: "carol",
	})
	if err != nil {
		t.Fatal(err)
	}
	wait(pv.Version)
	_, pv, err = a.FreezeSandbox(ctx, "n", "incident", "oncall", []byte(`{"version":1}`), "deny")
	if err != nil {
		t.Fatal(err)
	}
	wait(pv.Version)
	_, pv, err = a.UnfreezeSandbox(ctx, "n", "resolved", "oncall")
	if err != nil {
		t.Fatal(err)
	}
	wait(pv.Version)
}
