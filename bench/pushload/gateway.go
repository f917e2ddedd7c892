package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/portcullis-dev/portcullis/bench/internal/benchdb"
	"github.com/portcullis-dev/portcullis/bench/internal/orderspolicy"
	"github.com/portcullis-dev/portcullis/gateway"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
	"github.com/portcullis-dev/portcullis/store"
	"github.com/portcullis-dev/portcullis/store/postgres"
	"github.com/portcullis-dev/portcullis/store/sqlite"
)

// benchSandbox is the one sandbox every simulated proxy belongs to.
const benchSandbox = "pushload"

// benchPolicy is a small realistic document: the article's orders MCP
// endpoint with its argument gate, and two REST endpoints. Each commit
// changes the port of the last one (PORT), so each is a new version.
const benchPolicy = orderspolicy.Head + `      - host: orders.internal.example.com
        port: 8081
        path: /mcp
        protocol: mcp
        enforcement: enforce
        mcp:
          versions: ["2025-11-25", "2026-07-28"]
        rules:
          - allow: { method: initialize }
          - allow: { method: notifications/initialized }
          - allow: { method: server/discover }
` + orderspolicy.ToolRules + orderspolicy.RESTTail

// policyVersion returns the bench policy's k-th variant.
func policyVersion(k int) string {
	return orderspolicy.Variant(benchPolicy, k)
}

// benchGateway is the gateway under test, in this process.
type benchGateway struct {
	addr    string // host:port
	engine  string
	admin   string // admin token
	conn    *grpc.ClientConn
	sandbox portcullisv1.SandboxServiceClient
	policy  portcullisv1.PolicyServiceClient
	http    *http.Client
	stop    func() error
}

// startGateway runs a gateway on 127.0.0.1:0 over SQLite in a temporary
// directory, or over Postgres at databaseURL.
func startGateway(ctx context.Context, databaseURL string, logw io.Writer) (*benchGateway, error) {
	var (
		d      store.Driver
		err    error
		engine = "sqlite"
		dir    string
	)
	dropDB := func() error { return nil }
	if databaseURL != "" {
		engine = "postgres"
		var dbURL string
		if dbURL, dropDB, err = benchdb.Fresh(ctx, databaseURL, "pushload"); err != nil {
			return nil, err
		}
		d, err = postgres.Open(ctx, dbURL, postgres.Config{})
	} else {
		if dir, err = os.MkdirTemp("", "pushload-"); err != nil {
			return nil, err
		}
		d, err = sqlite.Open(ctx, filepath.Join(dir, "portcullis.db"), sqlite.Config{})
	}
	if err != nil {
		if dir != "" {
			os.RemoveAll(dir)
		}
		return nil, errors.Join(fmt.Errorf("open %s store: %w", engine, err), dropDB())
	}
	st := store.New(d)
	var b [24]byte
	rand.Read(b[:])
	admin := "pcs_pushload-" + hex.EncodeToString(b[:])
	cleanup := func() error {
		if dir != "" {
			os.RemoveAll(dir)
		}
		return dropDB()
	}
	g, err := serveGateway(ctx, st, "127.0.0.1:0", admin, logw, cleanup)
	if err != nil {
		return nil, err
	}
	g.engine = engine
	return g, nil
}

// serveGateway serves a gateway over st on listen with the admin token
// admin (bootstrapped on an empty store); stopping it closes st, then
// runs cleanup. On an error st is closed and cleanup run.
func serveGateway(ctx context.Context, st *store.Store, listen, admin string, logw io.Writer, cleanup func() error) (*benchGateway, error) {
	gw, err := gateway.New(gateway.Config{
		Listen:         listen,
		BootstrapToken: admin,
		// Warnings and errors only: info logs one line per connecting
		// proxy, which is not what this measures.
		Logger:          slog.New(slog.NewTextHandler(logw, &slog.HandlerOptions{Level: slog.LevelWarn})),
		ShutdownTimeout: 2 * time.Second,
	}, st)
	if err == nil {
		_, _, err = gw.Bootstrap(ctx)
	}
	var ln net.Listener
	if err == nil {
		ln, err = gw.Listen()
	}
	if err != nil {
		return nil, errors.Join(err, st.Close(), cleanup())
	}
	serveCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan error, 1)
	go func() { done <- gw.Serve(serveCtx, ln) }()
	g := &benchGateway{addr: ln.Addr().String(), admin: admin, http: &http.Client{Timeout: 30 * time.Second}}
	g.conn, err = grpc.NewClient("passthrough:///"+g.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		cancel()
		<-done
		return nil, errors.Join(err, st.Close(), cleanup())
	}
	g.sandbox = portcullisv1.NewSandboxServiceClient(g.conn)
	g.policy = portcullisv1.NewPolicyServiceClient(g.conn)
	g.stop = func() error {
		g.conn.Close()
		cancel()
		err := <-done
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		return errors.Join(err, st.Close(), cleanup())
	}
	return g, nil
}

func (g *benchGateway) adminCtx(ctx context.Context) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+g.admin)
}

// createSandbox creates the bench sandbox with its first version and
// returns its token.
func (g *benchGateway) createSandbox(ctx context.Context) (string, error) {
	res, err := g.sandbox.CreateSandbox(g.adminCtx(ctx), &portcullisv1.CreateSandboxRequest{Name: benchSandbox, Policy: policyVersion(0)})
	if err != nil {
		return "", fmt.Errorf("create sandbox: %w", err)
	}
	return res.GetToken(), nil
}

// commit sets the k-th variant of the policy and returns its version.
func (g *benchGateway) commit(ctx context.Context, k int) (uint32, error) {
	res, err := g.policy.SetPolicy(g.adminCtx(ctx), &portcullisv1.SetPolicyRequest{Sandbox: benchSandbox, Document: policyVersion(k)})
	if err != nil {
		return 0, fmt.Errorf("set policy: %w", err)
	}
	if res.GetUnchanged() {
		return 0, fmt.Errorf("set policy: variant %d was unchanged", k)
	}
	return res.GetVersion(), nil
}

// gwMetrics is what this program reads from the gateway's /metrics.
type gwMetrics struct {
	connected float64
	ackCount  float64
	ackSum    float64 // seconds
	// ackBuckets: cumulative counts by upper bound (seconds), +Inf last.
	ackBuckets []bucket
}

type bucket struct {
	le    float64
	count float64
}

// scrape reads the push metrics from the gateway's /metrics (API port,
// admin token). A scrape gathers every collector (the process collector
// lists /proc/self/fd), so it is not polled during a push.
func (g *benchGateway) scrape(ctx context.Context) (gwMetrics, error) {
	u := "http://" + g.addr + "/metrics?name[]=portcullis_push_ack_seconds&name[]=portcullis_proxies_connected"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return gwMetrics{}, err
	}
	req.Header.Set("Authorization", "Bearer "+g.admin)
	res, err := g.http.Do(req)
	if err != nil {
		return gwMetrics{}, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return gwMetrics{}, fmt.Errorf("/metrics: %s", res.Status)
	}
	var m gwMetrics
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		name, val, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err != nil {
			continue
		}
		switch {
		case name == "portcullis_proxies_connected":
			m.connected = v
		case name == "portcullis_push_ack_seconds_count":
			m.ackCount = v
		case name == "portcullis_push_ack_seconds_sum":
			m.ackSum = v
		case strings.HasPrefix(name, `portcullis_push_ack_seconds_bucket{le="`):
			le := strings.TrimSuffix(strings.TrimPrefix(name, `portcullis_push_ack_seconds_bucket{le="`), `"}`)
			f := math.Inf(1)
			if le != "+Inf" {
				if f, err = strconv.ParseFloat(le, 64); err != nil {
					continue
				}
			}
			m.ackBuckets = append(m.ackBuckets, bucket{f, v})
		}
	}
	return m, sc.Err()
}

// waitConnected polls the gateway's connected-proxies gauge until it is n.
func (g *benchGateway) waitConnected(ctx context.Context, n int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		m, err := g.scrape(ctx)
		if err != nil {
			return err
		}
		if int(m.connected) == n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the gateway counts %v connected proxies, want %d, after %s", m.connected, n, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// ackDelta is the gateway's view of one push: how many ACKs it counted,
// their mean lag (commit time in the store to ACK handled), and the upper
// bounds of the histogram buckets holding the 50th and 99th percentile and
// the last ACK.
type ackDelta struct {
	Count   int     `json:"count"`
	MeanMs  float64 `json:"mean_ms"`
	P50LeMs float64 `json:"p50_le_ms"`
	P99LeMs float64 `json:"p99_le_ms"`
	MaxLeMs float64 `json:"max_le_ms"`
}

func deltaOf(before, after gwMetrics) ackDelta {
	n := after.ackCount - before.ackCount
	d := ackDelta{Count: int(n)}
	if n <= 0 {
		return d
	}
	d.MeanMs = (after.ackSum - before.ackSum) / n * 1000
	le := func(q float64) float64 {
		for i, b := range after.ackBuckets {
			prev := 0.0
			if i < len(before.ackBuckets) {
				prev = before.ackBuckets[i].count
			}
			if b.count-prev >= math.Ceil(q*n) {
				return b.le * 1000
			}
		}
		return math.Inf(1)
	}
	d.P50LeMs, d.P99LeMs, d.MaxLeMs = le(0.50), le(0.99), le(1)
	return d
}
