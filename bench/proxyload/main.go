// Command proxyload measures what the Portcullis proxy costs an MCP agent,
// as users run it: it drives MCP tools/call requests at one upstream over
// three paths in the same run — directly, through the shipped
// `portcullis proxy` binary (its own process, decision log on, the bench
// policy with an argument schema, tools/list filtering, a rate limit and
// the calling binary named), and through nginx (worker_processes auto) as
// the reverse-proxy baseline — from a load generator in a third process.
// It reports req/s, p50 and p99 for each at each concurrency, the ratios
// against nginx and direct, CPU per request, and the idle proxy's
// resident memory.
//
// The machine is shared and noisy, so the figures to compare across runs
// are the ratios: the paths are measured in interleaved rounds so drift
// hits all alike. Nothing here asserts a timing threshold; the targets are
// printed next to the figures.
//
// See README.md for the command and what each figure means.
package main

import (
	"context"
	"flag"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/portcullis-dev/portcullis/bench/internal/benchcli"
	"github.com/portcullis-dev/portcullis/bench/internal/byterelay"
)

func main() {
	cfg := config{}
	concurrency := flag.String("concurrency", "16,1", "comma-separated concurrent keep-alive clients per path, one measurement each (16: saturation on 2 cores; 1: latency without queueing)")
	flag.DurationVar(&cfg.duration, "duration", 20*time.Second, "measured time per path and concurrency, split evenly across the rounds")
	flag.DurationVar(&cfg.warmup, "warmup", time.Second, "unmeasured load per path before each concurrency's first round")
	flag.IntVar(&cfg.rounds, "rounds", 10, "interleaved rounds (each measures every path once; more and shorter rounds let a noisy neighbour's bursts hit every path alike)")
	flag.StringVar(&cfg.upstream, "upstream", "fixed", `upstream: "fixed" (a fixed-response JSON-RPC handler) or "sdk" (demo.OrdersHandler, stateless)`)
	paths := flag.String("paths", "direct,portcullis,nginx", "comma-separated paths to measure (direct, portcullis, transparent, baseline, nginx, relay; -baseline adds baseline; relay is a Go byte relay, the floor under any Go proxy; transparent is the portcullis proxy through --transparent-listen, the clients under portcullis run: root, and not with nginx or relay)")
	flag.StringVar(&cfg.portcullis, "portcullis", "", "the portcullis binary to run (default: go build ./cmd/portcullis into a temp dir)")
	flag.StringVar(&cfg.baseline, "baseline", "", "another portcullis binary to measure beside -portcullis, as the path \"baseline\" (before and after a change, in one run)")
	flag.StringVar(&cfg.nginx, "nginx", "/usr/sbin/nginx", "the nginx binary")
	flag.StringVar(&cfg.nginxWorkers, "nginx-workers", "auto", `nginx's worker_processes: "auto" (one per CPU) or a number (1: a single process, master_process off)`)
	flag.DurationVar(&cfg.idle, "idle", 2*time.Second, "how long the proxy and nginx sit idle after start before their memory is read")
	flag.BoolVar(&cfg.pins, "pins", true, `pin lookup_order's definition in the policy (the "fixed" upstream's; the proxy verifies it by listing the tools itself); -pins=false to compare with a binary older than pins`)
	flag.BoolVar(&cfg.binaries, "binaries", false, "name the load generator's binary in the policy, so the proxy looks each new client connection up in /proc (needs every process's fds readable)")
	flag.BoolVar(&cfg.json, "json", false, "print the results as JSON instead of a table")
	flag.StringVar(&cfg.cpuprofile, "cpuprofile", "", "write a CPU profile of the portcullis proxy process over the measurement to this file (through its --pprof-listen)")
	flag.StringVar(&cfg.memprofile, "memprofile", "", "write the portcullis proxy's allocation profile (since it started) to this file after the measurement")
	flag.StringVar(&cfg.ocsf, "ocsf", "", `run the "portcullis" path's proxy with an OCSF sink: "down" (a Splunk HEC URL on a closed port: every write refused, events dropped and counted) or "file" (--ocsf-file in its temp dir); compare with a run without`)
	child := flag.Bool("load-child", false, "run as the load generator (internal: the program starts itself so)")
	relay := flag.Bool("relay-child", false, "run as the relay path (internal: the program starts itself so)")
	flag.Parse()

	if *child {
		benchcli.Main("proxyload load generator", func(ctx context.Context) error { return loadChild(ctx, os.Stdin, os.Stdout) })
		return
	}
	if *relay {
		benchcli.Main("proxyload relay", func(context.Context) error { return byterelay.Child(os.Stdin, os.Stdout) })
		return
	}
	cfg.paths = strings.Split(*paths, ",")
	if cfg.baseline != "" && !slices.Contains(cfg.paths, pathBaseline) {
		cfg.paths = append(cfg.paths, pathBaseline)
	}
	benchcli.Main("proxyload", func(ctx context.Context) error {
		var err error
		if cfg.concurrency, err = parseConcurrency(*concurrency); err != nil {
			return err
		}
		return run(ctx, cfg, os.Stdout, os.Stderr)
	})
}
