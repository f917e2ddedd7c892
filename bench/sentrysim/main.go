// Command sentrysim sends realistic watchdog event streams to a gateway's
// HTTP intake (POST /v1/sentry/events, batches every 100 ms), for tests,
// demos and load: tool_access, policy_decision, identity_check and
// heartbeat events about the sandboxes of -sandboxes, each source
// numbering its events from 1. Like real senders it delivers at least
// once and not in order: about 3% of events are sent twice, each batch is
// shuffled, and about 1% are held back for 2 seconds, leaving gaps that
// close when they arrive.
//
// The token: -token-file F holds either one sentry token (then -source
// names its source, the token's name) or lines "SOURCE TOKEN", one per
// watchdog (-sources K uses the first K). -token and PORTCULLIS_TOKEN work
// as in the portcullis CLI, with -source; -gateway (default
// PORTCULLIS_GATEWAY, else http://127.0.0.1:7070) is the gateway.
//
// -rate is events a second across all sources; -quarantine SANDBOX sends
// one quarantine (processing remediate) for that sandbox half-way through,
// from the first source, which freezes it unless the gateway runs with
// --sentry-dry-run or its --quarantine-budget is spent.
//
// Progress goes to stderr every second; the summary per source (sent,
// stored, duplicates, refused, acknowledged sequence, gaps left) to
// stdout, or {"sources": [...]} with -o json. A mistake in the flags
// exits 2, a run that could not start 1.
//
//	portcullis token create --role sentry --name urn:dpu:node-17 -o json | jq -r .token > node-17.token
//	go run ./bench/sentrysim -token-file node-17.token -source urn:dpu:node-17 -rate 500 -duration 30s -quarantine orders
//	go run ./bench/sentrysim -token-file watchdogs.txt -sources 4 -rate 2000 -duration 1m
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/portcullis-dev/portcullis/bench/internal/benchcli"
	"github.com/portcullis-dev/portcullis/gateway"
)

// The portcullis CLI's environment variables, read the same way.
const (
	envGateway     = "PORTCULLIS_GATEWAY"
	envToken       = "PORTCULLIS_TOKEN"
	defaultGateway = "http://127.0.0.1:7070"
)

func main() {
	benchcli.Main("sentrysim", func(ctx context.Context) error {
		return run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	})
}

// options are the flags beyond what the streams need (config).
type options struct {
	gateway, token, tokenFile, output, sandboxes string
}

// run parses args, sends the streams and prints the summary.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cfg := config{duplicateShare: 0.03, lateShare: 0.01, lateBy: 2 * time.Second}
	var o options
	fs := flag.NewFlagSet("sentrysim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.gateway, "gateway", "", "the gateway's `URL` (default $"+envGateway+", else "+defaultGateway+")")
	fs.StringVar(&o.token, "token", "", "a sentry `TOKEN` (default $"+envToken+")")
	fs.StringVar(&o.tokenFile, "token-file", "", "`FILE` holding one sentry token, or \"SOURCE TOKEN\" lines")
	fs.StringVar(&o.output, "o", "text", "summary `FORMAT`: text or json")
	fs.IntVar(&cfg.rate, "rate", 100, "events a second, across all sources")
	fs.DurationVar(&cfg.duration, "duration", 10*time.Second, "how long to send")
	fs.IntVar(&cfg.sources, "sources", 0, "use the first `K` sources of a \"SOURCE TOKEN\" token file (default all)")
	fs.StringVar(&cfg.source, "source", "", "the `SOURCE` of a single token (the token's name)")
	fs.StringVar(&cfg.quarantine, "quarantine", "", "send one quarantine (remediate) for `SANDBOX` half-way through")
	fs.StringVar(&o.sandboxes, "sandboxes", "", "comma-separated `SANDBOXES` the events are about (default the -quarantine sandbox, or sandbox-1)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return benchcli.Usagef("%v", err)
	}
	switch {
	case fs.NArg() > 0:
		return benchcli.Usagef("unexpected argument %q", fs.Arg(0))
	case o.output != "text" && o.output != "json":
		return benchcli.Usagef("-o %q: want text or json", o.output)
	case cfg.rate < 1 || cfg.rate > 1_000_000:
		return benchcli.Usagef("-rate must be from 1 to 1000000 events a second, got %d", cfg.rate)
	case cfg.duration <= 0:
		return benchcli.Usagef("-duration must be positive, got %s", cfg.duration)
	}
	for _, s := range strings.Split(o.sandboxes, ",") {
		if s = strings.TrimSpace(s); s != "" {
			cfg.sandboxes = append(cfg.sandboxes, s)
		}
	}
	if len(cfg.sandboxes) == 0 {
		cfg.sandboxes = []string{cmp.Or(cfg.quarantine, "sandbox-1")}
	}
	srcs, err := o.sources(cfg, getenv)
	if err != nil {
		return err
	}
	raw := cmp.Or(o.gateway, getenv(envGateway), defaultGateway)
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return benchcli.Usagef("gateway %q is not an http:// or https:// URL", raw)
	}
	tallies := simulate(ctx, stderr, u.JoinPath(gateway.SentryEventsPath).String(), srcs, cfg)
	if o.output == "json" {
		return benchcli.WriteJSON(stdout, map[string]any{"sources": tallies})
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SOURCE\tSENT\tSTORED\tDUPLICATES\tREFUSED\tACKED\tGAPS\tQUARANTINES\tFAILED REQUESTS")
	for _, t := range tallies {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%s\t%d\t%d\n", quoted(t.Source), t.Sent, t.Stored, t.Duplicates, t.Refused,
			t.AckedSequence, gapsCell(t.Gaps), t.Quarantines, t.Failures)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, t := range tallies {
		if t.FirstRefusal != "" {
			fmt.Fprintf(stderr, "%s: first refusal: %s\n", quoted(t.Source), t.FirstRefusal)
		}
	}
	return nil
}

// gapsCell is gaps as "6-7, 10", or "none".
func gapsCell(gaps [][2]uint64) string {
	if len(gaps) == 0 {
		return "none"
	}
	var parts []string
	for _, g := range gaps {
		if g[0] == g[1] {
			parts = append(parts, fmt.Sprint(g[0]))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", g[0], g[1]))
		}
	}
	return strings.Join(parts, ", ")
}

// quoted is s, quoted when it holds a space, a quote or an unprintable
// character, so a table row stays one row of fields.
func quoted(s string) string {
	for _, c := range s {
		if c == '"' || c == '\\' || unicode.IsSpace(c) || !unicode.IsPrint(c) {
			return strconv.Quote(s)
		}
	}
	return s
}

// sources reads the watchdogs to simulate from the token options.
func (o options) sources(cfg config, getenv func(string) string) ([]source, error) {
	switch {
	case o.token != "" && o.tokenFile != "":
		return nil, benchcli.Usagef("give -token or -token-file, not both")
	case o.tokenFile == "":
		return single(cfg, strings.TrimSpace(cmp.Or(o.token, getenv(envToken))))
	}
	data, err := os.ReadFile(o.tokenFile)
	if err != nil {
		return nil, benchcli.Usagef("read token file: %v", err)
	}
	var pairs []source
	var lone []string
	for i, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) == 0 || strings.HasPrefix(f[0], "#"):
		case len(f) == 1:
			lone = append(lone, f[0])
		case len(f) == 2:
			pairs = append(pairs, source{name: f[0], token: f[1]})
		default:
			return nil, benchcli.Usagef("token file %s line %d: want a token, or SOURCE TOKEN", o.tokenFile, i+1)
		}
	}
	switch {
	case len(pairs) > 0 && len(lone) > 0:
		return nil, benchcli.Usagef("token file %s mixes lone tokens and SOURCE TOKEN lines", o.tokenFile)
	case len(pairs) > 0:
		if cfg.source != "" {
			return nil, benchcli.Usagef("-source: the token file names each token's source")
		}
		if cfg.sources > len(pairs) {
			return nil, benchcli.Usagef("-sources %d: the token file has %d", cfg.sources, len(pairs))
		}
		if cfg.sources > 0 {
			pairs = pairs[:cfg.sources]
		}
		return pairs, nil
	case len(lone) > 1:
		return nil, benchcli.Usagef("token file %s has %d tokens: write them as SOURCE TOKEN lines", o.tokenFile, len(lone))
	case len(lone) == 0:
		return nil, benchcli.Usagef("token file %s is empty", o.tokenFile)
	}
	return single(cfg, lone[0])
}

// single is the one source a lone token stands for.
func single(cfg config, token string) ([]source, error) {
	switch {
	case cfg.source == "":
		return nil, benchcli.Usagef("-source is required with a single token: the token's name")
	case cfg.sources > 1:
		return nil, benchcli.Usagef("-sources %d needs a token file of SOURCE TOKEN lines", cfg.sources)
	case token == "":
		return nil, benchcli.Usagef("give the sentry token with -token-file (or -token, or %s)", envToken)
	}
	return []source{{name: cfg.source, token: token}}, nil
}
