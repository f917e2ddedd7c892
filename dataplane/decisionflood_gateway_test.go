package dataplane_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/portcullis-dev/portcullis/dataplane/dataplanetest"
	"github.com/portcullis-dev/portcullis/dataplane/decision"
	"github.com/portcullis-dev/portcullis/dataplane/gatewayclient"
	"github.com/portcullis-dev/portcullis/gateway"
	"github.com/portcullis-dev/portcullis/gateway/decisions"
	"github.com/portcullis-dev/portcullis/gateway/gatewaytest"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
	"github.com/portcullis-dev/portcullis/store"
)

// TestDenialFloodThroughGateway: a real proxy following a real gateway
// whose ingest limit is small (40 records of each class at once, 10 a
// second). 900
// denials of 30 kinds, with an allowed call that reaches its upstream
// after every 30 of them: every allowed record is stored one by one, and
// the denials are stored one by one up to the budgets (the proxy's per
// kind, the gateway's per sandbox) and in summary records past them,
// whose counts add up to every denial made.
func TestDenialFloodThroughGateway(t *testing.T) {
	upLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	upSrv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })}
	go upSrv.Serve(upLn)
	t.Cleanup(func() { upSrv.Close() })
	port := upLn.Addr().(*net.TCPAddr).Port

	proxyClock, gwClock := &clock{now: time.Now()}, &clock{now: time.Now()}
	gw := gatewaytest.Start(t, "sqlite", func(c *gateway.Config) { c.Now, c.DecisionRate, c.DecisionBurst = gwClock.Now, 10, 40 })
	admin := dataplanetest.NewAdmin(gw.URL)
	doc := fmt.Sprintf(`
version: 1
network_policies:
  api:
    endpoints:
      - { host: api.example.com, port: %d, protocol: rest, enforcement: enforce, access: read-only }
    binaries: []
`, port)
	created, err := admin.Sandbox.CreateSandbox(t.Context(), &portcullisv1.CreateSandboxRequest{Name: "agent-1", Policy: doc})
	if err != nil {
		t.Fatal(err)
	}
	cfg := plainConfig(t, proxyClock)
	cfg.Sandbox = "agent-1"
	cfg.Resolve = func(context.Context, string) ([]netip.Addr, error) {
		return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
	}
	cfg.Gateway = &gatewayclient.SubscribeConfig{
		Gateway: gw.URL, Sandbox: "agent-1", Token: func() (string, error) { return created.GetToken(), nil },
		ProxyID: "p1", DataDir: t.TempDir(), MaxBackoff: 200 * time.Millisecond,
	}
	cfg.Shipper = gatewayclient.ShipperConfig{Interval: time.Hour}
	a := newAgent(t, cfg)
	c := proxied(dataplanetest.Serve(t, a))
	waitFor(t, "the proxy to apply version 1", func() bool { return a.PolicyVersion() == "1" })

	get := func(u string) int {
		t.Helper()
		res, err := c.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res.StatusCode
	}
	const kinds, each = 30, 30
	allowed := 0
	for i := range kinds * each {
		if code := get(fmt.Sprintf("http://h%d.example.com:%d/x/%d", i%kinds, port, i)); code != http.StatusForbidden {
			t.Fatalf("denial %d = %d", i, code)
		}
		if i%kinds == kinds-1 {
			if code := get("http://api.example.com:" + strconv.Itoa(port) + "/allowed/" + strconv.Itoa(i)); code != http.StatusOK {
				t.Fatalf("allowed GET = %d", code)
			}
			allowed++
		}
	}
	// The proxy's summaries come out once its window has ended.
	proxyClock.set(proxyClock.Now().Add(decision.SummaryWindow + time.Second))
	waitFor(t, "the proxy's summaries", func() bool {
		n := 0
		for _, r := range a.Decisions() {
			if r.Summary != nil {
				n++
			}
		}
		return n == kinds
	})
	if err := a.Shipper().Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	// The gateway's, with the sandbox's next batch after its window.
	gwClock.set(gwClock.Now().Add(decisions.SummaryWindow))
	if code := get("http://api.example.com:" + strconv.Itoa(port) + "/allowed/last"); code != http.StatusOK {
		t.Fatalf("allowed GET = %d", code)
	}
	allowed++
	if err := a.Shipper().Flush(t.Context()); err != nil {
		t.Fatal(err)
	}

	ds, err := gw.Store.ListDecisions(t.Context(), store.DecisionFilter{Sandbox: "agent-1"})
	if err != nil {
		t.Fatal(err)
	}
	var gotAllowed, individual, summaries int
	var summarised int64
	for _, d := range ds {
		switch {
		case d.Summary != nil:
			if d.Decision != "deny" {
				t.Errorf("a summary of %s records: %+v", d.Decision, d)
			}
			summaries++
			summarised += d.Summary.Count
		case d.Decision == "allow":
			gotAllowed++
		case d.Decision == "deny":
			individual++
		}
	}
	if gotAllowed != allowed {
		t.Errorf("%d allowed records stored; want every one, %d", gotAllowed, allowed)
	}
	if individual != 40 || int64(individual)+summarised != kinds*each {
		t.Errorf("%d denials stored one by one, %d summarised (in %d summaries); want the gateway's burst, 40, and %d in all",
			individual, summarised, summaries, kinds*each)
	}
}
