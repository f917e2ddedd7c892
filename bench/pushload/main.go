// Command pushload measures the gateway's policy push fan-out: N simulated
// proxies hold real StreamPolicy gRPC streams over loopback to one
// in-process gateway; the program commits a new policy version and times
// how long every stream takes to receive and ACK it. It also measures the
// gateway's memory per idle stream, and, in the same run, a floor: the
// same process writing the same number of bytes to N plain TCP
// connections, each answered with one byte.
//
// The gateway runs in this process; the simulated proxies run in a child
// process (this binary re-executed with -clients), so the gateway's heap
// and stacks per stream are measured without the clients' own.
//
// Nothing here asserts a timing threshold; the targets are printed next to
// the figures. See README.md for the command and what each figure means.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/portcullis-dev/portcullis/bench/internal/benchcli"
	"github.com/portcullis-dev/portcullis/bench/internal/benchenv"
)

func main() {
	cfg := config{}
	counts := flag.String("n", "100,1000,10000", "comma-separated stream counts to measure")
	shares := flag.String("share", "100,1", "comma-separated streams per HTTP/2 connection to measure (1: one connection per stream; at most 250, the gateway's stream limit per connection)")
	flag.IntVar(&cfg.commits, "commits", 5, "measured commits per stream count and mode")
	flag.DurationVar(&cfg.settle, "settle", time.Second, "pause after connecting and between commits (lets the gateway's 250 ms status flush of the last ACKs finish)")
	flag.DurationVar(&cfg.timeout, "timeout", 2*time.Minute, "longest wait for one phase (connect, one push) before giving up")
	flag.IntVar(&cfg.dialConcurrency, "connect-concurrency", 256, "streams the clients open at once while connecting")
	flag.StringVar(&cfg.databaseURL, "database-url", "", "a Postgres server (postgres://…/postgres): the gateway's store is a new database there, dropped at the end; unset: SQLite in a temp dir")
	flag.BoolVar(&cfg.baseline, "baseline", true, "also measure the plain-TCP floor for each stream count")
	flag.BoolVar(&cfg.json, "json", false, "print the results as JSON instead of tables")
	flag.StringVar(&cfg.cpuprofile, "cpuprofile", "", "write a CPU profile of each stream count and mode's commits to FILE with -nN-shareS inserted before the extension")
	flag.StringVar(&cfg.memprofile, "memprofile", "", "write a heap profile of the gateway with each stream count and mode's streams idle to FILE with -nN-shareS inserted")
	rolling := flag.Bool("rolling", false, "measure a rolling restart of -replicas replicas (Postgres: needs -database-url) under -rolling-n proxies that follow the fleet, instead of the fan-out")
	rollingN := flag.Int("rolling-n", 1000, "with -rolling: simulated proxies")
	replicas := flag.Int("replicas", 3, "with -rolling: gateway replicas")
	interval := flag.Duration("rolling-interval", 250*time.Millisecond, "with -rolling: a policy version is committed this often during the restart")
	// The child process: the simulated proxies.
	clients := flag.Bool("clients", false, "internal: run as the simulated proxies (driven over stdin/stdout)")
	gatewayAddr := flag.String("gateway", "", "internal: with -clients, the gateway's host:port")
	sandbox := flag.String("sandbox", "", "internal: with -clients, the sandbox")
	flag.Parse()

	benchenv.RaiseFileLimit()
	if *clients {
		// The token comes through the environment, not the command line.
		token := os.Getenv(tokenEnv)
		if err := runClients(*gatewayAddr, *sandbox, token, os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "pushload clients:", err)
			os.Exit(1)
		}
		return
	}

	benchcli.Main("pushload", func(ctx context.Context) error {
		var err error
		if cfg.counts, err = parseInts("-n", *counts); err != nil {
			return err
		}
		if cfg.shares, err = parseInts("-share", *shares); err != nil {
			return err
		}
		if err := cfg.check(); err != nil {
			return err
		}
		if *rolling {
			switch {
			case *rollingN < 1 || *rollingN > maxStreams:
				return benchcli.Usagef("-rolling-n must be 1..%d", maxStreams)
			case *replicas < 2 || *replicas > 10:
				return benchcli.Usagef("-replicas must be 2..10")
			case *interval < 10*time.Millisecond || *interval > time.Minute:
				return benchcli.Usagef("-rolling-interval must be 10ms..1m")
			}
			return runRolling(ctx, cfg, *rollingN, *replicas, *interval, os.Stdout, os.Stderr)
		}
		return run(ctx, cfg, os.Stdout, os.Stderr)
	})
}
