package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/portcullis-dev/portcullis/bench/internal/benchenv"
	"github.com/portcullis-dev/portcullis/bench/internal/orderspolicy"
	"github.com/portcullis-dev/portcullis/bench/internal/simproxy"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

// sandboxPolicy is each sandbox's small policy: the article's orders MCP
// endpoint with its argument gate.
const sandboxPolicy = orderspolicy.Head + `      - host: orders.internal.example.com
        port: 8081
        path: /mcp
        protocol: mcp
        enforcement: enforce
        mcp:
          versions: ["2025-11-25"]
        rules:
          - allow: { method: initialize }
          - allow: { method: notifications/initialized }
` + orderspolicy.ToolRules + `    binaries: []
`

// The orders MCP endpoint of sandboxPolicy, which the decision records
// the simulated proxies ship name.
const (
	ordersHost = "orders.internal.example.com"
	ordersPort = 8081
	ordersPath = "/mcp"
)

// shipEvery is how often each simulated proxy ships a decision record of
// the tool call the watchdogs report (a real proxy ships every 500 ms
// what it decided; one record every 10 s keeps every bulk event within
// the gateway's ±30 s correlation window of one).
const shipEvery = 10 * time.Second

func sandboxName(i int) string { return fmt.Sprintf("sb-%03d", i) }

// fleet is the simulated proxies: one per sandbox, each on its own
// connection with its sandbox's token, ACKing every version it reads.
type fleet struct {
	names  []string
	hashes []string // per sandbox, the policy hash its proxy ACKed for version 1
	// inForce is, per sandbox, the hash its proxy ACKed last: a freeze
	// changes it, and the watchdog reports the policy in force.
	inForce []*atomic.Pointer[string]
	conns   []*grpc.ClientConn
	streams []*simproxy.Stream
	acks    []chan ack // per sandbox, every version ACKed
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	hbStop  chan struct{}
	hbDone  chan struct{} // nil until the heartbeats run

	shipStop chan struct{}
	shipDone chan struct{} // nil unless the proxies ship decision records
	shipMu   sync.Mutex
	shipErr  error // the first failed or short ShipDecisions
}

// ack is one version a simulated proxy ACKed, and when.
type ack struct {
	version        uint32
	hash           string
	arrived, acked time.Time
	err            error
}

// connectFleet creates n sandboxes with the small policy and connects
// one simulated proxy to each; it returns once each has ACKed version 1,
// with the hash each ACKed. With ship, each proxy then ships a decision
// record of the watchdogs' tool call every shipEvery, over its own
// connection, until close.
func (g *gatewayProc) connectFleet(ctx context.Context, n int, ship bool) (*fleet, error) {
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	f := &fleet{cancel: cancel, hbStop: make(chan struct{}), shipStop: make(chan struct{})}
	for i := range n {
		name := sandboxName(i)
		res, err := g.sandbox.CreateSandbox(g.adminCtx(ctx), &portcullisv1.CreateSandboxRequest{Name: name, Policy: sandboxPolicy})
		if err != nil {
			f.close()
			return nil, fmt.Errorf("create sandbox %s: %w", name, err)
		}
		conn, err := simproxy.Dial(g.addr, res.GetToken())
		if err != nil {
			f.close()
			return nil, err
		}
		st, err := simproxy.Open(sctx, conn, name, "p0", "sentryload")
		if err != nil {
			conn.Close()
			f.close()
			return nil, fmt.Errorf("open the policy stream of %s: %w", name, err)
		}
		acks := make(chan ack, 64)
		inForce := new(atomic.Pointer[string])
		f.names, f.conns, f.streams, f.acks = append(f.names, name), append(f.conns, conn), append(f.streams, st), append(f.acks, acks)
		f.inForce = append(f.inForce, inForce)
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			for {
				res, arrived, acked, err := st.Next()
				if h := res.GetPolicy().GetHash(); h != "" {
					inForce.Store(&h) // what a watchdog on the node sees in force from now on
				}
				select {
				case acks <- ack{version: res.GetPolicy().GetVersion(), hash: res.GetPolicy().GetHash(), arrived: arrived, acked: acked, err: err}:
				default: // nobody is reading: the benchmark failed already
				}
				if err != nil {
					return
				}
			}
		}()
	}
	f.hbDone = make(chan struct{})
	go simproxy.Heartbeats(f.streams, f.hbStop, f.hbDone)
	f.hashes = make([]string, n)
	for i := range n {
		a, err := f.await(ctx, i, 1, 30*time.Second)
		if err != nil {
			f.close()
			return nil, err
		}
		if a.version != 1 || a.hash == "" {
			f.close()
			return nil, fmt.Errorf("the proxy of %s ACKed version %d (hash %q) first, want version 1 and its hash", f.names[i], a.version, a.hash)
		}
		f.hashes[i] = a.hash
	}
	if ship {
		if err := f.shipAll(sctx); err != nil { // the first right away, before any event
			f.close()
			return nil, err
		}
		f.shipDone = make(chan struct{})
		go f.shipLoop(sctx)
	}
	return f, nil
}

// toolCall is the decision record of the call the bulk events report
// (appendBulkEvent: tools/call of lookup_order on the orders server),
// as the proxy of sandbox decided it now under version 1.
func toolCall(sandbox string) *portcullisv1.DecisionRecord {
	return &portcullisv1.DecisionRecord{
		Time: timestamppb.Now(), Sandbox: sandbox, ProxyId: "p0", Decision: "allow",
		Host: ordersHost, Port: ordersPort, Path: ordersPath, HttpMethod: "POST",
		McpMethod: "tools/call", Tool: "lookup_order", PolicyVersion: "1",
	}
}

// shipAll has each proxy ship one decision record (one ShipDecisions
// message on its own connection) and checks the gateway stored it.
func (f *fleet) shipAll(ctx context.Context) error {
	for i, name := range f.names {
		select {
		case <-f.shipStop:
			return nil // closing
		default:
		}
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		stored, err := simproxy.ShipDecisions(sctx, f.conns[i], "p0", toolCall(name))
		cancel()
		if err != nil {
			return fmt.Errorf("the proxy of %s shipping its decision record: %w", name, err)
		}
		if stored != 1 {
			return fmt.Errorf("the proxy of %s shipped 1 decision record and the gateway stored %d", name, stored)
		}
	}
	return nil
}

// shipLoop ships every shipEvery until shipStop closes, and keeps the
// first failure (shipped reports it).
func (f *fleet) shipLoop(ctx context.Context) {
	defer close(f.shipDone)
	t := time.NewTicker(shipEvery)
	defer t.Stop()
	for {
		select {
		case <-f.shipStop:
			return
		case <-t.C:
		}
		if err := f.shipAll(ctx); err != nil {
			select {
			case <-f.shipStop:
				return // closing: the failure is the close's
			default:
			}
			f.shipMu.Lock()
			if f.shipErr == nil {
				f.shipErr = err
			}
			f.shipMu.Unlock()
			return
		}
	}
}

// shipped is the first failure of the proxies' decision records, if any.
func (f *fleet) shipped() error {
	f.shipMu.Lock()
	defer f.shipMu.Unlock()
	if f.shipErr != nil {
		return fmt.Errorf("decision records: %w", f.shipErr)
	}
	return nil
}

// await waits until sandbox i's proxy ACKed version (or a later one).
func (f *fleet) await(ctx context.Context, i int, version uint32, timeout time.Duration) (ack, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		select {
		case a := <-f.acks[i]:
			if a.err != nil {
				return a, fmt.Errorf("proxy of %s: %w", f.names[i], a.err)
			}
			if a.version >= version {
				return a, nil
			}
		case <-t.C:
			return ack{}, fmt.Errorf("the proxy of %s did not get version %d within %s", f.names[i], version, timeout)
		case <-ctx.Done():
			return ack{}, ctx.Err()
		}
	}
}

func (f *fleet) close() {
	close(f.shipStop)
	if f.shipDone != nil {
		<-f.shipDone
	}
	close(f.hbStop)
	if f.hbDone != nil {
		<-f.hbDone
	}
	f.cancel()
	for _, c := range f.conns {
		c.Close()
	}
	f.wg.Wait()
}

// quarantineSample is one quarantine's times, ms.
type quarantineSample struct {
	Sandbox    string    `json:"sandbox"`
	SentAt     time.Time `json:"sent_at"` // to line a slow one up with what else happened then
	Version    uint32    `json:"version"`
	PostMs     float64   `json:"post_ms"`      // POST sent to its answer read
	AckMs      float64   `json:"ack_ms"`       // POST sent to the proxy's ACK handed to grpc-go
	GwLogMs    float64   `json:"gw_log_ms"`    // the gateway's ingest_to_last_ack_ms
	GwCommitMs float64   `json:"gw_commit_ms"` // the gateway's ingest_to_commit_ms
	GwRowMs    float64   `json:"gw_row_ms"`    // the action's acked_at − received_at
}

// quarantines sends one quarantine (remediate) for each of sandboxes
// first..first+count-1, every interval, from src, and times each until
// its proxy ACKed the deny-all version. want is the version each freeze
// commits (each sandbox's current version + 1).
func (g *gatewayProc) quarantines(ctx context.Context, f *fleet, src *source, first, count int, interval time.Duration, want uint32) ([]quarantineSample, error) {
	out := make([]quarantineSample, count)
	errc := make(chan error, count)
	var wg sync.WaitGroup
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for k := range count {
		i := first + k
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := quarantineEvent(src.name, src.take(1), f.names[i])
			t0 := time.Now()
			if _, err := g.post(ctx, src.token, eventMedia, body); err != nil {
				errc <- fmt.Errorf("quarantine %s: %w", f.names[i], err)
				return
			}
			posted := time.Since(t0)
			a, err := f.await(ctx, i, want, 30*time.Second)
			if err != nil {
				errc <- err
				return
			}
			out[k] = quarantineSample{Sandbox: f.names[i], SentAt: t0, Version: a.version, PostMs: ms(posted), AckMs: ms(a.acked.Sub(t0))}
		}()
		if k < count-1 {
			select {
			case <-tick.C:
			case <-ctx.Done():
			}
		}
	}
	wg.Wait()
	close(errc)
	if err := errors.Join(collect(errc)...); err != nil {
		return nil, err
	}
	return out, nil
}

func collect(errc <-chan error) []error {
	var out []error
	for err := range errc {
		out = append(out, err)
	}
	return out
}

// gatewayTimes fills each sample's gateway-side figures: the
// ingest_to_last_ack_ms of the log lines after the first since (waiting up
// to 10 s for them) and the action's acked_at − received_at.
func (g *gatewayProc) gatewayTimes(ctx context.Context, samples []quarantineSample, since int) error {
	deadline := time.Now().Add(10 * time.Second)
	for i := range samples {
		s := &samples[i]
		for s.GwLogMs == 0 {
			for _, l := range g.appliedLogs()[since:] {
				if l.Sandbox == s.Sandbox {
					s.GwLogMs, s.GwCommitMs = l.Ms, l.Commit // the latest: a sandbox frozen twice logs twice
				}
			}
			if s.GwLogMs != 0 {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("the gateway did not log \"sentry quarantine applied by every proxy\" for %s", s.Sandbox)
			}
			sleep(ctx, 50*time.Millisecond)
		}
		res, err := g.sentry.ListActions(g.adminCtx(ctx), &portcullisv1.ListSentryActionsRequest{Sandbox: s.Sandbox, Limit: 10})
		if err != nil {
			return err
		}
		for _, a := range res.GetActions() {
			if a.GetVersion() == s.Version && a.GetAckedAt() != nil {
				s.GwRowMs = ms(a.GetAckedAt().AsTime().Sub(a.GetReceivedAt().AsTime()))
			}
		}
	}
	return nil
}

// unfreeze releases sandboxes first..first+count-1 (an operator's
// action, with the admin token) and waits until each proxy ACKed the
// release.
func (g *gatewayProc) unfreeze(ctx context.Context, f *fleet, first, count int) (uint32, error) {
	var version uint32
	for i := first; i < first+count; i++ {
		res, err := g.sandbox.UnfreezeSandbox(g.adminCtx(ctx), &portcullisv1.UnfreezeSandboxRequest{Name: f.names[i], Reason: "sentryload: next round"})
		if err != nil {
			return 0, fmt.Errorf("unfreeze %s: %w", f.names[i], err)
		}
		v := res.GetCurrentVersion()
		if _, err := f.await(ctx, i, v, 30*time.Second); err != nil {
			return 0, err
		}
		version = v
	}
	return version, nil
}

// gatewayCPU is the gateway process's CPU so far.
func (g *gatewayProc) cpu() time.Duration {
	pid := g.pid()
	return benchenv.ProcsCPU(func(p benchenv.Proc) bool { return p.PID == pid })
}

// postgresCPU is the CPU of the Postgres server's processes so far, per
// process (on a shared machine, other clients' work included); take the
// CPU over an interval with Since.
func postgresCPU() benchenv.CPUSnapshot {
	return benchenv.SnapshotCPU(func(p benchenv.Proc) bool { return p.Comm == "postgres" || strings.HasPrefix(p.Comm, "postgres:") })
}
