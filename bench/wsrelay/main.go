// Command wsrelay measures what the Portcullis proxy costs a WebSocket, as
// users run it: the shipped binary, `portcullis proxy --policy FILE` in
// its own process with its defaults, carrying a WebSocket to an echo
// upstream on 127.0.0.1 (github.com/coder/websocket) through a rest
// endpoint with websocket_credential_rewrite, against the same upstream
// reached directly. In one run, in interleaved rounds (so a noisy
// neighbour's drift hits both paths alike), it measures the echo
// round trip of 1 KiB text messages at one connection (p50, p99), the
// messages per second 16 connections echo, and the MiB/s of 64 KiB binary
// messages at one connection, and prints each path's figures and the
// portcullis/direct ratio.
//
// The proxy runs without a gateway, so it holds no credential: it reads
// every client message whole and checks it for placeholders, and
// rewrites none. The figures are that reading's cost.
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
	"github.com/portcullis-dev/portcullis/bench/internal/procs"
)

// config is what the flags ask for.
type config struct {
	portcullis string
	duration   time.Duration // measured time, all scenarios and paths
	warmup     time.Duration // per path and scenario, before the rounds
	rounds     int
	conns      int // connections of the throughput scenario
	json       bool
	cpuprofile string
	paths      []string
}

func main() {
	cfg := config{}
	flag.StringVar(&cfg.portcullis, "portcullis", "", "the portcullis binary to run (default: go build ./cmd/portcullis into a temp dir)")
	flag.DurationVar(&cfg.duration, "duration", 20*time.Second, "measured time in all: split evenly across the three scenarios, the two paths and the rounds")
	flag.DurationVar(&cfg.warmup, "warmup", 300*time.Millisecond, "unmeasured load per path and scenario before the first round")
	flag.IntVar(&cfg.rounds, "rounds", 5, "interleaved rounds (each measures every scenario on both paths, in alternating order)")
	flag.IntVar(&cfg.conns, "conns", 16, "WebSocket connections of the throughput scenario (1 KiB text)")
	flag.StringVar(&cfg.cpuprofile, "cpuprofile", "", "write a CPU profile of the proxy process over the rounds to this file (through its --pprof-listen)")
	flag.BoolVar(&cfg.json, "json", false, "print the results as JSON instead of a table")
	paths := flag.String("paths", "direct,portcullis,relay", "comma-separated paths, direct first: direct, portcullis, relay (a byte relay in a process of its own: the floor under any proxy's hop)")
	relay := flag.Bool("relay-child", false, "run as the relay path (internal: the program starts itself so)")
	flag.Parse()
	if *relay {
		benchcli.Main("wsrelay relay", func(context.Context) error { return byterelay.Child(os.Stdin, os.Stdout) })
		return
	}
	cfg.paths = strings.Split(*paths, ",")
	benchcli.Main("wsrelay", func(ctx context.Context) error {
		switch {
		case len(cfg.paths) < 2 || cfg.paths[0] != pathDirect || !slices.Contains(cfg.paths, pathPortcullis):
			return benchcli.Usagef("-paths must start with direct and hold portcullis")
		case !validPaths(cfg.paths):
			return benchcli.Usagef("-paths: each of direct, portcullis and relay at most once")
		case cfg.rounds < 1 || cfg.rounds > 100:
			return benchcli.Usagef("-rounds must be within 1 and 100")
		case cfg.duration < time.Second || cfg.duration > 30*time.Minute:
			return benchcli.Usagef("-duration must be within 1s and 30m")
		case cfg.warmup < 0 || cfg.warmup > time.Minute:
			return benchcli.Usagef("-warmup must be within 0 and 1m")
		case cfg.conns < 1 || cfg.conns > 1024:
			return benchcli.Usagef("-conns must be within 1 and 1024")
		}
		dir, err := os.MkdirTemp("", "wsrelay-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		if cfg.portcullis == "" {
			if cfg.portcullis, err = procs.Build(ctx, dir); err != nil {
				return err
			}
		}
		return run(ctx, cfg, dir)
	})
}

// validPaths: every name a path's, none twice.
func validPaths(names []string) bool {
	seen := map[string]bool{}
	for _, n := range names {
		if seen[n] || (n != pathDirect && n != pathPortcullis && n != pathRelay) {
			return false
		}
		seen[n] = true
	}
	return true
}
