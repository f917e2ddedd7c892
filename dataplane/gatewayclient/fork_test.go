package gatewayclient_test

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/portcullis-dev/portcullis/dataplane/gatewayclient"
	"github.com/portcullis-dev/portcullis/gateway/gatewaytest"
	"github.com/portcullis-dev/portcullis/internal/ca"
	"github.com/portcullis-dev/portcullis/policy"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

// hashProxy remembers the hash of the policy in force: two forked
// histories' versions share their numbers, not their content.
type hashProxy struct {
	mu   sync.Mutex
	hash string
}

func (p *hashProxy) SetPolicy(pol *policy.Policy, _ string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hash = pol.Hash()
	return nil
}

func (p *hashProxy) SetCA(*ca.CA) {}

func (p *hashProxy) enforced() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.hash
}

// policyWith is subscribePolicy allowing host instead.
func policyWith(host string) string {
	return strings.Replace(subscribePolicy, "api.example.com", host, 1)
}

// setPolicy commits doc to agent-1 through api and returns the version.
func setPolicy(t *testing.T, api adminAPI, doc string) *portcullisv1.PolicyVersion {
	t.Helper()
	res, err := api.Policy.SetPolicy(t.Context(), &portcullisv1.SetPolicyRequest{Sandbox: "agent-1", Document: doc})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// newSub prepares a subscriber of agent-1 on gateways, with data dir dir,
// restoring the version kept there if any.
func newSub(t *testing.T, dir string, p gatewayclient.Enforcer, token func() (string, error), gateways ...string) *gatewayclient.Subscriber {
	t.Helper()
	sub, err := gatewayclient.NewSubscriber(gatewayclient.SubscribeConfig{
		Gateways: gateways, Sandbox: "agent-1", Token: token, ProxyID: "p1", DataDir: dir,
		MaxBackoff: 200 * time.Millisecond, Logger: slog.New(slog.DiscardHandler),
	}, p)
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.Restore(); err != nil && err != gatewayclient.ErrNoState {
		t.Fatal(err)
	}
	return sub
}

// Two replicas on two stores that forked after version 1 (b runs on a
// copy of a's store taken then, a restored backup) each commit their own
// version 2. A proxy that applied a's version 2 refuses b's — same
// number, other content — with a NACK saying it is a fork, shown in b's
// proxies list, and keeps enforcing a's; so it does b's version 3, which
// descends from b's 2 and not from a's, and b's version 5 when it missed
// b's 4 (the hashes of the versions between come with it).
func TestSubscriberRefusesAForkedReplica(t *testing.T) {
	a := gatewaytest.Start(t, "sqlite")
	apiA := newAdminAPI(a.URL)
	created, err := apiA.Sandbox.CreateSandbox(t.Context(), &portcullisv1.CreateSandboxRequest{Name: "agent-1", Policy: subscribePolicy})
	if err != nil {
		t.Fatal(err)
	}
	token := func() (string, error) { return created.GetToken(), nil }
	dir := t.TempDir()
	pa := &hashProxy{}
	onA := newSub(t, dir, pa, token, a.URL)
	stop := runSubscriber(t, onA, nil)
	waitApplied(t, onA, 1, 10*time.Second) // a has its signing key now
	b := a.Copy()                          // the fork: version 1 and the key are common
	apiB := newAdminAPI(b.URL)
	v2a := setPolicy(t, apiA, policyWith("a2.example.com"))
	v2b := setPolicy(t, apiB, policyWith("b2.example.com"))
	if v2a.GetVersion() != 2 || v2b.GetVersion() != 2 || v2a.GetHash() == v2b.GetHash() {
		t.Fatalf("versions %d %s and %d %s; want two different versions 2", v2a.GetVersion(), v2a.GetHash(), v2b.GetVersion(), v2b.GetHash())
	}
	waitApplied(t, onA, 2, 10*time.Second)
	stop()
	if pa.enforced() != v2a.GetHash() {
		t.Fatalf("enforces %s, want a's version 2 %s", pa.enforced(), v2a.GetHash())
	}

	// The same number, other content.
	p := &hashProxy{}
	sub := newSub(t, dir, p, token, b.URL)
	runSubscriber(t, sub, nil)
	s := apiB.status(t, "p1", func(s *portcullisv1.ProxyStatus) bool { return s.GetLastNackVersion() == 2 })
	if !strings.Contains(s.GetLastNackError(), "fork") || s.GetAppliedVersion() != 2 || s.GetAppliedHash() != v2a.GetHash() {
		t.Fatalf("status on the forked replica: %v; want a NACK of version 2 naming a fork, a's version 2 applied", s)
	}
	if sub.AppliedVersion() != 2 || p.enforced() != v2a.GetHash() {
		t.Fatalf("the proxy took the forked version 2: holds %d, enforces %s; want a's %s", sub.AppliedVersion(), p.enforced(), v2a.GetHash())
	}

	// The next version of the forked history.
	v3b := setPolicy(t, apiB, policyWith("b3.example.com"))
	s = apiB.status(t, "p1", func(s *portcullisv1.ProxyStatus) bool { return s.GetLastNackVersion() == v3b.GetVersion() })
	if !strings.Contains(s.GetLastNackError(), "does not descend") {
		t.Fatalf("status after b's version 3: %v; want a NACK naming a fork", s)
	}
	if sub.AppliedVersion() != 2 || p.enforced() != v2a.GetHash() {
		t.Fatalf("the proxy took b's version 3: holds %d, enforces %s", sub.AppliedVersion(), p.enforced())
	}

	// Versions of the fork the proxy missed: 5 comes with 4's hash.
	setPolicy(t, apiB, policyWith("b4.example.com"))
	v5b := setPolicy(t, apiB, policyWith("b5.example.com"))
	p5 := &hashProxy{}
	dir5 := t.TempDir()
	onA5 := newSub(t, dir5, p5, token, a.URL)
	stop = runSubscriber(t, onA5, nil)
	waitApplied(t, onA5, 2, 10*time.Second)
	stop()
	// Held on the forked replica as version 2 by a proxy that now
	// follows it from scratch would be b's: this proxy holds a's.
	sub5 := newSub(t, dir5, p5, token, b.URL)
	runSubscriber(t, sub5, nil)
	s = apiB.status(t, "p1", func(s *portcullisv1.ProxyStatus) bool { return s.GetLastNackVersion() == v5b.GetVersion() })
	if !strings.Contains(s.GetLastNackError(), "does not descend") || sub5.AppliedVersion() != 2 || p5.enforced() != v2a.GetHash() {
		t.Fatalf("status after b's version 5: %v; holds %d enforcing %s; want a NACK naming a fork and a's version 2 kept", s, sub5.AppliedVersion(), p5.enforced())
	}
}

// One history: a proxy follows 1, 2, 3 one by one; one that missed
// versions (it held 3 while 4 and 5 were committed, then while 70 more
// were, more than a version keeps the hashes of) applies the newest.
func TestSubscriberFollowsOneHistoryAcrossGaps(t *testing.T) {
	gw := gatewaytest.Start(t, "sqlite")
	api := newAdminAPI(gw.URL)
	created, err := api.Sandbox.CreateSandbox(t.Context(), &portcullisv1.CreateSandboxRequest{Name: "agent-1", Policy: subscribePolicy})
	if err != nil {
		t.Fatal(err)
	}
	token := func() (string, error) { return created.GetToken(), nil }
	dir := t.TempDir()
	p := &hashProxy{}
	sub := newSub(t, dir, p, token, gw.URL)
	stop := runSubscriber(t, sub, nil)
	waitApplied(t, sub, 1, 10*time.Second)
	for v := 2; v <= 3; v++ {
		setPolicy(t, api, policyWith(fmt.Sprintf("v%d.example.com", v)))
		waitApplied(t, sub, uint32(v), 10*time.Second)
	}
	stop()

	next := 4
	for _, missed := range []int{2, 70} {
		var last *portcullisv1.PolicyVersion
		for range missed {
			last = setPolicy(t, api, policyWith(fmt.Sprintf("v%d.example.com", next)))
			next++
		}
		sub := newSub(t, dir, p, token, gw.URL)
		stop := runSubscriber(t, sub, nil)
		waitApplied(t, sub, last.GetVersion(), 10*time.Second)
		stop()
		if p.enforced() != last.GetHash() {
			t.Fatalf("after missing %d versions: enforces %s, want %s", missed, p.enforced(), last.GetHash())
		}
		if n, f := sub.Forks(); n != 0 {
			t.Fatalf("after missing %d versions: %d forks, the last %+v", missed, n, f)
		}
	}
}

// A proxy given both replicas of a forked fleet leaves the one whose
// history is not its own, and follows the other: each of four proxies
// (each starts on either replica at random) applies the next version of
// the history it holds.
func TestSubscriberLeavesAForkedReplica(t *testing.T) {
	a := gatewaytest.Start(t, "sqlite")
	apiA := newAdminAPI(a.URL)
	created, err := apiA.Sandbox.CreateSandbox(t.Context(), &portcullisv1.CreateSandboxRequest{Name: "agent-1", Policy: subscribePolicy})
	if err != nil {
		t.Fatal(err)
	}
	token := func() (string, error) { return created.GetToken(), nil }
	dir := t.TempDir()
	onA := newSub(t, dir, &hashProxy{}, token, a.URL)
	stop := runSubscriber(t, onA, nil)
	waitApplied(t, onA, 1, 10*time.Second)
	b := a.Copy()
	setPolicy(t, apiA, policyWith("a2.example.com"))
	setPolicy(t, newAdminAPI(b.URL), policyWith("b2.example.com"))
	waitApplied(t, onA, 2, 10*time.Second)
	stop()
	kept, err := os.ReadFile(filepath.Join(dir, "policy.signed"))
	if err != nil {
		t.Fatal(err)
	}
	pinned, err := os.ReadFile(filepath.Join(dir, "gateway.key"))
	if err != nil {
		t.Fatal(err)
	}

	var subs []*gatewayclient.Subscriber
	var proxies []*hashProxy
	for i := range 4 {
		d := t.TempDir()
		if err := os.WriteFile(filepath.Join(d, "policy.signed"), kept, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "gateway.key"), pinned, 0o600); err != nil {
			t.Fatal(err)
		}
		p := &hashProxy{}
		sub, err := gatewayclient.NewSubscriber(gatewayclient.SubscribeConfig{
			Gateways: []string{a.URL, b.URL}, Sandbox: "agent-1", Token: token, ProxyID: fmt.Sprintf("p%d", i), DataDir: d,
			MaxBackoff: 200 * time.Millisecond, Logger: slog.New(slog.DiscardHandler),
		}, p)
		if err != nil {
			t.Fatal(err)
		}
		if err := sub.Restore(); err != nil {
			t.Fatal(err)
		}
		runSubscriber(t, sub, nil)
		subs, proxies = append(subs, sub), append(proxies, p)
	}
	v3a := setPolicy(t, apiA, policyWith("a3.example.com"))
	for i, sub := range subs {
		waitApplied(t, sub, 3, 10*time.Second)
		if proxies[i].enforced() != v3a.GetHash() {
			t.Fatalf("proxy %d enforces %s, want a's version 3 %s", i, proxies[i].enforced(), v3a.GetHash())
		}
	}
}
