// Command credrotate measures how fast a rotated credential reaches the
// proxies, as users run them: one `portcullis gateway` (its defaults:
// embedded SQLite, the secrets key it makes) and -proxies `portcullis
// proxy` processes, one per sandbox, every sandbox attached to one bearer
// provider and its policy binding an upstream's endpoint to it. An agent
// per proxy sends requests without a credential in a loop; the upstream
// notes when each proxy's requests first carry a new value. For each of
// -rotations rotations (RotateProvider, as `portcullis provider rotate`
// sends it) it reports:
//
//   - rotate → every proxy's ACK: from just before RotateProvider is sent
//     until ListProxies shows every proxy holding the new generation;
//   - rotate returned → the last proxy's first request with the new value
//     (the target: within a second of the command returning);
//   - the RPC itself.
//
// Nothing here asserts a threshold; the target is printed beside the
// figures.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect/v2"
	"connectrpc.com/connect/v2/connecthttp"

	"github.com/portcullis-dev/portcullis/bench/internal/benchcli"
	"github.com/portcullis-dev/portcullis/bench/internal/benchdb"
	"github.com/portcullis-dev/portcullis/bench/internal/benchenv"
	"github.com/portcullis-dev/portcullis/bench/internal/procs"
	"github.com/portcullis-dev/portcullis/bench/internal/stats"
	"github.com/portcullis-dev/portcullis/gateway/gatewaytest"
	"github.com/portcullis-dev/portcullis/internal/secretbox"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
	"github.com/portcullis-dev/portcullis/proto/portcullis/v1/portcullisv1connect"
)

func main() {
	bin := flag.String("portcullis", "", "the portcullis binary (default: go build ./cmd/portcullis)")
	proxies := flag.Int("proxies", 10, "proxies, one per sandbox, all attached to the provider")
	rotations := flag.Int("rotations", 30, "rotations measured")
	replicas := flag.Int("replicas", 1, "gateway replicas (more than 1 needs -database-url); proxies spread over them, rotations sent to the first")
	databaseURL := flag.String("database-url", "", "a Postgres server URL (e.g. postgres://postgres@127.0.0.1:5432/postgres): the replicas share a fresh database there")
	flag.Parse()
	benchcli.Main("credrotate", func(ctx context.Context) error {
		if *proxies < 1 || *rotations < 1 || *replicas < 1 {
			return benchcli.Usagef("-proxies, -rotations and -replicas must be at least 1")
		}
		if *replicas > 1 && *databaseURL == "" {
			return benchcli.Usagef("-replicas %d needs -database-url", *replicas)
		}
		dir, err := os.MkdirTemp("", "credrotate-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		if *bin == "" {
			if *bin, err = procs.Build(ctx, dir); err != nil {
				return err
			}
		}
		return run(ctx, setup{bin: *bin, dir: dir, proxies: *proxies, rotations: *rotations, replicas: *replicas, databaseURL: *databaseURL})
	})
}

// upstream records, per proxy (the path's first segment), the first time
// its requests carried each Authorization value.
type upstream struct {
	mu    sync.Mutex
	first map[string]time.Time // "p3 Bearer v7" → first seen
}

func (u *upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	key := strings.SplitN(strings.TrimPrefix(r.URL.Path, "/"), "/", 2)[0] + " " + r.Header.Get("Authorization")
	u.mu.Lock()
	if _, ok := u.first[key]; !ok {
		u.first[key] = now
	}
	u.mu.Unlock()
}

func (u *upstream) seen(key string) (time.Time, bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	t, ok := u.first[key]
	return t, ok
}

type setup struct {
	bin, dir           string
	proxies, rotations int
	replicas           int
	databaseURL        string
}

// gateways starts the replicas: SQLite alone, or on a fresh Postgres
// database with one secrets key shared.
func (s setup) gateways(ctx context.Context, admin string) ([]*procs.Proc, func(), error) {
	var env, flags []string
	cleanup := func() {}
	if s.databaseURL != "" {
		dbURL, drop, err := benchdb.Fresh(ctx, s.databaseURL, "credrotate")
		if err != nil {
			return nil, nil, err
		}
		cleanup = func() { drop() }
		keyFile := filepath.Join(s.dir, "secrets.key")
		if _, err := secretbox.Generate(keyFile); err != nil {
			return nil, cleanup, err
		}
		env, flags = []string{"PORTCULLIS_DATABASE_URL=" + dbURL}, []string{"--secrets-key-file", keyFile}
	}
	var gws []*procs.Proc
	stop := func() {
		for _, g := range gws {
			g.Stop()
		}
		cleanup()
	}
	for i := range s.replicas {
		g, err := procs.StartGateway(ctx, s.bin, filepath.Join(s.dir, fmt.Sprintf("gateway-%d", i)), admin, env, flags)
		if err != nil {
			return nil, stop, err
		}
		gws = append(gws, g)
	}
	return gws, stop, nil
}

func run(ctx context.Context, s setup) error {
	bin, dir, n, rotations := s.bin, s.dir, s.proxies, s.rotations
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	up := &upstream{first: map[string]time.Time{}}
	go http.Serve(ln, up)
	port := ln.Addr().(*net.TCPAddr).Port

	admin := "pcs_credrotate-" + procs.RandomHex()
	gws, stopGateways, err := s.gateways(ctx, admin)
	if stopGateways != nil {
		defer stopGateways()
	}
	if err != nil {
		return err
	}
	gw := gws[0]
	c := connect.NewClient(connecthttp.NewTransport(http.DefaultClient, "http://"+gw.Addr), gatewaytest.Bearer(admin))
	sandboxes, providers := portcullisv1connect.NewSandboxServiceClient(c), portcullisv1connect.NewProviderServiceClient(c)
	proxySvc := portcullisv1connect.NewProxyServiceClient(c)
	if _, err := providers.CreateProvider(ctx, &portcullisv1.CreateProviderRequest{Name: "bench", Type: "bearer",
		Hosts: []string{fmt.Sprintf("http://127.0.0.1:%d", port)}, Secret: map[string][]byte{"token": []byte("value-0")}}); err != nil {
		return err
	}
	var all []*procs.Proc
	defer func() {
		for _, p := range all {
			p.Stop()
		}
	}()
	for i := range n {
		name := fmt.Sprintf("cred-%02d", i)
		created, err := sandboxes.CreateSandbox(ctx, &portcullisv1.CreateSandboxRequest{Name: name, Policy: policyDoc(port)})
		if err != nil {
			return err
		}
		if _, err := sandboxes.AttachProvider(ctx, &portcullisv1.AttachProviderRequest{Sandbox: name, Provider: "bench"}); err != nil {
			return err
		}
		p, err := procs.StartProxy(ctx, bin, gws[i%len(gws)].Addr, name, created.GetToken(), filepath.Join(dir, name))
		if err != nil {
			return err
		}
		all = append(all, p)
	}
	agents, stop := startAgents(ctx, all, port)
	defer stop()

	var toAck, toRequest, rpc []time.Duration
	for r := 1; r <= rotations; r++ {
		value := fmt.Sprintf("value-%d", r)
		sent := time.Now()
		_, err := providers.RotateProvider(ctx, &portcullisv1.RotateProviderRequest{Name: "bench", Secret: map[string][]byte{"token": []byte(value)}})
		if err != nil {
			return err
		}
		returned := time.Now()
		rpc = append(rpc, returned.Sub(sent))
		acked, err := waitAcks(ctx, proxySvc, n, uint64(1+r))
		if err != nil {
			return err
		}
		toAck = append(toAck, acked.Sub(sent))
		last, err := waitSeen(ctx, up, n, "Bearer "+value)
		if err != nil {
			return err
		}
		toRequest = append(toRequest, max(0, last.Sub(returned)))
	}
	fmt.Printf("credrotate: %s\n", benchenv.Describe())
	fmt.Printf("%d proxies (one per sandbox) over %d gateway replica(s) (%s), %d rotations sent to the first, agents sending %s\n\n",
		n, len(gws), engine(s), rotations, agents)
	row := func(what string, d []time.Duration, target string) {
		slices.Sort(d)
		fmt.Printf("%-46s p50 %8s  p99 %8s  max %8s  %s\n", what, stats.Percentile(d, 50).Round(10*time.Microsecond),
			stats.Percentile(d, 99).Round(10*time.Microsecond), d[len(d)-1].Round(10*time.Microsecond), target)
	}
	row("RotateProvider RPC", rpc, "")
	row("rotate sent → every proxy ACKed", toAck, "")
	row("rotate returned → last proxy's request has it", toRequest, "target ≤ 1 s")
	return nil
}

func engine(s setup) string {
	if s.databaseURL != "" {
		return "Postgres"
	}
	return "SQLite"
}

// policyDoc binds the upstream to provider bench.
func policyDoc(port int) string {
	return fmt.Sprintf(`version: 1
network_policies:
  up:
    name: up
    endpoints:
      - host: 127.0.0.1
        port: %d
        protocol: rest
        credential_binding: { provider: bench }
        rules: [ { allow: { method: GET, path: "/**" } } ]
`, port)
}

// startAgents sends GET /pI/x through proxy I in a loop, keeping its
// connection, until stop.
func startAgents(ctx context.Context, all []*procs.Proc, port int) (string, func()) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i, p := range all {
		c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: p.Addr})}, Timeout: 5 * time.Second}
		target := fmt.Sprintf("http://127.0.0.1:%d/p%d/x", port, i)
		wg.Go(func() {
			for ctx.Err() == nil {
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
				if res, err := c.Do(req); err == nil {
					res.Body.Close()
				}
				time.Sleep(time.Millisecond)
			}
		})
	}
	return "one request a millisecond each (at most)", func() { cancel(); wg.Wait() }
}

// waitAcks polls ListProxies until all n proxies hold generation want
// (each sandbox's generation is 1 once attached and goes up by one with
// each rotation), and returns when it saw that.
func waitAcks(ctx context.Context, svc portcullisv1connect.ProxyServiceClient, n int, want uint64) (time.Time, error) {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		res, err := svc.ListProxies(ctx, &portcullisv1.ListProxiesRequest{})
		if err != nil {
			return time.Time{}, err
		}
		held := 0
		for _, s := range res.GetProxies() {
			if s.GetConnected() && s.GetCredentialsGeneration() >= want {
				held++
			}
		}
		if held >= n {
			return time.Now(), nil
		}
		time.Sleep(2 * time.Millisecond)
	}
	return time.Time{}, fmt.Errorf("the proxies did not ACK generation %d within 30 s", want)
}

// waitSeen waits until the upstream saw auth from every proxy, and
// returns the latest first sighting.
func waitSeen(ctx context.Context, up *upstream, n int, auth string) (time.Time, error) {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		var last time.Time
		seen := 0
		for i := range n {
			if t, ok := up.seen(fmt.Sprintf("p%d %s", i, auth)); ok {
				seen++
				if t.After(last) {
					last = t
				}
			}
		}
		if seen == n {
			return last, nil
		}
		time.Sleep(2 * time.Millisecond)
	}
	return time.Time{}, fmt.Errorf("not every proxy's requests carried %q within 30 s", auth)
}
