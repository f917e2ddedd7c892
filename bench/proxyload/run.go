package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime/pprof"
	"slices"
	"strings"
	"time"

	"github.com/portcullis-dev/portcullis/bench/internal/benchcli"
	"github.com/portcullis-dev/portcullis/bench/internal/benchenv"
)

// config is what the flags set.
type config struct {
	concurrency  int
	duration     time.Duration // per path, over all rounds
	warmup       time.Duration // per path, once
	rounds       int
	upstream     string // "fixed" or "sdk"
	paths        []string
	callerBinary string // "proc" or "stub"
	nginx        string
	nginxWorkers int
	json         bool
	cpuprofile   string
	memprofile   string
}

// Limits that keep a mistyped flag from running away.
const (
	maxConcurrency = 1024
	maxDuration    = 10 * time.Minute
	maxRounds      = 100
)

func (c *config) check() error {
	switch {
	case c.concurrency < 1 || c.concurrency > maxConcurrency:
		return benchcli.Usagef("--concurrency must be 1..%d", maxConcurrency)
	case c.duration <= 0 || c.duration > maxDuration:
		return benchcli.Usagef("--duration must be >0 and ≤ %s", maxDuration)
	case c.warmup < 0 || c.warmup > maxDuration:
		return benchcli.Usagef("--warmup must be ≥0 and ≤ %s", maxDuration)
	case c.rounds < 1 || c.rounds > maxRounds:
		return benchcli.Usagef("--rounds must be 1..%d", maxRounds)
	case c.upstream != "fixed" && c.upstream != "sdk":
		return benchcli.Usagef(`--upstream must be "fixed" or "sdk"`)
	case c.callerBinary != "proc" && c.callerBinary != "stub":
		return benchcli.Usagef(`--caller-binary must be "proc" or "stub"`)
	case c.nginxWorkers < 1 || c.nginxWorkers > 64:
		return benchcli.Usagef("--nginx-workers must be 1..64")
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
	return nil
}

// The paths, in the order each round measures them.
const (
	pathDirect     = "direct"
	pathPortcullis = "portcullis"
	pathNginx      = "nginx"
)

var pathNames = []string{pathDirect, pathPortcullis, pathNginx}

// run starts the upstream and the proxies, checks every path answers
// correctly (and that Portcullis denies), measures, and reports to out.
// Progress goes to logw.
func run(ctx context.Context, cfg config, out, logw io.Writer) error {
	if err := cfg.check(); err != nil {
		return err
	}
	// Keep the measured order stable whatever order the flag gave.
	cfg.paths = slices.DeleteFunc(slices.Clone(pathNames), func(p string) bool { return !slices.Contains(cfg.paths, p) })

	env := environment{Machine: benchenv.Describe()}

	var nginxBin string
	if slices.Contains(cfg.paths, pathNginx) {
		// Fail before starting anything else.
		var err error
		if nginxBin, err = exec.LookPath(cfg.nginx); err != nil {
			return fmt.Errorf("nginx not found at %s (%v): install it with `apt-get update && apt-get install -y nginx`, or pass --nginx PATH, or leave nginx out with --paths direct,portcullis", cfg.nginx, err)
		}
		env.Nginx = nginxVersion(ctx, nginxBin)
	}

	up, err := startUpstream(cfg.upstream)
	if err != nil {
		return err
	}
	defer up.close()
	fmt.Fprintf(logw, "upstream (%s) on %s\n", cfg.upstream, up.addr)

	var targets []*target
	for _, name := range cfg.paths {
		switch name {
		case pathDirect:
			targets = append(targets, newTarget(name, "http://"+up.addr+"/mcp", nil, cfg.concurrency))
		case pathPortcullis:
			px, err := startPortcullis(up.addr, cfg.callerBinary)
			if err != nil {
				return err
			}
			defer px.stop()
			fmt.Fprintf(logw, "portcullis proxy on %s (CallerBinary: %s)\n", px.url.Host, cfg.callerBinary)
			targets = append(targets, newTarget(name, "http://"+up.addr+"/mcp", px.url, cfg.concurrency))
		case pathNginx:
			dir, err := os.MkdirTemp("", "proxyload-nginx-")
			if err != nil {
				return fmt.Errorf("nginx temp dir: %w", err)
			}
			defer os.RemoveAll(dir)
			ng, err := startNginx(ctx, nginxBin, dir, up.port, cfg.nginxWorkers)
			if err != nil {
				return err
			}
			defer ng.stop()
			fmt.Fprintf(logw, "nginx on %s (%d worker(s), config %s)\n", ng.addr, cfg.nginxWorkers, ng.conf)
			t := newTarget(name, "http://"+ng.addr+"/mcp", nil, cfg.concurrency)
			t.extCPU = func() time.Duration { return groupCPU(ng.cmd.Process.Pid) }
			targets = append(targets, t)
		}
	}
	defer func() {
		for _, t := range targets {
			t.close()
		}
	}()

	if err := verify(ctx, targets, up); err != nil {
		return fmt.Errorf("correctness check (nothing was measured): %w", err)
	}
	fmt.Fprintln(logw, "correctness check passed: every path answers 200 with the upstream's body; portcullis denies refund_order and a bad order_id with 403, and the upstream sees neither")

	if cfg.cpuprofile != "" {
		f, err := os.Create(cfg.cpuprofile)
		if err != nil {
			return fmt.Errorf("cpu profile: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("cpu profile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}

	res, err := measure(ctx, cfg, targets, up.valid, logw)
	if err != nil {
		return err
	}
	if cfg.memprofile != "" {
		// The allocation profile: see -sample_index alloc_space /
		// alloc_objects in go tool pprof.
		if err := benchcli.WriteProfile(cfg.memprofile, "allocs"); err != nil {
			return err
		}
	}
	res.Env = env
	res.Upstream = cfg.upstream
	res.CallerBinary = cfg.callerBinary
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
	return nil
}

// environment describes where the figures come from: the machine, and
// the nginx measured against.
type environment struct {
	benchenv.Machine
	Nginx string `json:"nginx,omitempty"`
}
