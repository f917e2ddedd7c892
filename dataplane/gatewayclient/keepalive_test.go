package gatewayclient_test

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/portcullis-dev/portcullis/dataplane/gatewayclient"
	"github.com/portcullis-dev/portcullis/gateway/gatewaytest"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

// silentRelay relays TCP to target; silence makes every connection open
// at that moment carry nothing more, in either direction, without closing
// it (bytes are read and dropped): a path that died without a word.
// Connections made after it flow.
type silentRelay struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	open   []*atomic.Bool // per connection: silenced
	wg     sync.WaitGroup
}

func startSilentRelay(t *testing.T, target string) *silentRelay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &silentRelay{ln: ln, target: target}
	var conns []net.Conn
	var connsMu sync.Mutex
	r.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			connsMu.Lock()
			conns = append(conns, c, s)
			connsMu.Unlock()
			silenced := new(atomic.Bool)
			r.mu.Lock()
			r.open = append(r.open, silenced)
			r.mu.Unlock()
			pipe := func(dst, src net.Conn) {
				buf := make([]byte, 32<<10)
				for {
					n, err := src.Read(buf)
					if n > 0 && !silenced.Load() {
						dst.Write(buf[:n])
					}
					if err != nil {
						if !silenced.Load() {
							dst.Close()
						}
						return
					}
				}
			}
			r.wg.Go(func() { pipe(s, c) })
			r.wg.Go(func() { pipe(c, s) })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		connsMu.Lock()
		for _, c := range conns {
			c.Close()
		}
		connsMu.Unlock()
		r.wg.Wait()
	})
	return r
}

func (r *silentRelay) silence() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.open {
		s.Store(true)
	}
}

// A path to the gateway that goes silent (nothing closed, nothing
// delivered) is given up by the connection's own keepalive: with the
// stream's heartbeats an hour apart, only the keepalive can find the
// dead path, and the proxy still reconnects and receives the version
// committed meanwhile. (drills/proxy's cut drill measures how soon.)
func TestSubscriberLeavesASilentPath(t *testing.T) {
	gw := gatewaytest.Start(t, "sqlite")
	api := newAdminAPI(gw.URL)
	created, err := api.Sandbox.CreateSandbox(t.Context(), &portcullisv1.CreateSandboxRequest{Name: "agent-1", Policy: subscribePolicy})
	if err != nil {
		t.Fatal(err)
	}
	relay := startSilentRelay(t, strings.TrimPrefix(gw.URL, "http://"))
	p := &proxy{}
	startSubscriber(t, gatewayclient.SubscribeConfig{
		Gateway: "http://" + relay.ln.Addr().String(), Sandbox: "agent-1", ProxyID: "p1", DataDir: t.TempDir(),
		Token:     func() (string, error) { return created.GetToken(), nil },
		Heartbeat: time.Hour, MaxBackoff: 200 * time.Millisecond, Logger: slog.New(slog.DiscardHandler),
	}, p)
	waitVersion(t, p, "1", 15*time.Second)

	relay.silence()
	if _, err := api.Policy.SetPolicy(t.Context(), &portcullisv1.SetPolicyRequest{Sandbox: "agent-1", Document: strings.Replace(subscribePolicy, "read-only", "read-write", 1)}); err != nil {
		t.Fatal(err)
	}
	// Liveness, not speed: without a keepalive the proxy would wait an
	// hour of heartbeats on the dead connection.
	waitVersion(t, p, "2", 60*time.Second)
}

func waitVersion(t *testing.T, p *proxy, want string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for p.PolicyVersion() != want {
		if time.Now().After(deadline) {
			t.Fatalf("the proxy enforces version %q after %v; want %q", p.PolicyVersion(), within, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A proxy whose clock is five minutes behind learns from the first
// heartbeat's answer that the gateway is at least that far ahead (never
// less: grants must end no later than the gateway says); one five
// minutes ahead learns that the gateway is not ahead.
func TestSubscriberMeasuresTheGatewayClock(t *testing.T) {
	gw := gatewaytest.Start(t, "sqlite")
	api := newAdminAPI(gw.URL)
	created, err := api.Sandbox.CreateSandbox(t.Context(), &portcullisv1.CreateSandboxRequest{Name: "agent-1", Policy: subscribePolicy})
	if err != nil {
		t.Fatal(err)
	}
	for _, skew := range []time.Duration{-5 * time.Minute, 5 * time.Minute} {
		p := &proxy{}
		sub, err := gatewayclient.NewSubscriber(gatewayclient.SubscribeConfig{
			Gateway: gw.URL, Sandbox: "agent-1", ProxyID: "p" + skew.String(), DataDir: t.TempDir(),
			Token: func() (string, error) { return created.GetToken(), nil },
			Now:   func() time.Time { return time.Now().Add(skew) }, Logger: slog.New(slog.DiscardHandler),
		}, p)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { sub.Run(ctx); close(done) }()
		waitVersion(t, p, "1", 15*time.Second)
		deadline := time.Now().Add(15 * time.Second)
		for skew < 0 && sub.GatewayAhead() == 0 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		got := sub.GatewayAhead()
		cancel()
		<-done
		sub.Close()
		switch {
		case skew < 0 && got < -skew:
			t.Errorf("proxy %v behind: gateway ahead by %v, want at least %v", -skew, got, -skew)
		case skew < 0 && got > -skew+5*time.Second:
			t.Errorf("proxy %v behind: gateway ahead by %v, far more than the skew", -skew, got)
		case skew > 0 && got != 0:
			t.Errorf("proxy %v ahead: gateway ahead by %v, want 0", skew, got)
		}
	}
}
