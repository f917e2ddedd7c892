package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/portcullis-dev/portcullis/gateway/decisions"
	"github.com/portcullis-dev/portcullis/internal/ocsf"
	"github.com/portcullis-dev/portcullis/internal/telemetry/otlp"
	"github.com/portcullis-dev/portcullis/migrations"
	"github.com/portcullis-dev/portcullis/store"
	"github.com/portcullis-dev/portcullis/store/postgres"
	"github.com/portcullis-dev/portcullis/store/sqlite"
)

// The gateway process, as `portcullis gateway` runs it: Run opens what a
// Server needs (its stores, the tracing exporter, the OCSF sinks), builds
// and starts the Server, and closes everything again, waiting for every
// goroutine it started. The CLI only maps its flags and environment to a
// RunConfig; offline commands open the store with OpenStore.

// RunConfig is a whole gateway process.
type RunConfig struct {
	// Server configures the gateway. Run sets its SentryStore,
	// TracerProvider, OCSF and OCSFDropped from what it opens; its Logger
	// (default slog.Default()) is the process's.
	Server Config
	// Store locates the control plane's store (its Logger defaults to
	// Server.Logger).
	Store StoreConfig
	// SentryDatabaseURL, if set, is a Postgres database of their own for
	// the Sentry events (Config.SentryStore). Default: the events stay in
	// Store.
	SentryDatabaseURL string
	// SecretsKeyFile is the key credential providers' secrets are sealed
	// with (Config.SecretsKey; secretbox.Load's format). Default: an
	// SQLite gateway makes SecretsKeyFile in Store.DataDir on its first
	// start and uses it; a Postgres one runs without (its replicas must
	// share one file, which it cannot make for them).
	SecretsKeyFile string
	// Tracing exports spans over OTLP (Config.TracerProvider). Default
	// (no Endpoint): no tracing.
	Tracing otlp.Config
	// OCSF names the sinks the gateway's OCSF events go to (Config.OCSF).
	// Default: none.
	OCSF ocsf.Sinks
	// Started, if set, is told once the gateway listens and has its admin
	// token and signing key, just before it serves: the CLI prints its
	// banner.
	Started func(Started)
	// Explicit says an operator gave every bound in Server (decision
	// records' retention and rate, quarantine budgets, Sentry retention)
	// with the defaults as their own, as portcullis gateway's flags do:
	// Check then refuses a 0, which Config reads as "the default" and an
	// operator means as "none".
	Explicit bool
}

// Started is what a gateway process says once it can be reached.
type Started struct {
	// Addr is the API's address (Config.Listen, its port chosen).
	Addr net.Addr
	// Store says where the data lives (OpenStore's where, and the Sentry
	// events' own database if any).
	Store string
	// SigningKey is the public key proxies may pin (Server.SigningKey).
	SigningKey string
	// AdminToken is the first admin token when this start created it
	// (CreatedAdmin; it is Config.BootstrapToken when one was given);
	// later starts create none.
	AdminToken   string
	CreatedAdmin bool
}

// A SettingError is a setting Run or OpenStore cannot work with as given
// (a database URL that is not Postgres's, an address the gateway may not
// or cannot listen on): the operator's to fix before anything can run,
// not a failure along the way. Its message names the setting as
// `portcullis gateway`'s flag does.
type SettingError struct{ Err error }

func (e *SettingError) Error() string { return e.Err.Error() }
func (e *SettingError) Unwrap() error { return e.Err }

// Check refuses, before anything is opened, settings Run cannot work
// with (Run checks first): each a *SettingError naming the setting as
// portcullis gateway's flag or environment variable does.
func (c RunConfig) Check() error {
	if err := c.check(); err != nil {
		return &SettingError{err}
	}
	return nil
}

func (c RunConfig) check() error {
	s := c.Server
	if !c.Explicit {
		s.setDefaults() // a copy: Run still hands New the zeros
	}
	// The Sentry bounds' zero is their default (sentryintake applies it),
	// refused only when the operator gave it.
	switch {
	case (s.TLSCertFile == "") != (s.TLSKeyFile == ""):
		return errors.New("--tls-cert and --tls-key go together")
	case s.DecisionMaxAge == 0:
		return errors.New("--decision-max-age 0 would delete every record; give a duration, or a negative one to keep them forever")
	case s.DecisionMaxPerSandbox == 0:
		return errors.New("--decision-max-per-sandbox 0 would delete every record; give a count, or a negative one for no bound")
	case s.DecisionRate == 0 || math.IsNaN(s.DecisionRate) || math.IsInf(s.DecisionRate, 0):
		return fmt.Errorf("--decision-rate %v: give records a second, or a negative value for no limit", s.DecisionRate)
	case s.DecisionRate > 0 && s.DecisionBurst < decisions.MinBurst:
		return fmt.Errorf("--decision-burst %d: must be at least %d", s.DecisionBurst, decisions.MinBurst)
	case c.SentryDatabaseURL != "" && !IsPostgresURL(c.SentryDatabaseURL):
		return errors.New("--sentry-database-url (or PORTCULLIS_SENTRY_DATABASE_URL) must be a postgres:// URL (leave it unset to keep the events in the gateway's store)")
	case c.Explicit && s.QuarantineBudget == 0:
		return errors.New("--quarantine-budget 0 would hold every quarantine; give a count, or a negative one for no budget (--sentry-dry-run freezes nothing)")
	case c.Explicit && s.QuarantineBudgetPerSource == 0:
		return errors.New("--quarantine-budget-per-source 0 would hold every quarantine; give a count, or a negative one for no budget per source")
	case c.Explicit && s.SentryMaxAge == 0:
		return errors.New("--sentry-max-age 0 would act on no quarantine; give a duration, or a negative one for no max age (--sentry-dry-run freezes nothing)")
	case c.Explicit && s.SentryRetention == 0:
		return errors.New("--sentry-retention 0 would delete every event; give a duration, or a negative one to keep them forever")
	case s.MaxHeldCalls < 0 || c.Explicit && s.MaxHeldCalls == 0:
		return fmt.Errorf("--max-held-calls %d: a sandbox holds at least one call for review", s.MaxHeldCalls)
	case s.HeldCallRetention < 0 || c.Explicit && s.HeldCallRetention == 0:
		return fmt.Errorf("--held-call-retention %v: give how long a decided call keeps its arguments", s.HeldCallRetention)
	}
	for _, u := range []struct {
		flag, url string
		signed    bool
	}{{"--webhook-url", s.WebhookURL, true}, {"--audit-webhook-url", s.AuditWebhookURL, true}, {"--external-url", s.ExternalURL, false}} {
		if u.url == "" {
			continue
		}
		if p, err := url.Parse(u.url); err != nil || (p.Scheme != "https" && p.Scheme != "http") || p.Host == "" {
			return fmt.Errorf("%s %q: want an http(s) URL", u.flag, u.url)
		}
		if u.signed && s.WebhookSecret == "" {
			return fmt.Errorf("%s needs PORTCULLIS_WEBHOOK_SECRET, the key that signs each call", u.flag)
		}
	}
	if s.BootstrapToken != "" && len(s.BootstrapToken) < MinBootstrapTokenLen {
		return fmt.Errorf("PORTCULLIS_BOOTSTRAP_TOKEN must be at least %d characters", MinBootstrapTokenLen)
	}
	return nil
}

// Run runs a gateway process until ctx ends: it checks cfg, opens the stores
// (applying pending migrations), the tracing exporter and the OCSF sinks,
// builds the Server, listens, creates the first admin token when the
// store has none, tells cfg.Started, and serves. When ctx ends it shuts
// down gracefully and returns once everything it opened is closed and
// every goroutine it started has returned.
func Run(ctx context.Context, cfg RunConfig) error {
	if err := cfg.Check(); err != nil {
		return err
	}
	if cfg.Server.Logger == nil {
		cfg.Server.Logger = slog.Default()
	}
	log := cfg.Server.Logger
	if cfg.Store.Logger == nil {
		cfg.Store.Logger = log
	}
	st, where, err := OpenStore(ctx, cfg.Store)
	if err != nil {
		return err
	}
	defer st.Close()
	if cfg.Server.SecretsKey, err = openSecretsKey(cfg, log); err != nil {
		return err
	}
	if cfg.SentryDatabaseURL != "" {
		events, err := openSentryStore(ctx, cfg.SentryDatabaseURL, log)
		if err != nil {
			return err
		}
		defer events.Close()
		cfg.Server.SentryStore = events
		where += "; sentry events in their own postgres database"
	}
	tracer, err := otlp.New(cfg.Tracing)
	if err != nil {
		return &SettingError{err}
	}
	// After the server: the spans of its last calls are exported.
	defer tracer.Stop(log)
	cfg.Server.TracerProvider = tracer.Provider()
	emitters, err := ocsf.Open(cfg.OCSF)
	if err != nil {
		return err
	}
	defer func() {
		for _, e := range emitters {
			e.Close() // once Run has closed it, a second Close does nothing
		}
	}()
	if emitters != nil {
		cfg.Server.OCSF, cfg.Server.OCSFDropped = emitters.Emit, emitters.Dropped
	}
	gw, err := New(cfg.Server, st)
	if err != nil {
		return err
	}
	// Listen before creating the first admin token: a token created for a
	// gateway that then fails to start would never be shown.
	ln, err := gw.Listen()
	if err != nil {
		return &SettingError{err}
	}
	if cfg.Server.DevAllowLoopback {
		log.Warn("--dev-allow-loopback: proposals for loopback upstreams are proved as reachable; never use this in production")
	}
	started := Started{Addr: ln.Addr(), Store: where}
	if started.AdminToken, started.CreatedAdmin, err = gw.Bootstrap(ctx); err != nil {
		ln.Close()
		return err
	}
	if started.SigningKey, err = gw.SigningKey(ctx); err != nil {
		ln.Close()
		return err
	}
	if cfg.Started != nil {
		cfg.Started(started)
	}
	// The emitters write until ctx ends, then what is still queued, and
	// close their sinks.
	octx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { emitters.Run(octx) })
	err = gw.Serve(ctx, ln)
	stop()
	wg.Wait()
	return err
}

// SQLiteFile is the embedded SQLite database's name in
// StoreConfig.DataDir.
const SQLiteFile = "portcullis.db"

// StoreConfig locates the control plane's store.
type StoreConfig struct {
	// DatabaseURL is a Postgres URL (postgres://… or postgresql://…).
	// Empty: the embedded SQLite database SQLiteFile in DataDir, for a
	// single replica.
	DatabaseURL string
	DataDir     string
	// Logger receives the store's lifecycle messages (migrations).
	// Default: none.
	Logger *slog.Logger
}

// SQLitePath is where the embedded SQLite database is, or would be.
func (c StoreConfig) SQLitePath() string { return filepath.Join(c.DataDir, SQLiteFile) }

// Exists reports whether there is a store to open without creating one:
// a Postgres database always (the server is the judge), the embedded
// SQLite one when its file is in DataDir.
func (c StoreConfig) Exists() bool {
	if c.DatabaseURL != "" {
		return true
	}
	_, err := os.Stat(c.SQLitePath())
	return err == nil
}

// OpenStore opens the store c names, applying pending migrations (the
// embedded SQLite database is created on first use). where says where
// the data lives, for a start-up banner. A DatabaseURL that is not a
// Postgres URL is a *SettingError.
func OpenStore(ctx context.Context, c StoreConfig) (st *store.Store, where string, err error) {
	switch {
	case IsPostgresURL(c.DatabaseURL):
		d, err := postgres.Open(ctx, c.DatabaseURL, postgres.Config{Logger: c.Logger})
		if err != nil {
			return nil, "", fmt.Errorf("open postgres: %w", err)
		}
		return store.New(d), "postgres", nil
	case c.DatabaseURL != "":
		return nil, "", errNotPostgresURL
	}
	path := c.SQLitePath()
	d, err := sqlite.Open(ctx, path, sqlite.Config{Logger: c.Logger})
	if err != nil {
		return nil, "", fmt.Errorf("open sqlite: %w", err)
	}
	return store.New(d), "sqlite " + path + " (single replica)", nil
}

// Migrate applies the pending migrations of the store c names (opening
// it with OpenStore, then closing it) and returns those it applied,
// oldest first.
func Migrate(ctx context.Context, c StoreConfig) ([]migrations.Status, error) {
	st, _, err := OpenStore(ctx, c)
	if err != nil {
		return nil, err
	}
	applied := st.Migrated()
	if err := st.Close(); err != nil {
		return nil, err
	}
	engine := migrations.SQLite
	if IsPostgresURL(c.DatabaseURL) {
		engine = migrations.Postgres
	}
	known, err := migrations.Known(engine)
	return slices.DeleteFunc(known, func(s migrations.Status) bool { return !slices.Contains(applied, s.Version) }), err
}

// errNotPostgresURL refuses a --database-url that is not Postgres's.
var errNotPostgresURL = &SettingError{errors.New("--database-url must be a postgres:// URL (leave it unset for embedded SQLite)")}

// PendingMigrations returns the migrations OpenStore would apply to the
// store c names, oldest first, and where that store is (as OpenStore
// says), reading only: nothing is created or migrated. A store newer
// than this binary knows is a *migrations.NewerSchemaError; a
// DatabaseURL that is not a Postgres URL is a *SettingError.
func PendingMigrations(ctx context.Context, c StoreConfig) (pending []migrations.Status, where string, err error) {
	switch {
	case IsPostgresURL(c.DatabaseURL):
		pending, err = postgres.Pending(ctx, c.DatabaseURL)
		return pending, "postgres", err
	case c.DatabaseURL != "":
		return nil, "", errNotPostgresURL
	}
	pending, err = sqlite.Pending(ctx, c.SQLitePath())
	return pending, "sqlite " + c.SQLitePath() + " (single replica)", err
}

// IsPostgresURL reports whether s is a Postgres URL, the only kind of
// database URL the gateway opens.
func IsPostgresURL(s string) bool {
	return strings.HasPrefix(s, "postgres://") || strings.HasPrefix(s, "postgresql://")
}

// openSentryStore opens the Sentry events' own Postgres database,
// applying pending migrations.
func openSentryStore(ctx context.Context, url string, log *slog.Logger) (*store.Store, error) {
	if !IsPostgresURL(url) {
		return nil, &SettingError{fmt.Errorf("the Sentry events' database URL must be a postgres:// URL (leave it unset to keep the events in the gateway's store)")}
	}
	d, err := postgres.Open(ctx, url, postgres.Config{Logger: log})
	if err != nil {
		return nil, fmt.Errorf("open the sentry event store (--sentry-database-url): %w", err)
	}
	return store.New(d), nil
}
