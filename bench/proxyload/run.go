package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/portcullis-dev/portcullis/bench/internal/benchcli"
	"github.com/portcullis-dev/portcullis/bench/internal/benchenv"
	"github.com/portcullis-dev/portcullis/bench/internal/byterelay"
	"github.com/portcullis-dev/portcullis/bench/internal/procs"
)

// config is what the flags set.
type config struct {
	concurrency  []int
	duration     time.Duration // per path and concurrency, over all rounds
	warmup       time.Duration // per path and concurrency, once
	rounds       int
	upstream     string // "fixed" or "sdk"
	paths        []string
	portcullis   string // the binary; "" builds it
	baseline     string // another portcullis binary measured beside it (path "baseline"); "" none
	nginx        string
	nginxWorkers string // "auto" or a number
	idle         time.Duration
	binaries     bool // the policy names the load generator's binary
	pins         bool // the policy pins lookup_order's definition (fixed upstream)
	json         bool
	cpuprofile   string
	memprofile   string
	ocsf         string // "", "down" (a HEC sink on a closed port) or "file"
}

// Limits that keep a mistyped flag from running away.
const (
	maxConcurrency = 1024
	maxDuration    = 10 * time.Minute
	maxRounds      = 100
)

func parseConcurrency(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > maxConcurrency {
			return nil, benchcli.Usagef("--concurrency: %q is not a number from 1 to %d", f, maxConcurrency)
		}
		out = append(out, n)
	}
	return out, nil
}

func (c *config) check() error {
	switch {
	case len(c.concurrency) == 0:
		return benchcli.Usagef("--concurrency names no level")
	case c.duration <= 0 || c.duration > maxDuration:
		return benchcli.Usagef("--duration must be >0 and ≤ %s", maxDuration)
	case c.warmup < 0 || c.warmup > maxDuration:
		return benchcli.Usagef("--warmup must be ≥0 and ≤ %s", maxDuration)
	case c.idle < 0 || c.idle > time.Minute:
		return benchcli.Usagef("--idle must be ≥0 and ≤ 1m")
	case c.rounds < 1 || c.rounds > maxRounds:
		return benchcli.Usagef("--rounds must be 1..%d", maxRounds)
	case c.upstream != "fixed" && c.upstream != "sdk":
		return benchcli.Usagef(`--upstream must be "fixed" or "sdk"`)
	}
	if c.nginxWorkers != "auto" {
		if n, err := strconv.Atoi(c.nginxWorkers); err != nil || n < 1 || n > 64 {
			return benchcli.Usagef(`--nginx-workers must be "auto" or 1..64`)
		}
	}
	seen := map[string]bool{}
	for _, p := range c.paths {
		if !slices.Contains(pathNames, p) {
			return benchcli.Usagef("unknown path %q in --paths (known: %s)", p, strings.Join(pathNames, ", "))
		}
		if seen[p] {
			return benchcli.Usagef("path %q given twice in --paths", p)
		}
		seen[p] = true
	}
	if len(c.paths) == 0 {
		return benchcli.Usagef("--paths names no path")
	}
	if (c.cpuprofile != "" || c.memprofile != "") && !seen[pathPortcullis] {
		return benchcli.Usagef("--cpuprofile and --memprofile profile the portcullis path, which --paths leaves out")
	}
	if seen[pathTransparent] && (!seen[pathPortcullis] || seen[pathNginx] || seen[pathRelay]) {
		return benchcli.Usagef("the transparent path shares the portcullis path's proxy (give both), and its upstream is not on loopback, where nginx and relay reach it (leave them out)")
	}
	if seen[pathBaseline] != (c.baseline != "") {
		return benchcli.Usagef("the baseline path needs --baseline PATH, and --baseline the baseline path")
	}
	return nil
}

// The paths, in the order each round measures them.
const (
	pathDirect     = "direct"
	pathPortcullis = "portcullis"
	pathBaseline   = "baseline" // another portcullis binary (--baseline), for before and after in one run
	pathNginx      = "nginx"
	// pathRelay is a byte relay in Go (bench/internal/byterelay): the
	// floor under any goroutine-per-connection proxy, the same system
	// calls per request as nginx and the proxy with no HTTP, judging or
	// logging. What the relay costs above nginx is the runtime's
	// (goroutines parked and woken through the netpoller).
	pathRelay = "relay"
	// pathTransparent is the portcullis path's proxy through its
	// transparent listener, the clients under `portcullis run`
	// (transparent.go).
	pathTransparent = "transparent"
)

var pathNames = []string{pathDirect, pathPortcullis, pathTransparent, pathBaseline, pathNginx, pathRelay}

// path is one way to the upstream, as the program measures it: the CPU
// of the process serving it besides the upstream and the load generator
// (the proxy's, nginx's; none for direct).
type path struct {
	name    string
	spec    targetSpec
	procCPU func() time.Duration
	px      *portcullisProc // the portcullis and baseline paths' proxy
	// lg is the load generator of a path with one of its own (the
	// transparent path's, under portcullis run); nil: the shared one.
	lg *loadProc
}

// loader is the load generator that drives p.
func (p *path) loader(shared *loadProc) *loadProc {
	if p.lg != nil {
		return p.lg
	}
	return shared
}

// run starts the upstream, the proxies and the load generator, checks
// that every path answers correctly (and that Portcullis enforces the
// policy), measures, and reports to out. Progress goes to logw.
func run(ctx context.Context, cfg config, out, logw io.Writer) error {
	if err := cfg.check(); err != nil {
		return err
	}
	// Keep the measured order stable whatever order the flag gave.
	cfg.paths = slices.DeleteFunc(slices.Clone(pathNames), func(p string) bool { return !slices.Contains(cfg.paths, p) })

	res := &results{Env: environment{Machine: benchenv.Describe()}, Upstream: cfg.upstream, Rounds: cfg.rounds,
		Duration: cfg.duration.String(), Warmup: cfg.warmup.String()}
	res.Env.Load = loadAverage()

	var nginxBin string
	if slices.Contains(cfg.paths, pathNginx) {
		// Fail before starting anything else.
		var err error
		if nginxBin, err = exec.LookPath(cfg.nginx); err != nil {
			return fmt.Errorf("nginx not found at %s (%v): install it with `apt-get update && apt-get install -y nginx`, or pass --nginx PATH, or leave nginx out with --paths direct,portcullis", cfg.nginx, err)
		}
		res.Env.Nginx = nginxVersion(ctx, nginxBin)
	}
	tmp, err := os.MkdirTemp("", "proxyload-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)

	transparent := slices.Contains(cfg.paths, pathTransparent)
	listen, upHost, closeNet, err := upstreamNetwork(transparent)
	if err != nil {
		return err
	}
	defer closeNet()
	up, err := startUpstream(cfg.upstream, listen, upHost)
	if err != nil {
		return err
	}
	defer up.close()
	fmt.Fprintf(logw, "upstream (%s) on %s\n", cfg.upstream, up.addr)

	var (
		paths []*path
		ng    *nginxProc
	)
	for _, name := range cfg.paths {
		switch name {
		case pathDirect:
			paths = append(paths, &path{name: name, spec: targetSpec{Name: name, URL: "http://" + up.addr + "/mcp"}})
		case pathPortcullis, pathBaseline:
			bin := cfg.portcullis
			if name == pathBaseline {
				bin = cfg.baseline
			}
			if bin == "" {
				fmt.Fprintf(logw, "building %s\n", modulePackage)
				if bin, err = buildPortcullis(ctx, tmp); err != nil {
					return err
				}
			}
			var binary string
			if cfg.binaries {
				if binary, err = loadBinary(); err != nil {
					return err
				}
			}
			doc, err := policyDoc(upHost, up.port, binary, cfg.pins && cfg.upstream == "fixed")
			if err != nil {
				return err
			}
			dir, err := os.MkdirTemp(tmp, name+"-")
			if err != nil {
				return err
			}
			var extra []string
			if name == pathPortcullis {
				if extra, err = ocsfArgs(cfg.ocsf, dir); err != nil {
					return err
				}
				if transparent {
					extra = append(extra, "--transparent-listen", "127.0.0.1:0")
				}
			}
			px, err := startPortcullis(ctx, bin, dir, doc, (cfg.cpuprofile != "" || cfg.memprofile != "") && name == pathPortcullis, extra...)
			if err != nil {
				return err
			}
			defer px.stop()
			fmt.Fprintf(logw, "%s: portcullis proxy %s (pid %d) on %s, decision log in %s\n", name, bin, px.pid(), px.url.Host, px.dataDir)
			info := &portcullis{Path: name, Binary: bin}
			if fi, err := os.Stat(bin); err == nil {
				info.BinaryBytes = fi.Size()
			}
			res.Proxies = append(res.Proxies, info)
			pid := px.pid()
			paths = append(paths, &path{name: name, spec: targetSpec{Name: name, URL: "http://" + up.addr + "/mcp", Proxy: px.url.String()},
				procCPU: func() time.Duration { return pidCPU(pid) }, px: px})
			if name == pathPortcullis && transparent {
				fmt.Fprintf(logw, "%s: the same proxy's transparent listener on %s\n", pathTransparent, px.transparent)
				paths = append(paths, &path{name: pathTransparent, spec: targetSpec{Name: pathTransparent, URL: "http://" + up.addr + "/mcp"},
					procCPU: func() time.Duration { return pidCPU(pid) }})
			}
		case pathNginx:
			dir, err := os.MkdirTemp(tmp, "nginx-")
			if err != nil {
				return err
			}
			if ng, err = startNginx(ctx, nginxBin, dir, up.port, cfg.nginxWorkers); err != nil {
				return err
			}
			defer ng.stop()
			fmt.Fprintf(logw, "nginx on %s (worker_processes %s, config %s)\n", ng.addr, cfg.nginxWorkers, ng.conf)
			pgid := ng.cmd.Process.Pid
			paths = append(paths, &path{name: name, spec: targetSpec{Name: name, URL: "http://" + ng.addr + "/mcp"},
				procCPU: func() time.Duration { return groupCPU(pgid) }})
		case pathRelay:
			rl, addr, err := byterelay.Start(up.addr)
			if err != nil {
				return err
			}
			defer rl.Close()
			fmt.Fprintf(logw, "relay (a Go byte relay, the floor) on %s\n", addr)
			pid := rl.Pid()
			paths = append(paths, &path{name: name, spec: targetSpec{Name: name, URL: "http://" + addr + "/mcp"},
				procCPU: func() time.Duration { return pidCPU(pid) }})
		}
	}

	// Idle memory: started, policy loaded, no request yet.
	if len(res.Proxies) > 0 || ng != nil {
		select {
		case <-time.After(cfg.idle):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	for _, p := range paths {
		if p.px != nil {
			m := pidMemory(p.px.pid())
			res.proxy(p.name).Idle = &m
		}
	}
	if ng != nil {
		m := groupMemory(ng.cmd.Process.Pid)
		res.NginxIdle = &m
	}

	var specs []targetSpec
	for _, p := range paths {
		if p.name != pathTransparent {
			specs = append(specs, p.spec)
		}
	}
	lg, err := startLoadProc(cfg.upstream, specs, slices.Max(cfg.concurrency))
	if err != nil {
		return err
	}
	defer lg.stop()
	if transparent {
		tp, px := pathNamed(paths, pathTransparent), pathNamed(paths, pathPortcullis).px
		if tp.lg, err = startTransparentLoad(px.bin, px.transparent, cfg.upstream, tp.spec, slices.Max(cfg.concurrency)); err != nil {
			return err
		}
		defer tp.lg.stop()
	}

	if err := verify(lg, paths, up); err != nil {
		return fmt.Errorf("correctness check (nothing was measured): %w", err)
	}
	fmt.Fprintln(logw, "correctness check passed: every path answers 200 with the upstream's body; portcullis lists only lookup_order, denies refund_order and a bad order_id with 403, and the upstream sees neither")

	var profile chan error
	if cfg.cpuprofile != "" {
		total := time.Duration(len(cfg.concurrency)*len(paths))*(cfg.duration+cfg.warmup) + time.Second
		profile = make(chan error, 1)
		pprofURL := pathNamed(paths, pathPortcullis).px.pprof
		go func() {
			profile <- procs.FetchProfile(ctx, pprofURL+"profile?seconds="+strconv.Itoa(int(total.Round(time.Second)/time.Second)), cfg.cpuprofile)
		}()
	}

	for _, c := range cfg.concurrency {
		lv, err := measure(ctx, cfg, c, paths, lg, logw)
		if err != nil {
			return err
		}
		res.Levels = append(res.Levels, lv)
	}
	if profile != nil {
		fmt.Fprintln(logw, "waiting for the CPU profile")
		if err := <-profile; err != nil {
			return err
		}
	}
	if cfg.memprofile != "" {
		// Every allocation since the proxy started: see -sample_index
		// alloc_space / alloc_objects in go tool pprof.
		if err := procs.FetchProfile(ctx, pathNamed(paths, pathPortcullis).px.pprof+"allocs", cfg.memprofile); err != nil {
			return err
		}
	}
	for _, p := range paths {
		if p.px == nil {
			continue
		}
		info := res.proxy(p.name)
		m := pidMemory(p.px.pid())
		info.AfterLoad = &m
		// Stopped, it has written every record out.
		p.px.stop()
		n, err := p.px.decisionRecords()
		if err != nil {
			return fmt.Errorf("%s: decision log: %w", p.name, err)
		}
		info.DecisionRecords = n
	}
	if cfg.json {
		err = benchcli.WriteJSON(out, res)
	} else {
		err = res.writeTable(out)
	}
	if err != nil {
		return err
	}
	if failed := res.failed(); failed > 0 {
		return fmt.Errorf("%d requests failed during the measurement; the figures are not valid", failed)
	}
	for _, info := range res.Proxies {
		if n := res.requests(info.Path); info.DecisionRecords < n {
			return fmt.Errorf("%s: the decision log holds %d records for %d requests through the proxy: records were dropped", info.Path, info.DecisionRecords, n)
		}
	}
	return nil
}

// verify checks, before anything is measured, that every path answers a
// lookup_order with 200 and the upstream's body, and that Portcullis
// enforces the bench policy: tools/list shows lookup_order alone, and
// refund_order and a lookup_order failing the argument schema are denied
// with 403 without the upstream seeing either.
func verify(lg *loadProc, paths []*path, up *upstream) error {
	for _, p := range paths {
		for id := int64(1); id <= 3; id++ {
			status, body, err := p.loader(lg).call(p.name, "lookup_order", lookupArgs, id)
			if err != nil {
				return fmt.Errorf("%s: lookup_order: %w", p.name, err)
			}
			if status != http.StatusOK {
				return fmt.Errorf("%s: lookup_order: status %d, want 200: %s", p.name, status, body)
			}
			if !up.valid(body) || !bytes.Contains(body, []byte(`"id":`+strconv.FormatInt(id, 10))) {
				return fmt.Errorf("%s: lookup_order: the body is not the upstream's answer to id %d: %s", p.name, id, body)
			}
		}
		if p.px == nil && p.name != pathTransparent {
			continue
		}
		status, body, err := p.loader(lg).call(p.name, "", "", 7)
		if err != nil {
			return fmt.Errorf("%s: tools/list: %w", p.name, err)
		}
		if status != http.StatusOK || !bytes.Contains(body, []byte(`"lookup_order"`)) ||
			bytes.Contains(body, []byte(`"refund_order"`)) || bytes.Contains(body, []byte(`"cancel_order"`)) {
			return fmt.Errorf("%s: tools/list: status %d, want 200 listing lookup_order alone: %s", p.name, status, body)
		}
		for _, c := range []struct{ tool, args, why string }{
			{"refund_order", lookupArgs, "a deny rule"},
			{"lookup_order", `{"order_id":"x"}`, "the arguments schema"},
		} {
			before := up.hits.Load()
			status, body, err := p.loader(lg).call(p.name, c.tool, c.args, 99)
			if err != nil {
				return fmt.Errorf("%s: %s %s: %w", p.name, c.tool, c.args, err)
			}
			if status != http.StatusForbidden || !bytes.Contains(body, []byte(`"error"`)) {
				return fmt.Errorf("%s: %s %s (denied by %s): status %d, want 403 with a JSON-RPC error: %s", p.name, c.tool, c.args, c.why, status, body)
			}
			if n := up.hits.Load() - before; n != 0 {
				return fmt.Errorf("%s: %s %s was denied, yet the upstream received %d request(s)", p.name, c.tool, c.args, n)
			}
		}
	}
	return nil
}

// measure warms every path up at concurrency c, then runs the rounds:
// each round measures every path in turn for duration/rounds.
func measure(ctx context.Context, cfg config, c int, paths []*path, lg *loadProc, logw io.Writer) (*level, error) {
	lv := &level{Concurrency: c}
	roundDur := cfg.duration / time.Duration(cfg.rounds)
	perWorker := make(map[string]int, len(paths))
	for _, p := range paths {
		perWorker[p.name] = 64 << 10
		if cfg.warmup > 0 {
			fmt.Fprintf(logw, "%d client(s): warm-up %s: %s\n", c, p.name, cfg.warmup)
			w, err := p.loader(lg).load(p.name, c, cfg.warmup, 1024)
			if err != nil {
				return nil, err
			}
			if w.Failures > 0 {
				return nil, fmt.Errorf("%s: %d requests failed during the warm-up; first: %s", p.name, w.Failures, w.FirstErr)
			}
			// Room for twice the warm-up's rate.
			rate := float64(w.Requests) / w.Elapsed.Seconds()
			perWorker[p.name] = int(2 * rate * roundDur.Seconds() / float64(c))
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	byPath := map[string]*pathResult{}
	for _, p := range paths {
		pr := &pathResult{Path: p.name}
		byPath[p.name] = pr
		lv.Paths = append(lv.Paths, pr)
	}
	all := map[string][]time.Duration{}
	var dials = map[string]int64{}
	for round := 1; round <= cfg.rounds; round++ {
		for _, p := range paths {
			up0, proc0 := benchenv.SelfCPU(), procCPU(p)
			r, err := p.loader(lg).load(p.name, c, roundDur, perWorker[p.name])
			if err != nil {
				return nil, err
			}
			upCPU, pCPU := benchenv.SelfCPU()-up0, procCPU(p)-proc0
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			pr := byPath[p.name]
			pr.add(r, upCPU, pCPU)
			all[p.name] = append(all[p.name], r.Latencies...)
			dials[p.name] = r.Dials
			fmt.Fprintf(logw, "%d client(s): round %d %-10s %8.0f req/s  p50 %6.0f µs  p99 %6.0f µs\n", c, round, p.name,
				pr.RoundRPS[round-1], pr.RoundP50[round-1], pr.roundP99[round-1])
		}
	}
	for _, p := range paths {
		byPath[p.name].finish(all[p.name], dials[p.name])
	}
	lv.ratios()
	return lv, nil
}

func pathNamed(paths []*path, name string) *path {
	for _, p := range paths {
		if p.name == name {
			return p
		}
	}
	return nil
}

func procCPU(p *path) time.Duration {
	if p.procCPU == nil {
		return 0
	}
	return p.procCPU()
}

// loadAverage is /proc/loadavg's first three fields: how busy the
// machine was when the run started (the figures mean little without it).
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

// ocsfArgs are the proxy's OCSF flags for -ocsf: "down" sends events to
// a Splunk HEC URL on a loopback port nothing listens on (every write is
// refused: the sink is down), "file" writes them to dir/ocsf.jsonl.
func ocsfArgs(mode, dir string) ([]string, error) {
	switch mode {
	case "":
		return nil, nil
	case "file":
		return []string{"--ocsf-file", filepath.Join(dir, "ocsf.jsonl")}, nil
	case "down":
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		addr := ln.Addr().String()
		ln.Close() // nothing listens there now: connections are refused
		tok := filepath.Join(dir, "hec-token")
		if err := os.WriteFile(tok, []byte("bench\n"), 0o600); err != nil {
			return nil, err
		}
		return []string{"--ocsf-hec-url", "http://" + addr + "/services/collector/event", "--ocsf-hec-token-file", tok}, nil
	}
	return nil, fmt.Errorf(`-ocsf %q: want "", "down" or "file"`, mode)
}
