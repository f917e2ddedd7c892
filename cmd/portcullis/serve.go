//go:build !proxyonly

package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/spf13/cobra"

	"github.com/portcullis-dev/portcullis/gateway"
	"github.com/portcullis-dev/portcullis/gateway/sentryintake"
	"github.com/portcullis-dev/portcullis/gateway/transport"
	"github.com/portcullis-dev/portcullis/internal/ocsf"
	"github.com/portcullis-dev/portcullis/lifecycle"
	"github.com/portcullis-dev/portcullis/store"
)

// Environment variables read by the server commands.
const (
	envBootstrapToken = "PORTCULLIS_BOOTSTRAP_TOKEN"
	envWebhookSecret  = "PORTCULLIS_WEBHOOK_SECRET"

	defaultListen  = "127.0.0.1:7070"
	defaultDataDir = "./portcullis-data"
)

// storeFlags are the flags that choose and locate the store.
type storeFlags struct {
	databaseURL string
	dataDir     string
}

func (f *storeFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.databaseURL, "database-url", "", "Postgres URL (postgres://…); unset: embedded SQLite in --data-dir (env "+envDatabaseURL+")")
	cmd.Flags().StringVar(&f.dataDir, "data-dir", defaultDataDir, "directory of the embedded SQLite database")
}

// config is the store the flags, or PORTCULLIS_DATABASE_URL, name.
func (f *storeFlags) config(env *environment, log *slog.Logger) gateway.StoreConfig {
	url := f.databaseURL
	if url == "" {
		url = env.getenv(envDatabaseURL)
	}
	return gateway.StoreConfig{DatabaseURL: url, DataDir: f.dataDir, Logger: log}
}

// newGatewayCmd is `portcullis gateway`.
func newGatewayCmd(env *environment) *cobra.Command {
	var f gatewayFlags
	cmd := &cobra.Command{
		Use:   "gateway",
		Short: "Run the gateway (API, console, health and metrics on one port)",
		Long: `Run the Portcullis gateway.

Without --database-url the gateway keeps its state in an embedded SQLite
database under --data-dir. On the first start against an empty store it
creates an admin token (PORTCULLIS_BOOTSTRAP_TOKEN if set) and prints it once.

Logs are JSON on stderr; PORTCULLIS_LOG_FORMAT=text for text,
PORTCULLIS_LOG_LEVEL=debug|info|warn|error for the level (default info;
debug logs every RPC).

With --webhook-url, the gateway calls that URL (Slack-compatible JSON) when
a proposal needs a human or is decided, a call is held or decided, and a
quarantine is held; each links to the console at --external-url. With
--audit-webhook-url (an archive, not a chat channel) it calls that URL
whenever the audit head moves. Each call is signed with
PORTCULLIS_WEBHOOK_SECRET (header X-Portcullis-Signature: sha256=HMAC of
"timestamp.body", timestamp in X-Portcullis-Timestamp).

Decision records proxies ship are bounded: each sandbox may ship
--decision-rate records a second (bursts of --decision-burst; records
beyond are dropped and counted in proxies list and /metrics), and a sweep
deletes records older than --decision-max-age and each sandbox's records
past its newest --decision-max-per-sandbox. Denials a proposal names are
never deleted.

Sentry events (watchdogs POST them to /v1/sentry/events with a sentry
token) are kept --sentry-retention, by whole days. A remediating one (a
quarantine or boundary_breach with processing remediate) freezes its
sandbox, but at most --quarantine-budget sandboxes per five minutes, and
at most --quarantine-budget-per-source of them from one source: past
either, quarantines are held for an operator (portcullis sentry actions,
portcullis sentry decide); a source past its own budget holds only its
own quarantines. A sentry token created with --sandboxes may report on,
and quarantine, only the sandboxes its globs match. With --sentry-dry-run nothing is frozen; what
would have been is recorded (status dry_run).

--dev-allow-loopback (demos and tests only) proves proposals and drafts them
from denials as for proxies run with --dev-allow-loopback: a denied call to
an MCP server on this machine becomes an ordinary proposal. Without it a
loopback upstream is always denied, and a proposal for it changes nothing.`,
		Example: `  portcullis gateway
  PORTCULLIS_DATABASE_URL=postgres://postgres@127.0.0.1:5432/portcullis portcullis gateway --listen 0.0.0.0:7070 --tls-cert c.pem --tls-key k.pem
  portcullis gateway --quarantine-budget 3 --sentry-retention 168h
  portcullis gateway --sentry-dry-run
  portcullis gateway --dev-allow-loopback    # the README's walk: the demo MCP server on 127.0.0.1`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			env.started = true
			return runGateway(cmd.Context(), env, &f)
		},
	}
	f.add(cmd)
	return cmd
}

// gatewayFlags are portcullis gateway's flags.
type gatewayFlags struct {
	store                                                storeFlags
	tracing                                              tracingFlags // --otlp-endpoint (tracing.go)
	listen, tlsCert, tlsKey, secretsKey                  string
	insecure, devLoopback                                bool
	metricsListen, webhookURL, auditWebhook, externalURL string
	decisions                                            decisionFlags
	maxHeldCalls                                         int
	heldCallRetention                                    time.Duration
	sentry                                               sentryFlags
	ocsf                                                 ocsfFlags
}

func (f *gatewayFlags) add(cmd *cobra.Command) {
	fl := cmd.Flags()
	f.store.add(cmd)
	f.tracing.add(cmd)
	fl.StringVar(&f.listen, "listen", defaultListen, "API address; a non-loopback plaintext address needs --insecure")
	fl.StringVar(&f.tlsCert, "tls-cert", "", "TLS certificate file (PEM)")
	fl.StringVar(&f.tlsKey, "tls-key", "", "TLS private key file (PEM)")
	fl.BoolVar(&f.insecure, "insecure", false, "allow plaintext on a non-loopback --listen address")
	fl.BoolVar(&f.devLoopback, "dev-allow-loopback", false, "prove and draft proposals as for proxies run with --dev-allow-loopback (demos and tests only)")
	fl.StringVar(&f.metricsListen, "metrics-listen", "", "also serve /metrics without a token on this (loopback) address")
	fl.StringVar(&f.webhookURL, "webhook-url", "", "call this `URL` when a proposal needs a human or is decided (signed with env "+envWebhookSecret+")")
	fl.StringVar(&f.auditWebhook, "audit-webhook-url", "", "call this `URL` whenever the audit head moves: an archive, not a chat channel (signed with env "+envWebhookSecret+")")
	f.ocsf.add(cmd)
	fl.StringVar(&f.secretsKey, "secrets-key-file", "", "`FILE` holding the key credential providers' secrets are sealed with (one line of base64 of 32 random bytes, mode 600; every replica the same); unset: <data-dir>/"+gateway.SecretsKeyFile+", made on first start (SQLite only)")
	fl.StringVar(&f.externalURL, "external-url", "", "the gateway's `URL` as people reach it, for the console links in webhook messages (default: http(s)://--listen)")
	f.decisions.add(cmd)
	fl.IntVar(&f.maxHeldCalls, "max-held-calls", lifecycle.DefaultMaxHeldCalls, "calls a sandbox may hold for review at once; past it a call is refused at once (review_busy)")
	fl.DurationVar(&f.heldCallRetention, "held-call-retention", lifecycle.DefaultHeldCallRetention, "keep a decided held call's arguments this long (its digest is kept)")
	f.sentry.add(cmd)
}

// runGateway is portcullis gateway: the flags and environment mapped to
// the gateway process's RunConfig, and gateway.Run, which opens, serves
// and closes everything, until ctx ends.
func runGateway(ctx context.Context, env *environment, f *gatewayFlags) error {
	cfg, err := f.config(env)
	if err != nil {
		return err
	}
	banner := gateway.Banner{DevLoopback: f.devLoopback, SuppliedToken: cfg.Server.BootstrapToken != "", TokenVariable: envBootstrapToken,
		TLS: f.tlsCert != "", OCSF: f.ocsf.describe()}
	cfg.Started = func(s gateway.Started) { banner.Write(env.stdout, s) }
	return settingAsUsage(gateway.Run(ctx, cfg))
}

// config maps the flags and the environment to the process's RunConfig
// (its Check, which Run calls first, refuses what cannot work before
// anything is opened).
func (f *gatewayFlags) config(env *environment) (gateway.RunConfig, error) {
	cfg := gateway.RunConfig{Explicit: true} // the flags' defaults are the gateway's
	log, err := newLogger(env)
	if err != nil {
		return cfg, err
	}
	if cfg.Tracing, err = f.tracing.config(env, "portcullis-gateway", buildVersion()); err != nil {
		return cfg, err
	}
	f.ocsf.name(env, "portcullis-gateway")
	if cfg.OCSF, err = f.ocsf.sinks(ocsf.Gateway, log); err != nil {
		return cfg, err
	}
	cfg.Store = f.store.config(env, log)
	cfg.SentryDatabaseURL, cfg.SecretsKeyFile = f.sentry.url(env), f.secretsKey
	cfg.Server = gateway.Config{
		Listen:           f.listen,
		TLSCertFile:      f.tlsCert,
		TLSKeyFile:       f.tlsKey,
		Insecure:         f.insecure,
		MetricsListen:    f.metricsListen,
		DevAllowLoopback: f.devLoopback,
		BootstrapToken:   env.getenv(envBootstrapToken),
		Logger:           log,
		WebhookURL:       f.webhookURL,
		AuditWebhookURL:  f.auditWebhook,
		WebhookSecret:    env.getenv(envWebhookSecret),
		ExternalURL:      f.externalURL,

		DecisionMaxAge:        f.decisions.maxAge,
		DecisionMaxPerSandbox: f.decisions.maxPerSandbox,
		DecisionRate:          f.decisions.rate,
		DecisionBurst:         f.decisions.burst,

		SentryDryRun:              f.sentry.dryRun,
		QuarantineBudget:          f.sentry.quarantineBudget,
		QuarantineBudgetPerSource: f.sentry.quarantineBudgetPerSource,
		SentryRetention:           f.sentry.retention,
		SentryMaxAge:              f.sentry.maxAge,
		MaxHeldCalls:              f.maxHeldCalls, HeldCallRetention: f.heldCallRetention,
	}
	return cfg, nil
}

// settingAsUsage reports a setting the gateway cannot work with as a
// usage error (exit 2), as the flags' own checks are.
func settingAsUsage(err error) error {
	if _, ok := errors.AsType[*gateway.SettingError](err); ok {
		return asUsage(err)
	}
	return err
}

// decisionFlags bound the decision records the gateway stores.
type decisionFlags struct {
	maxAge        time.Duration
	maxPerSandbox int
	rate          float64
	burst         int
}

func (f *decisionFlags) add(cmd *cobra.Command) {
	cmd.Flags().DurationVar(&f.maxAge, "decision-max-age", 7*24*time.Hour,
		"delete decision records received longer ago than this (a negative value keeps them forever); denials a proposal names are kept")
	cmd.Flags().IntVar(&f.maxPerSandbox, "decision-max-per-sandbox", 100_000,
		"keep at most this many of each sandbox's newest decision records, ~1.2 KB each (negative: no bound); denials a proposal names are kept")
	cmd.Flags().Float64Var(&f.rate, "decision-rate", 100,
		"allowed decision records a sandbox may ship a second, on average, and as many denials (negative: no limit); records beyond it are summarised (one record a kind, with its count) and counted in proxies list and /metrics")
	cmd.Flags().IntVar(&f.burst, "decision-burst", 2000,
		"allowed decision records a sandbox may ship at once, above --decision-rate, and as many denials (at least 10)")
}

// sentryFlags set what the gateway does with Sentry events.
type sentryFlags struct {
	dryRun                    bool
	quarantineBudget          int
	quarantineBudgetPerSource int
	retention, maxAge         time.Duration
	databaseURL               string
}

func (f *sentryFlags) add(cmd *cobra.Command) {
	cmd.Flags().BoolVar(&f.dryRun, "sentry-dry-run", false,
		"freeze nothing on Sentry quarantines; record what would have been frozen (status dry_run)")
	cmd.Flags().IntVar(&f.quarantineBudget, "quarantine-budget", sentryintake.DefaultQuarantineBudget,
		"sandboxes Sentry events may freeze per five minutes; past it quarantines are held for an operator (negative: no budget)")
	cmd.Flags().IntVar(&f.quarantineBudgetPerSource, "quarantine-budget-per-source", sentryintake.DefaultQuarantineBudgetPerSource,
		"sandboxes one Sentry source may freeze per five minutes; past it that source's quarantines are held for an operator and the others' still freeze (negative: no budget per source)")
	cmd.Flags().DurationVar(&f.maxAge, "sentry-max-age", sentryintake.DefaultMaxAge, "act on no Sentry quarantine whose own time is older than this (or over a minute ahead): record it as stale (negative: no check)")
	cmd.Flags().DurationVar(&f.retention, "sentry-retention", sentryintake.DefaultRetention,
		"delete Sentry events received longer ago than this, by whole days (a negative value keeps them forever)")
	cmd.Flags().StringVar(&f.databaseURL, "sentry-database-url", "",
		"Postgres URL (postgres://…) of a database of its own for the Sentry events, best on another server: bulk ingest then shares no connections or write-ahead log with the freezes it triggers; unset: the gateway's store (env "+envSentryDBURL+")")
}

// url is the Sentry events' own database the flag, or
// PORTCULLIS_SENTRY_DATABASE_URL, names ("": the gateway's store).
func (f *sentryFlags) url(env *environment) string {
	return cmp.Or(f.databaseURL, env.getenv(envSentryDBURL))
}

// newMigrateCmd is `portcullis migrate`.
func newMigrateCmd(env *environment) *cobra.Command {
	var sf storeFlags
	var dryRun bool
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Apply pending database migrations and exit (--dry-run: list them, apply none)",
		Example: `  portcullis migrate --dry-run --database-url postgres://postgres@127.0.0.1:5432/portcullis
  portcullis migrate --database-url postgres://postgres@127.0.0.1:5432/portcullis`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			env.started = true
			log, err := newCommandLogger(env)
			if err != nil {
				return err
			}
			pending, where, err := gateway.PendingMigrations(cmd.Context(), sf.config(env, log))
			verb := "would apply"
			switch {
			case err != nil:
				return settingAsUsage(err)
			case len(pending) == 0:
				fmt.Fprintf(env.stdout, "the schema is current; nothing to apply: %s\n", where)
				return nil
			case !dryRun:
				if pending, err = gateway.Migrate(cmd.Context(), sf.config(env, log)); err != nil {
					return err
				}
				verb = "applied"
			}
			fmt.Fprintf(env.stdout, "%s %d migration(s): %s\n", verb, len(pending), where)
			for _, m := range pending {
				fmt.Fprintf(env.stdout, "  %05d %s\n", m.Version, m.Name())
			}
			return nil
		},
	}
	sf.add(cmd)
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "list the migrations that would be applied (version and name) and apply none")
	return cmd
}

// with opens the store the flags name (gateway.OpenStore, applying
// migrations), runs fn on it, and closes it.
func (f *storeFlags) with(ctx context.Context, env *environment, fn func(ctx context.Context, st *store.Store, where string) error) error {
	log, err := newCommandLogger(env)
	if err != nil {
		return err
	}
	st, where, err := gateway.OpenStore(ctx, f.config(env, log))
	if err != nil {
		return settingAsUsage(err)
	}
	ferr := fn(ctx, st, where)
	if err := st.Close(); ferr == nil {
		ferr = err
	}
	return ferr
}

// newHealthcheckCmd is `portcullis healthcheck`: a probe for container
// runtimes whose images have no curl (the compose file uses it).
func newHealthcheckCmd(env *environment) *cobra.Command {
	var url string
	cmd := &cobra.Command{
		Use:     "healthcheck",
		Short:   "Exit 0 when a gateway's readiness endpoint answers 200",
		Example: `  portcullis healthcheck --url http://127.0.0.1:7070/readyz`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			env.started = true
			err := transport.Probe(cmd.Context(), url)
			if errors.Is(err, transport.ErrProbeURL) {
				return usagef("%v", err)
			}
			return err
		},
	}
	cmd.Flags().StringVar(&url, "url", "http://"+defaultListen+"/readyz", "readiness URL to probe")
	return cmd
}
