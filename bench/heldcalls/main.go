// Command heldcalls measures held calls as users run them: one `portcullis
// gateway` (its defaults: embedded SQLite) and -proxies `portcullis proxy`
// processes, one per sandbox, each sandbox's policy holding every
// refund_order call for review. The program holds -calls calls at once
// (an agent's tools/call each, spread over the proxies), then an operator
// approves them through CallService, and it reports:
//
//   - approval → answer: from just before ApproveCall is sent to the
//     moment the agent's own request is answered with the server's result
//     (p50, p99, max); the target is p99 ≤ 50 ms;
//   - memory per held call: the proxies' resident memory with the calls
//     held, less the same proxies' before any was, divided by the calls;
//   - other traffic of the same sandboxes side by side: lookup_order calls
//     (no review) through the same proxies, with the calls held and
//     without, alternately; their latency and rate, and the ratio.
//
// Nothing here asserts a threshold; the targets are printed beside the
// figures. See README.md.
package main

import (
	"context"
	"flag"
	"os"
	"time"

	"github.com/portcullis-dev/portcullis/bench/internal/benchcli"
	"github.com/portcullis-dev/portcullis/bench/internal/benchenv"
	"github.com/portcullis-dev/portcullis/bench/internal/procs"
)

type config struct {
	bin         string
	proxies     int
	calls       int
	approvers   int
	sideClients int
	side        time.Duration
	rounds      int
	memCalls    int
	json        bool
}

func main() {
	var cfg config
	flag.StringVar(&cfg.bin, "portcullis", "", "the portcullis binary (default: go build ./cmd/portcullis)")
	flag.IntVar(&cfg.proxies, "proxies", 100, "proxies, one per sandbox")
	flag.IntVar(&cfg.calls, "calls", 1000, "calls held at once, spread evenly over the proxies (at most 16 a sandbox: the gateway's --max-held-calls default)")
	flag.IntVar(&cfg.approvers, "approvers", 1, "ApproveCall requests in flight at once (1: a person, or a script, approving one call after another; more measures the store's write queue too)")
	flag.IntVar(&cfg.sideClients, "side-clients", 16, "clients sending lookup_order calls in the side-by-side measurement")
	flag.DurationVar(&cfg.side, "side", 3*time.Second, "length of one side-by-side round")
	flag.IntVar(&cfg.rounds, "rounds", 3, "side-by-side rounds of each kind (with calls held, without), interleaved")
	flag.IntVar(&cfg.memCalls, "memory-calls", 200, "calls held on one proxy of its own for the memory slope (0: none); that proxy and the gateway allow this many (a proxy's calls share one gRPC connection, whose streams the gateway bounds at 250)")
	flag.BoolVar(&cfg.json, "json", false, "print the results as JSON instead of tables")
	flag.Parse()
	benchenv.RaiseFileLimit()
	benchcli.Main("heldcalls", func(ctx context.Context) error {
		switch {
		case cfg.proxies < 1 || cfg.proxies > 500:
			return benchcli.Usagef("-proxies must be 1..500")
		case cfg.calls < cfg.proxies || cfg.calls > 16*cfg.proxies:
			return benchcli.Usagef("-calls must be -proxies..16×-proxies (each sandbox holds 1 to 16)")
		case cfg.approvers < 1 || cfg.approvers > 256 || cfg.sideClients < 1 || cfg.sideClients > 256:
			return benchcli.Usagef("-approvers and -side-clients must be 1..256")
		case cfg.memCalls < 0 || cfg.memCalls == 1 || cfg.memCalls > 240:
			return benchcli.Usagef("-memory-calls must be 0 or 2..240")
		case cfg.rounds < 1 || cfg.side < 100*time.Millisecond:
			return benchcli.Usagef("-rounds must be at least 1 and -side at least 100ms")
		}
		dir, err := os.MkdirTemp("", "heldcalls-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		if cfg.bin == "" {
			if cfg.bin, err = procs.Build(ctx, dir); err != nil {
				return err
			}
		}
		r, err := run(ctx, cfg, dir)
		if err != nil {
			return err
		}
		if cfg.json {
			return benchcli.WriteJSON(os.Stdout, r)
		}
		r.print(os.Stdout)
		return nil
	})
}
