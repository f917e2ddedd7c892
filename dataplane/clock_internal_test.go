package dataplane

import (
	"context"
	"log/slog"
	"net/netip"
	"testing"
	"time"

	"github.com/portcullis-dev/portcullis/policy"
)

// A grant ends no later than the gateway says: with the gateway's clock
// ahead of the proxy's (the proxy's is behind), requests are judged at
// the gateway's time; with the gateway behind, at the proxy's own.
func TestGrantEndsByTheLaterClock(t *testing.T) {
	local := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	doc := `
version: 1
network_policies:
  api:
    endpoints:
      - host: api.example.com
        port: 443
        protocol: rest
        enforcement: enforce
        rules:
          - allow: { method: GET, path: "/v1/**", expires_at: "2026-11-30T12:01:00Z" }
    binaries: []
`
	pol, _, err := policy.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		ahead func() time.Duration // nil: standalone
		allow bool
	}{
		{"standalone", nil, true},
		{"gateway clock unknown or behind", func() time.Duration { return 0 }, true},
		{"gateway 59s ahead", func() time.Duration { return 59 * time.Second }, true},
		{"gateway 60s ahead", func() time.Duration { return time.Minute }, false},
		{"gateway 5m ahead", func() time.Duration { return 5 * time.Minute }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newProxy(Config{Now: func() time.Time { return local }, Logger: slog.New(slog.DiscardHandler)})
			p.gatewayAhead = tc.ahead
			if err := p.SetPolicy(pol, "1"); err != nil {
				t.Fatal(err)
			}
			cur := p.current.Load()
			req := p.baseRequest(context.Background(), cur, dest{host: "api.example.com", port: 443})
			req.Addr, req.HTTPMethod, req.Path = netip.MustParseAddr("93.184.216.34"), "GET", "/v1/x"
			if d := cur.matcher.Decide(&req); d.Allow != tc.allow {
				t.Fatalf("judged at %s: allow %v (%s), want %v", req.Time.Format(time.TimeOnly), d.Allow, d.Reason, tc.allow)
			}
		})
	}
}
