package gatewayclient

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// testFleet is a fleet over urls whose names resolve through addrs, on a
// clock that stands still unless the test moves it; nothing is dialed.
func testFleet(t *testing.T, addrs map[string][]string, urls ...string) (*fleet, *time.Time) {
	t.Helper()
	f, err := newFleet(&SubscribeConfig{Gateways: urls, MinBackoff: 100 * time.Millisecond, MaxBackoff: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_800_000_000, 0)
	f.now = func() time.Time { return now }
	f.lookup = func(_ context.Context, host string) ([]string, error) {
		if a, ok := addrs[host]; ok {
			return a, nil
		}
		return nil, errors.New("no such host")
	}
	return f, &now
}

func keys(eps []*endpoint) []string {
	var out []string
	for _, ep := range eps {
		out = append(out, ep.key())
	}
	return out
}

// URLs become endpoints, one per address of each name, in the order
// given; an address named twice is one endpoint; a name that does not
// resolve is left to grpc-go; an address gone at the next resolution
// loses its endpoint, one that stays keeps its state.
func TestFleetEndpoints(t *testing.T) {
	addrs := map[string][]string{"gw.test": {"10.0.0.1", "10.0.0.2"}}
	f, _ := testFleet(t, addrs, "https://gw.test:7443", "http://10.0.0.9:7070", "https://10.0.0.1:7443", "http://nowhere.test")
	f.resolve(t.Context())
	want := "https://10.0.0.1:7443 https://10.0.0.2:7443 http://10.0.0.9:7070 http://nowhere.test:80"
	if got := keys(f.eps); strings.Join(got, " ") != want {
		t.Fatalf("endpoints %v, want %s", got, want)
	}
	if s := f.eps[1].String(); s != "https://gw.test:7443 (10.0.0.2:7443)" {
		t.Errorf("an address of a name is shown as %q", s)
	}
	if f.eps[3].resolved {
		t.Errorf("a name that did not resolve is dialed as an address")
	}
	f.eps[1].backoff = 800 * time.Millisecond
	addrs["gw.test"] = []string{"10.0.0.2", "10.0.0.3"}
	f.resolve(t.Context())
	want = "https://10.0.0.2:7443 https://10.0.0.3:7443 http://10.0.0.9:7070 https://10.0.0.1:7443 http://nowhere.test:80"
	if got := keys(f.eps); strings.Join(got, " ") != want {
		t.Fatalf("endpoints after the name moved %v, want %s", got, want)
	}
	if f.eps[0].backoff != 800*time.Millisecond {
		t.Errorf("an endpoint that stayed lost its backoff")
	}
	for _, bad := range []string{"ftp://gw:1", "http://gw:1/api", "gw:1", "http://"} {
		if _, err := parseTargets([]string{bad}); err == nil {
			t.Errorf("parseTargets(%q) accepted it", bad)
		}
	}
}

// The policy stream's choice: after a goaway another replica at once;
// after a failure another after a short wait; a replica that keeps
// failing waits out a backoff of its own that doubles, while the others
// are tried; alone, a replica that sent the proxy away is asked again
// after a short wait.
func TestFleetNext(t *testing.T) {
	f, now := testFleet(t, nil, "http://10.0.0.1:1", "http://10.0.0.2:1", "http://10.0.0.3:1")
	a := f.first(t.Context())
	i := 0
	for f.eps[i] != a {
		i++
	}
	b, c := f.eps[(i+1)%3], f.eps[(i+2)%3]

	// After a goaway, another replica at once, drawn at random: the
	// proxies of a replica that went away spread over the others.
	f.ended(a, true, false)
	drawn := map[*endpoint]int{}
	for range 100 {
		next, wait := f.next(t.Context(), a, true)
		if next == a || wait != 0 {
			t.Fatalf("after a goaway: %v in %v, want another at once", next, wait)
		}
		drawn[next]++
	}
	if drawn[b] == 0 || drawn[c] == 0 {
		t.Fatalf("after a goaway the next replica was always the same: %v", drawn)
	}
	f.ended(b, false, false)
	next, wait := f.next(t.Context(), b, false)
	if next == b || wait <= 0 || wait > f.min {
		t.Fatalf("after a failure: %v in %v, want another within %v", next, wait, f.min)
	}
	// Every replica waiting out its backoff: the one ready first.
	f.ended(c, false, false)
	next, wait = f.next(t.Context(), c, false)
	for _, ep := range f.eps {
		if ep.notBefore.Before(next.notBefore) || wait != next.notBefore.Sub(*now) {
			t.Fatalf("%v is ready before the one chosen, %v in %v", ep, next, wait)
		}
	}
	// Every replica fails, over and over: each waits its own backoff,
	// which doubles up to the maximum.
	for range 6 {
		for _, ep := range []*endpoint{c, a, b} {
			f.ended(ep, false, false)
		}
	}
	for _, ep := range []*endpoint{a, b, c} {
		if ep.backoff != f.max {
			t.Fatalf("%v's backoff after repeated failures is %v, want %v", ep, ep.backoff, f.max)
		}
		if d := ep.notBefore.Sub(*now); d <= 0 || d > f.max {
			t.Fatalf("%v waits %v", ep, d)
		}
	}
	next, wait = f.next(t.Context(), b, false)
	if wait != next.notBefore.Sub(*now) || wait <= 0 {
		t.Fatalf("with every replica backing off, %v in %v", next, wait)
	}
	for _, ep := range f.eps {
		if ep.notBefore.Before(next.notBefore) {
			t.Fatalf("%v is ready before the one chosen, %v", ep, next)
		}
	}
	// A stream that lasted starts its replica's backoff over.
	f.ended(next, false, true)
	if next.backoff != 2*f.min {
		t.Fatalf("after a stream that lasted the backoff is %v, want %v", next.backoff, 2*f.min)
	}

	alone, _ := testFleet(t, nil, "http://10.0.0.1:1")
	ep := alone.first(t.Context())
	alone.ended(ep, true, false)
	if next, wait := alone.next(t.Context(), ep, true); next != ep || wait <= 0 || wait > alone.min {
		t.Fatalf("alone after a goaway: %v in %v", next, wait)
	}
}
