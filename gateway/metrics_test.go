package gateway_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/portcullis-dev/portcullis/gateway"
	"github.com/portcullis-dev/portcullis/gateway/gatewaytest"
	"github.com/portcullis-dev/portcullis/internal/ocsf"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
	"github.com/portcullis-dev/portcullis/store"
	"github.com/portcullis-dev/portcullis/store/sqlite"
	"github.com/portcullis-dev/portcullis/store/storetest"
)

// scrape returns the gateway's /metrics as sample name (with labels) →
// value.
func scrape(t *testing.T, gw *gatewaytest.Gateway) map[string]float64 {
	t.Helper()
	code, body := get(t, gw.URL+"/metrics", gatewaytest.AdminToken)
	if code != 200 {
		t.Fatalf("/metrics: %d %s", code, body)
	}
	out := make(map[string]float64)
	for line := range strings.Lines(body) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("/metrics line %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	return out
}

// wantSamples checks the samples named in want (name with labels → value).
func wantSamples(t *testing.T, got map[string]float64, want map[string]float64) {
	t.Helper()
	for name, v := range want {
		if g, ok := got[name]; !ok || g != v {
			t.Errorf("/metrics %s = %v (present %v), want %v", name, g, ok, v)
		}
	}
}

// TestMetricsPush: the ACK lag by sandbox, the proxies behind their
// sandbox's newest version, and the decision records and OCSF events
// proxies say they dropped.
func TestMetricsPush(t *testing.T) {
	gw := gatewaytest.Start(t, "sqlite")
	c := newConnectAPI(t, gw.URL, gatewaytest.AdminToken)
	ctx := context.Background()
	created, err := c.sandbox.CreateSandbox(ctx, &portcullisv1.CreateSandboxRequest{Name: "orders", Policy: pushPolicy})
	if err != nil {
		t.Fatal(err)
	}
	st := policyStream(t, gw, created.Token)
	if err := st.Send(hello("orders", "p1")); err != nil {
		t.Fatal(err)
	}
	v1 := recvPolicy(t, st)
	// Sent, not applied: behind.
	wantSamples(t, scrape(t, gw), map[string]float64{"portcullis_proxies_connected": 1, "portcullis_proxies_behind": 1})
	if err := st.Send(ack(v1)); err != nil {
		t.Fatal(err)
	}
	waitProxy(t, c, gw, "orders", "p1", func(p *portcullisv1.ProxyStatus) bool { return p.AppliedVersion == 1 })
	wantSamples(t, scrape(t, gw), map[string]float64{
		"portcullis_proxies_behind":                                              0,
		`portcullis_sandbox_push_ack_seconds_count{sandbox="orders"}`:            1,
		`portcullis_sandbox_push_ack_seconds_bucket{sandbox="orders",le="+Inf"}`: 1,
		"portcullis_push_ack_seconds_count":                                      1,
		"portcullis_proxy_decisions_dropped_total":                               0,
		"portcullis_proxy_ocsf_dropped_total":                                    0,
	})

	// The proxy reports records it dropped.
	conn, err := grpc.NewClient(strings.TrimPrefix(gw.URL, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	sctx := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+created.Token)
	ship, err := portcullisv1.NewDistributionServiceClient(conn).ShipDecisions(sctx)
	if err != nil {
		t.Fatal(err)
	}
	allowed := floodDenial(3)
	allowed.Decision, allowed.DenialId = "allow", ""
	if err := ship.Send(&portcullisv1.ShipDecisionsRequest{ProxyId: "p1", Dropped: 5, OcsfDropped: 7, Records: []*portcullisv1.DecisionRecord{floodDenial(1), floodDenial(2), allowed}}); err != nil {
		t.Fatal(err)
	}
	if res, err := ship.CloseAndRecv(); err != nil || res.GetStored() != 3 {
		t.Fatalf("ship: %v, %v", res, err)
	}
	// A batch with an invalid record is refused whole and not counted.
	ship, err = portcullisv1.NewDistributionServiceClient(conn).ShipDecisions(sctx)
	if err != nil {
		t.Fatal(err)
	}
	bad := floodDenial(4)
	bad.Decision = "maybe"
	if err := ship.Send(&portcullisv1.ShipDecisionsRequest{ProxyId: "p1", Records: []*portcullisv1.DecisionRecord{floodDenial(5), bad}}); err != nil {
		t.Fatal(err)
	}
	if _, err := ship.CloseAndRecv(); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("shipping an invalid record: %v, want InvalidArgument", err)
	}
	got := scrape(t, gw)
	wantSamples(t, got, map[string]float64{
		"portcullis_proxy_decisions_dropped_total":              5,
		"portcullis_proxy_ocsf_dropped_total":                   7,
		`portcullis_decisions_received_total{decision="deny"}`:  2,
		`portcullis_decisions_received_total{decision="allow"}`: 1,
		"portcullis_decisions_stored_total":                     3,
	})
	if _, ok := got[`portcullis_decisions_received_total{decision="maybe"}`]; ok {
		t.Error("the refused batch's decision was counted")
	}

	// A deleted sandbox's series go.
	st.CloseSend()
	if _, err := c.sandbox.DeleteSandbox(ctx, &portcullisv1.DeleteSandboxRequest{Name: "orders"}); err != nil {
		t.Fatal(err)
	}
	for name := range scrape(t, gw) {
		if strings.Contains(name, `sandbox="orders"`) {
			t.Errorf("/metrics still has %s after the sandbox was deleted", name)
		}
	}
}

// TestMetricsPendingProposals: the pending proposals by age, from one
// store count that /metrics reuses for PendingMetricsTTL.
func TestMetricsPendingProposals(t *testing.T) {
	for _, engine := range gatewaytest.Engines {
		t.Run(engine, func(t *testing.T) {
			gw := gatewaytest.Start(t, engine, func(c *gateway.Config) { c.PendingMetricsTTL = time.Hour })
			c := newConnectAPI(t, gw.URL, gatewaytest.AdminToken)
			if _, err := c.sandbox.CreateSandbox(t.Context(), &portcullisv1.CreateSandboxRequest{Name: "orders", Policy: pushPolicy}); err != nil {
				t.Fatal(err)
			}
			insert := func(n int, age time.Duration, status string) {
				t.Helper()
				err := gw.Store.InTx(t.Context(), func(tx store.Tx) error {
					p := storetest.ProposalN("orders", n)
					p.Status, p.CreatedAt, p.UpdatedAt = status, tx.Now().Add(-age), tx.Now()
					_, err := tx.InsertProposal(t.Context(), p)
					return err
				})
				if err != nil {
					t.Fatal(err)
				}
			}
			insert(1, time.Minute, store.ProposalPending)
			insert(2, 2*time.Hour, store.ProposalPending)
			insert(3, 3*24*time.Hour, store.ProposalPending)
			insert(4, 30*24*time.Hour, store.ProposalRejected) // decided: not counted
			got := scrape(t, gw)
			wantSamples(t, got, map[string]float64{
				`portcullis_proposals_pending{older_than="0s"}`: 3,
				`portcullis_proposals_pending{older_than="1h"}`: 2,
				`portcullis_proposals_pending{older_than="1d"}`: 1,
				`portcullis_proposals_pending{older_than="7d"}`: 0,
			})
			if oldest := got["portcullis_proposals_pending_oldest_seconds"]; oldest < (3*24*time.Hour).Seconds() || oldest > (4*24*time.Hour).Seconds() {
				t.Errorf("oldest pending %v s, want about three days", oldest)
			}
			// Within the TTL the count is not read again.
			insert(5, 0, store.ProposalPending)
			wantSamples(t, scrape(t, gw), map[string]float64{`portcullis_proposals_pending{older_than="0s"}`: 3})
		})
	}
}

// TestMetricsOCSFDropped: the OCSF sinks' drops, counted by the emitter
// cmd gives the gateway, are on /metrics.
func TestMetricsOCSFDropped(t *testing.T) {
	sink, err := ocsf.OpenFile(t.TempDir()+"/ocsf.jsonl", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	// Not running and a queue of 1: the first event waits, the next
	// three are dropped.
	em := ocsf.NewEmitter(sink, ocsf.Config{Queue: 1})
	for range 4 {
		em.Emit(func() ocsf.Event { return ocsf.Event{} })
	}
	gw := gatewaytest.Start(t, "sqlite", func(c *gateway.Config) { c.OCSFDropped = em.Dropped })
	wantSamples(t, scrape(t, gw), map[string]float64{"portcullis_ocsf_dropped_total": 3})

	// Without sinks there is no such metric.
	plain := gatewaytest.Start(t, "sqlite")
	if _, ok := scrape(t, plain)["portcullis_ocsf_dropped_total"]; ok {
		t.Error("portcullis_ocsf_dropped_total without an OCSF sink")
	}
}

type grafanaDashboard struct {
	Title      string `json:"title"`
	UID        string `json:"uid"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query string `json:"query"`
		} `json:"list"`
	} `json:"templating"`
	Panels []grafanaPanel `json:"panels"`
}

type grafanaPanel struct {
	Title      string `json:"title"`
	Type       string `json:"type"`
	Datasource struct {
		Type string `json:"type"`
		UID  string `json:"uid"`
	} `json:"datasource"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
}

// TestGrafanaDashboard: examples/grafana/portcullis.json is a Grafana
// dashboard over a Prometheus datasource variable, with the panels
// operators alert on, whose every query names metrics the gateway
// registers.
func TestGrafanaDashboard(t *testing.T) {
	raw, err := os.ReadFile("../examples/grafana/portcullis.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash grafanaDashboard
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatal(err)
	}
	if dash.Title == "" || dash.UID == "" {
		t.Errorf("dashboard title %q uid %q", dash.Title, dash.UID)
	}
	hasVar := false
	for _, v := range dash.Templating.List {
		hasVar = hasVar || v.Name == "datasource" && v.Type == "datasource" && v.Query == "prometheus"
	}
	if !hasVar {
		t.Fatal("no Prometheus datasource variable named datasource")
	}

	// Every metric a gateway registers, with every optional one on.
	d, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "p.db"), sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	st := store.New(d)
	defer st.Close()
	srv, err := gateway.New(gateway.Config{OCSFDropped: func() uint64 { return 0 }}, st)
	if err != nil {
		t.Fatal(err)
	}
	registered := map[string]bool{}
	for _, n := range srv.MetricNames() {
		registered[n] = true
	}
	known := func(series string) bool {
		for _, suffix := range []string{"", "_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(series, suffix); ok && registered[base] {
				return true
			}
		}
		return false
	}

	metric := regexp.MustCompile(`portcullis_[a-z0-9_]+`)
	queries := 0
	for _, p := range dash.Panels {
		if p.Type == "row" {
			continue
		}
		if p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q: datasource %q, want the ${datasource} variable", p.Title, p.Datasource.UID)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			queries++
			names := metric.FindAllString(q.Expr, -1)
			if len(names) == 0 {
				t.Errorf("panel %q: query %q names no portcullis metric", p.Title, q.Expr)
			}
			for _, n := range names {
				if !known(n) {
					t.Errorf("panel %q: query %q uses %s, which the gateway does not register", p.Title, q.Expr, n)
				}
			}
		}
	}
	for _, w := range []string{"Decisions by verdict", "Push lag", "Pending proposals by age", "Proxies", "Sentry ingest", "Quarantines", "OCSF"} {
		if !slices.ContainsFunc(dash.Panels, func(p grafanaPanel) bool { return strings.Contains(p.Title, w) }) {
			t.Errorf("no panel titled with %q", w)
		}
	}
	if queries == 0 {
		t.Fatal("the dashboard has no queries")
	}
}
