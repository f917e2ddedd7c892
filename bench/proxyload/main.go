// Command proxyload measures what the Portcullis proxy costs an MCP agent:
// it drives MCP tools/call requests at one upstream over three paths in the
// same run — directly, through the enforcing Portcullis proxy (in process),
// and through nginx (a child process) as the reverse-proxy baseline — and
// reports req/s, p50 and p99 for each, and the ratios between them.
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
	"strings"
	"time"

	"github.com/portcullis-dev/portcullis/bench/internal/benchcli"
)

func main() {
	cfg := config{}
	flag.IntVar(&cfg.concurrency, "concurrency", 16, "concurrent keep-alive clients per path")
	flag.DurationVar(&cfg.duration, "duration", 5*time.Second, "measured time per path, split evenly across the rounds")
	flag.DurationVar(&cfg.warmup, "warmup", time.Second, "unmeasured load per path before the first round")
	flag.IntVar(&cfg.rounds, "rounds", 3, "interleaved rounds (each measures every path once)")
	flag.StringVar(&cfg.upstream, "upstream", "fixed", `upstream: "fixed" (a fixed-response JSON-RPC handler) or "sdk" (demo.OrdersHandler, stateless)`)
	paths := flag.String("paths", "direct,portcullis,nginx", "comma-separated paths to measure (direct, portcullis, nginx)")
	flag.StringVar(&cfg.callerBinary, "caller-binary", "proc", `the proxy's CallerBinary: "proc" (the default /proc lookup, once per new client connection) or "stub" (a fixed path, no /proc)`)
	flag.StringVar(&cfg.nginx, "nginx", "/usr/sbin/nginx", "the nginx binary")
	flag.IntVar(&cfg.nginxWorkers, "nginx-workers", 1, "nginx worker processes (1: a single process, master_process off)")
	flag.BoolVar(&cfg.json, "json", false, "print the results as JSON instead of a table")
	flag.StringVar(&cfg.cpuprofile, "cpuprofile", "", "write a CPU profile of the measured rounds to this file")
	flag.StringVar(&cfg.memprofile, "memprofile", "", "write an allocation profile (after the measured rounds) to this file")
	flag.Parse()
	cfg.paths = strings.Split(*paths, ",")

	benchcli.Main("proxyload", func(ctx context.Context) error { return run(ctx, cfg, os.Stdout, os.Stderr) })
}
