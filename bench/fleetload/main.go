// Command fleetload is load with faults: three real gateway replicas
// (the shipped `portcullis gateway` binary) on one Postgres database,
// 1,000 simulated proxies spread over them, a control-plane workload of
// proposals, approvals and policy sets sent through the replicas, and a
// replica killed with SIGKILL (and restarted) every minute. It reports,
// per minute, the operations acknowledged and failed, the push p99 of the
// policy sets, the proxies that reconnected and how long after each kill
// every proxy was back on its sandbox's current version; and, at the end,
// the changes acknowledged against those found in the history (LOST must
// be 0) and the older versions proxies were offered (regressions, 0).
//
// The simulated proxies run in a child process (this binary re-executed
// with -proxies-child), so the replicas' and the workload's CPU is not
// theirs. See README.md for the command and what each figure means.
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
	flag.StringVar(&cfg.binary, "binary", "", "a built portcullis binary to run; unset: go build ./cmd/portcullis into a temp dir (run from the repository's root)")
	flag.StringVar(&cfg.databaseURL, "database-url", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable", "the Postgres server: the replicas' store is a new database there, dropped at the end")
	flag.StringVar(&cfg.dbParams, "database-params", "", "query parameters added to the replicas' database URL, such as pool_max_conns=24 (default: none, the gateway's defaults)")
	flag.IntVar(&cfg.replicas, "replicas", 3, "gateway replicas on the one database")
	flag.IntVar(&cfg.proxies, "proxies", 1000, "simulated proxies, spread evenly over the fleet sandboxes and, at first, round-robin over the replicas")
	flag.IntVar(&cfg.fleetSandboxes, "fleet-sandboxes", 100, "sandboxes the proxies belong to; the policy sets go round-robin over them")
	flag.IntVar(&cfg.sandboxes, "sandboxes", 500, "sandboxes in all (the fleet's first, then sandboxes without proxies): the proposals go round-robin over all of them, so that none exceeds the gateway's proposal rate limit (20 per sandbox in 10 minutes)")
	flag.Float64Var(&cfg.opsRate, "ops", 50, "proposal and approval operations per second (each proposal is followed by its approval: half the rate is proposals)")
	flag.DurationVar(&cfg.setEvery, "set-every", time.Second, "time between two policy sets")
	flag.DurationVar(&cfg.duration, "duration", 5*time.Minute, "how long the workload runs")
	flag.DurationVar(&cfg.killEvery, "kill-every", time.Minute, "time between two kills (SIGKILL, then a restart) of a replica, a different one each time; the first comes half of it after the start; 0: none")
	flag.DurationVar(&cfg.timeout, "timeout", 2*time.Minute, "longest wait for the proxies to connect, and to end on their sandboxes' last versions")
	flag.BoolVar(&cfg.json, "json", false, "print the results as JSON instead of tables")
	flag.StringVar(&cfg.timeline, "timeline", "", "write every proxy's timeline, every operation, the kills and the history's versions to FILE (JSON), to look into a figure")
	child := flag.Bool("proxies-child", false, "internal: run as the simulated proxies (driven over stdin/stdout)")
	flag.Parse()

	benchenv.RaiseFileLimit()
	if *child {
		if err := runChild(os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "fleetload proxies:", err)
			os.Exit(1)
		}
		return
	}
	benchcli.Main("fleetload", func(ctx context.Context) error {
		if err := cfg.check(); err != nil {
			return err
		}
		return run(ctx, cfg, os.Stdout, os.Stderr)
	})
}
