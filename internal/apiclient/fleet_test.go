package apiclient_test

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/portcullis-dev/portcullis/internal/apiclient"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

// The fleet's proxies join a wait by what the store recorded: connected
// (to any replica) or seen within FleetGrace; acked at the version or a
// later one, nacked when their last refusal is of the version, else
// pending. One the watch counted, or long gone, is not added.
func TestWithFleet(t *testing.T) {
	now := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	seen := func(ago time.Duration) *timestamppb.Timestamp { return timestamppb.New(now.Add(-ago)) }
	live := &portcullisv1.Enforcement{Sandbox: "orders", Version: 5, Acked: 1, Total: 1,
		Proxies: []*portcullisv1.ProxyEnforcement{{ProxyId: "here", State: "acked", AppliedVersion: 5}}}
	statuses := []*portcullisv1.ProxyStatus{
		{Sandbox: "orders", ProxyId: "here", Connected: true, AppliedVersion: 4, LastSeenAt: seen(0)},
		{Sandbox: "orders", ProxyId: "other-replica", Connected: true, AppliedVersion: 6, LastSeenAt: seen(time.Second)},
		{Sandbox: "orders", ProxyId: "failing-over", AppliedVersion: 4, LastSeenAt: seen(20 * time.Second)},
		{Sandbox: "orders", ProxyId: "refused", Connected: true, AppliedVersion: 4, LastNackVersion: 5, LastNackError: "too new", LastSeenAt: seen(0)},
		{Sandbox: "orders", ProxyId: "gone", AppliedVersion: 3, LastSeenAt: seen(apiclient.FleetGrace + time.Second)},
	}
	e := apiclient.WithFleet(live, statuses, 5, now)
	if e.GetAcked() != 2 || e.GetNacked() != 1 || e.GetPending() != 1 || e.GetTotal() != 4 {
		t.Fatalf("counts acked %d nacked %d pending %d total %d, want 2 1 1 4: %v", e.GetAcked(), e.GetNacked(), e.GetPending(), e.GetTotal(), e)
	}
	want := map[string]string{"here": "acked", "other-replica": "acked", "failing-over": "pending", "refused": "nacked"}
	for _, p := range e.GetProxies() {
		if want[p.GetProxyId()] != p.GetState() {
			t.Errorf("%s is %q, want %q", p.GetProxyId(), p.GetState(), want[p.GetProxyId()])
		}
		delete(want, p.GetProxyId())
	}
	if len(want) > 0 {
		t.Errorf("missing %v", want)
	}
	if live.GetTotal() != 1 || len(live.GetProxies()) != 1 {
		t.Errorf("WithFleet changed the live enforcement: %v", live)
	}
	if e := apiclient.WithFleet(nil, nil, 5, now); e.GetTotal() != 0 || e.GetVersion() != 5 {
		t.Errorf("no proxies anywhere: %v", e)
	}
}
