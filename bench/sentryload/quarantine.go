package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"

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

func sandboxName(i int) string { return fmt.Sprintf("sb-%03d", i) }

// fleet is the simulated proxies: one per sandbox, each on its own
// connection with its sandbox's token, ACKing every version it reads.
type fleet struct {
	names   []string
	conns   []*grpc.ClientConn
	streams []*simproxy.Stream
	acks    []chan ack // per sandbox, every version ACKed
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	hbStop  chan struct{}
	hbDone  chan struct{} // nil until the heartbeats run
}

// ack is one version a simulated proxy ACKed, and when.
type ack struct {
	version        uint32
	arrived, acked time.Time
	err            error
}

// connectFleet creates n sandboxes with the small policy and connects
// one simulated proxy to each; it returns once each has ACKed version 1.
func (g *gatewayProc) connectFleet(ctx context.Context, n int) (*fleet, error) {
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	f := &fleet{cancel: cancel, hbStop: make(chan struct{})}
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
		f.names, f.conns, f.streams, f.acks = append(f.names, name), append(f.conns, conn), append(f.streams, st), append(f.acks, acks)
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			for {
				res, arrived, acked, err := st.Next()
				select {
				case acks <- ack{version: res.GetPolicy().GetVersion(), arrived: arrived, acked: acked, err: err}:
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
	for i := range n {
		if _, err := f.await(ctx, i, 1, 30*time.Second); err != nil {
			f.close()
			return nil, err
		}
	}
	return f, nil
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
	Sandbox string    `json:"sandbox"`
	SentAt  time.Time `json:"sent_at"` // to line a slow one up with what else happened then
	Version uint32    `json:"version"`
	PostMs  float64   `json:"post_ms"`   // POST sent to its answer read
	AckMs   float64   `json:"ack_ms"`    // POST sent to the proxy's ACK handed to grpc-go
	GwLogMs float64   `json:"gw_log_ms"` // the gateway's ingest_to_last_ack_ms
	GwRowMs float64   `json:"gw_row_ms"` // the action's acked_at − received_at
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
					s.GwLogMs = l.Ms // the latest: a sandbox frozen twice logs twice
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

// postgresCPU is the CPU of the Postgres server's processes so far (on a
// shared machine, other clients' work included).
func postgresCPU() time.Duration {
	return benchenv.ProcsCPU(func(p benchenv.Proc) bool { return p.Comm == "postgres" || strings.HasPrefix(p.Comm, "postgres:") })
}
