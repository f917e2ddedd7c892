// Command sentryload measures the gateway's Sentry intake end to end, as
// users run it: the shipped binary (go build ./cmd/portcullis, then
// portcullis gateway with its defaults) on a fresh Postgres database, and
// on SQLite. Watchdogs with sentry tokens POST batches of CloudEvents to
// /v1/sentry/events while 100 simulated proxies (one per sandbox) hold
// real policy streams. It measures:
//
//   - sustained ingest, beside a raw CopyFrom of the same rows into a
//     table of the same columns and indexes in the same run (Postgres);
//   - memory per 1,000 in-flight events (the gateway's live heap, read
//     from its GODEBUG=gctrace=1 lines, with N batches in flight);
//   - the quarantine lane: from POSTing a quarantine to the sandbox's
//     proxy ACKing the deny-all version, with no bulk ingest and with
//     bulk ingest at 80% of the measured maximum, from the client's side
//     and as the gateway records it (log, action row, histogram).
//
// Nothing here asserts a threshold; the goals are printed next to the
// figures. See README.md for the command and what each figure means.
package main

import (
	"context"
	"flag"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/portcullis-dev/portcullis/bench/internal/benchcli"
	"github.com/portcullis-dev/portcullis/bench/internal/benchenv"
)

func main() {
	cfg := config{}
	flag.StringVar(&cfg.binary, "binary", "", "a built portcullis binary to run; unset: go build ./cmd/portcullis into a temp dir (run from the repository's root)")
	flag.StringVar(&cfg.databaseURL, "database-url", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable", "a Postgres server: the gateway's store is a new database there, dropped at the end; empty: skip Postgres")
	flag.StringVar(&cfg.eventsURL, "events-database-url", "", "a second Postgres server for the Sentry events (gateway --sentry-database-url; a new database there, dropped at the end), where the raw COPY floor copies too; empty: the events stay in the gateway's store")
	flag.StringVar(&cfg.dbParams, "database-params", "", "query parameters added to the gateway's database URL, such as pool_max_conns=8 (default: none, the gateway's defaults)")
	flag.BoolVar(&cfg.sqlite, "sqlite", true, "also measure ingest and memory with the gateway on SQLite")
	flag.IntVar(&cfg.senders, "senders", 4, "watchdogs (sources) sending at once, one batch in flight each; also the raw COPY's streams")
	flag.IntVar(&cfg.batch, "batch", 1000, "events per batch")
	flag.DurationVar(&cfg.warmup, "warmup", 3*time.Second, "ingest before the first measured round")
	flag.DurationVar(&cfg.duration, "duration", 15*time.Second, "each measured ingest round")
	flag.IntVar(&cfg.rounds, "rounds", 2, "ingest rounds (each followed by the raw COPY floor on Postgres)")
	flag.IntVar(&cfg.floorRows, "floor-rows", 0, "rows the raw COPY floor copies per round (the first stored); 0: as many as the round stored, so that the floor writes as much as the intake did")
	inflight := flag.String("inflight", "1,16,48", "comma-separated batches kept in flight at once for the memory figure (the first is the base)")
	flag.DurationVar(&cfg.memDuration, "mem-duration", 8*time.Second, "how long each in-flight count runs")
	flag.IntVar(&cfg.sandboxes, "sandboxes", 100, "sandboxes, each with one connected simulated proxy")
	flag.IntVar(&cfg.quarantines, "quarantines", 100, "quarantines per round (distinct sandboxes; 0: skip the quarantine lane)")
	flag.DurationVar(&cfg.qInterval, "quarantine-interval", 200*time.Millisecond, "time between two quarantines")
	flag.Float64Var(&cfg.loadFraction, "load", 0.8, "bulk ingest during the loaded quarantine round, as a fraction of the measured maximum")
	flag.Float64Var(&cfg.loadRate, "load-rate", 0, "bulk ingest during the loaded quarantine round in events/s, instead of -load × the measured maximum (to compare gateways at one load)")
	flag.BoolVar(&cfg.findings, "findings", false, "the worst case: bulk events name a policy hash no proxy applied and the proxies ship no decision records, so the gateway flags every event (drift and unmediated); default: the events agree with the data plane")
	flag.BoolVar(&cfg.json, "json", false, "print the results as JSON instead of tables")
	gatewayLog := flag.String("gateway-log", "", "a file to copy the gateway's stderr into (its JSON log and gctrace), appended to")
	flag.Parse()

	benchenv.RaiseFileLimit()
	benchcli.Main("sentryload", func(ctx context.Context) error {
		for f := range strings.SplitSeq(*inflight, ",") {
			if f = strings.TrimSpace(f); f == "" {
				continue
			}
			n, err := strconv.Atoi(f)
			if err != nil {
				return benchcli.Usagef("-inflight: %q is not a number", f)
			}
			cfg.inflight = append(cfg.inflight, n)
		}
		if err := cfg.check(); err != nil {
			return err
		}
		if *gatewayLog != "" {
			f, err := os.OpenFile(*gatewayLog, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
			if err != nil {
				return benchcli.Usagef("-gateway-log: %v", err)
			}
			defer f.Close()
			cfg.gatewayLog = f
		}
		return run(ctx, cfg, os.Stdout, os.Stderr)
	})
}
