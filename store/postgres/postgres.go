// Package postgres is the PostgreSQL driver of package store (a
// store.Driver), for production and for several gateway replicas sharing
// one database. It owns the schema (migrations/postgres, applied on Open),
// the statements behind each store.Tx primitive, the mapping of SQLSTATE
// codes to store errors, and the commit feed (in-process fan-out plus
// LISTEN/NOTIFY across replicas). It holds no rule of the product: audit
// entries, version compare-and-swap and the proposal workflows are
// written once in package store, over Tx. It uses pgx directly (pgxpool).
package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/portcullis-dev/portcullis/migrations"
	"github.com/portcullis-dev/portcullis/store"
	"github.com/portcullis-dev/portcullis/store/internal/providersql"
	"github.com/portcullis-dev/portcullis/store/internal/sqlread"
)

// Config tunes the Postgres driver. The zero value is ready to use.
type Config struct {
	// Logger receives lifecycle messages. Default: discard.
	Logger *slog.Logger
	// MaxConns caps the pool. Default (0): DefaultMaxConns or
	// runtime.NumCPU(), whichever is greater, unless the URL sets
	// pool_max_conns. (pgxpool's own default, 4 on a small machine, is
	// too few: the commit listener holds one, and the Sentry intake's
	// bulk appends must leave room for the quarantine lane and the API.)
	MaxConns int32
	// MinConns keeps this many connections open. Default (0): none, unless
	// the URL sets pool_min_conns.
	MinConns int32
}

// DefaultMaxConns is the pool's size on a machine with fewer CPUs.
const DefaultMaxConns = 12

// Driver is a store.Driver on PostgreSQL. It is safe for concurrent use.
// Outside InTx each primitive runs as its own statement on the pool.
type Driver struct {
	conn
	pool *pgxpool.Pool
	log  *slog.Logger
	feed store.CommitFeed
	// migrated are the migrations Open applied.
	migrated []int64
	// own holds the backend pids (uint32) of the pool's live connections:
	// NOTIFYs they sent were already announced in process (see
	// ListenPolicyCommits).
	own sync.Map
	// Close ends closing, which stops running ListenPolicyCommits calls,
	// and waits for them.
	mu        sync.Mutex
	closing   context.Context
	close     context.CancelFunc
	listeners sync.WaitGroup
}

var (
	_ store.Driver = (*Driver)(nil)
	_ store.Tx     = (*txn)(nil)
)

// Open connects to the database at url (postgres://…), applies pending
// migrations, chains audit entries written before the hash chain existed,
// and returns the driver. Close releases the pool.
func Open(ctx context.Context, url string, cfg Config) (*Driver, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("component", "store.postgres")

	pcfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		// The parse error may quote the URL, password included.
		return nil, errors.New("postgres: invalid database URL")
	}
	switch {
	case cfg.MaxConns > 0:
		pcfg.MaxConns = cfg.MaxConns
	case !strings.Contains(url, "pool_max_conns"):
		pcfg.MaxConns = max(DefaultMaxConns, int32(runtime.NumCPU()))
	}
	if cfg.MinConns > 0 {
		pcfg.MinConns = cfg.MinConns
	}
	d := &Driver{log: log}
	d.conn.d = d
	d.closing, d.close = context.WithCancel(context.Background())
	pcfg.AfterConnect = func(_ context.Context, c *pgx.Conn) error {
		d.own.Store(c.PgConn().PID(), nil)
		return nil
	}
	pcfg.BeforeClose = func(c *pgx.Conn) { d.own.Delete(c.PgConn().PID()) }
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: connect: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres: connect: %w", err)
	}
	d.pool, d.conn.db, d.conn.Reads, d.conn.Writes = pool, pool, sqlread.On(engine{pool}), providersql.WritesOn(engine{pool})

	db := stdlib.OpenDBFromPool(pool)
	d.migrated, err = migrations.Apply(ctx, db, migrations.Postgres)
	if cerr := db.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres: %w", err)
	}
	if n, err := d.chainUnchained(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres: %w", err)
	} else if n > 0 {
		log.Info("chained audit entries written before the hash chain", "entries", n)
	}
	// Today's and the next days' Sentry partitions exist before the first
	// batch: an append that has to make its day's partition takes locks
	// that concurrent first appends take in the other order (the gateway
	// keeps them ahead after that).
	if err := d.EnsureSentryPartitions(ctx, time.Now(), SentryPartitionDays); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres: %w", err)
	}
	log.Info("store open", "host", pcfg.ConnConfig.Host, "database", pcfg.ConnConfig.Database, "max_conns", pcfg.MaxConns)
	return d, nil
}

// SentryPartitionDays is how many days' Sentry partitions are made ahead,
// today's included.
const SentryPartitionDays = 3

// Close releases every connection, the listeners' too. Pending calls fail.
// Migrated returns the migrations Open applied.
func (d *Driver) Migrated() []int64 { return d.migrated }

func (d *Driver) Close() error {
	d.mu.Lock()
	d.close()
	d.mu.Unlock()
	d.listeners.Wait()
	d.pool.Close()
	return nil
}

// Ping checks the database answers.
func (d *Driver) Ping(ctx context.Context) error {
	if err := d.pool.Ping(ctx); err != nil {
		return fmt.Errorf("postgres: ping: %w", err)
	}
	return nil
}

// InTx runs fn in one READ COMMITTED transaction, committed if fn returns
// nil. Serialisation comes from the row locks LockSandbox and
// LockAuditHead take: each statement after one sees what the previous
// holder committed. A failed statement aborts a Postgres transaction, so
// fn should return a primitive's error; the expected refusals
// (ErrAlreadyExists of the Insert primitives) leave it usable. The
// versions fn inserted are announced in process once it committed.
func (d *Driver) InTx(ctx context.Context, fn func(tx store.Tx) error) error {
	return d.inTx(ctx, fn, false)
}

// InTxEnforceFirst is InTx committed with synchronous_commit off: the
// commit is visible (and its NOTIFY sent) once its record is in the log's
// buffers, not after the flush that would wait behind every other
// writer's log — under bulk Sentry ingest, tens to hundreds of
// milliseconds. The versions are announced at once; then it waits for
// the flush (flush).
func (d *Driver) InTxEnforceFirst(ctx context.Context, fn func(tx store.Tx) error) error {
	return d.inTx(ctx, fn, true)
}

func (d *Driver) inTx(ctx context.Context, fn func(tx store.Tx) error, enforceFirst bool) error {
	ptx, err := d.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", mapErr(err))
	}
	defer func() { _ = ptx.Rollback(context.WithoutCancel(ctx)) }()
	t := &txn{ctx: ctx}
	t.conn = conn{db: ptx, d: d, tx: t, Reads: sqlread.On(engine{ptx}), Writes: providersql.WritesOn(engine{ptx})}
	if err := fn(t); err != nil {
		return err
	}
	if t.clockErr != nil {
		return fmt.Errorf("transaction clock: %w", mapErr(t.clockErr))
	}
	if enforceFirst {
		if _, err := ptx.Exec(ctx, `SET LOCAL synchronous_commit = off`); err != nil {
			return fmt.Errorf("commit before the flush: %w", mapErr(err))
		}
	}
	if err := ptx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", mapErr(err))
	}
	for _, v := range t.commits {
		d.feed.Publish(v)
	}
	if enforceFirst {
		return d.flush(ctx)
	}
	return nil
}

// flushWait bounds the wait for a commit made before the flush to become
// durable; the caller's cancellation does not cut it short, since the
// commit has happened.
const flushWait = 10 * time.Second

// flush returns once every commit made before it is on disk. A
// transaction that writes a log record commits synchronously, and
// Postgres flushes its log up to that commit, so up to every earlier
// one. The record is a transactional logical-decoding message (any role
// may emit one, at any wal_level), prefix "portcullis": nothing is
// stored.
func (d *Driver) flush(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), flushWait)
	defer cancel()
	err := pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `SELECT pg_logical_emit_message(true, 'portcullis', 'flush')`)
		return err
	})
	if err != nil {
		return fmt.Errorf("committed, but not known to be on disk: %w", mapErr(err))
	}
	return nil
}

// txn is the store.Tx InTx gives its function.
type txn struct {
	conn
	ctx context.Context
	// now is the transaction's clock, read at the first Now.
	now      time.Time
	clockErr error
	// commits are the versions inserted, announced after the commit.
	commits []store.PolicyVersion
}

// Now returns the database's now(), the transaction's start (read at the
// first call), in microseconds: every replica stamps rows with the one
// clock, as the column defaults did. Should the read fail, the local clock
// stands in and InTx fails the transaction.
func (t *txn) Now() time.Time {
	if t.now.IsZero() {
		err := t.db.QueryRow(t.ctx, `SELECT now()`).Scan(&t.now)
		if err != nil {
			t.clockErr, t.now = err, time.Now()
		}
		t.now = t.now.UTC().Truncate(time.Microsecond)
	}
	return t.now
}

// Now outside a transaction is the local clock at the database's
// precision.
func (d *Driver) Now() time.Time { return time.Now().UTC().Truncate(time.Microsecond) }

// dbtx is what the primitives run on: the pool or a transaction.
type dbtx interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// conn runs the store.Tx primitives on db. The Driver's runs each on
// the pool; a txn's inside its transaction (tx set).
type conn struct {
	sqlread.Reads      // on db
	providersql.Writes // on db
	db                 dbtx
	d                  *Driver
	tx                 *txn // nil on the pool
}

// announce records a version inserted through c: at once on the pool
// (the statement has committed), after the commit in a transaction.
func (c *conn) announce(v store.PolicyVersion) {
	if c.tx != nil {
		c.tx.commits = append(c.tx.commits, v)
		return
	}
	c.d.feed.Publish(v)
}

// forUpdate is appended to a read in a transaction that must hold what it
// read (LockSandbox, LockAuditHead); on the pool there is nothing to hold
// it for.
func (c *conn) forUpdate() string {
	if c.tx == nil {
		return ""
	}
	return ` FOR UPDATE`
}

// uniqueAlreadyExists names the unique constraints that mean "a sandbox or
// token with that name exists". Any other unique violation is a lost race.
// (The Insert primitives mostly avoid raising them: ON CONFLICT DO NOTHING
// leaves the transaction usable.)
var uniqueAlreadyExists = map[string]bool{
	"sandboxes_pkey":  true,
	"tokens_name_key": true,
}

// mapErr turns a database error into the store's sentinels, by SQLSTATE.
// It is the only place that inspects PostgreSQL error codes. The original
// error stays wrapped for logs.
func mapErr(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return store.ErrNotFound
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		if lostConnection(err) {
			return fmt.Errorf("%w: %w", store.ErrUnavailable, err)
		}
		return err
	}
	switch pgErr.Code {
	case "57P01", "57P02", "57P03": // admin_shutdown, crash_shutdown, cannot_connect_now
		return fmt.Errorf("%w: %w", store.ErrUnavailable, err)
	case "23505": // unique_violation
		if uniqueAlreadyExists[pgErr.ConstraintName] {
			return fmt.Errorf("%w: %w", store.ErrAlreadyExists, err)
		}
		return fmt.Errorf("%w: %w", store.ErrConflict, err)
	case "40001", "40P01": // serialization_failure, deadlock_detected
		return fmt.Errorf("%w: %w", store.ErrConflict, err)
	case "23503": // foreign_key_violation: the referenced row is gone
		return fmt.Errorf("%w: %w", store.ErrNotFound, err)
	}
	if strings.HasPrefix(pgErr.Code, "08") { // connection_exception
		return fmt.Errorf("%w: %w", store.ErrUnavailable, err)
	}
	return err
}

// lostConnection reports whether err is the database out of reach rather
// than an answer: no connection could be made, or the one in use broke.
func lostConnection(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false // the caller gave up: its own error says so
	}
	var (
		connErr *pgconn.ConnectError
		netErr  net.Error
	)
	return errors.As(err, &connErr) || errors.As(err, &netErr) || pgconn.SafeToRetry(err) ||
		errors.Is(err, pgconn.ErrConnClosed) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)
}

// wrapf says what failed around a database error (mapped); nil stays nil.
func wrapf(err error, format string, args ...any) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf(format+": %w", append(args, mapErr(err))...)
}

// wrapRow returns v, or the zero value and err as wrapf words it.
func wrapRow[T any](v T, err error, format string, args ...any) (T, error) {
	if err != nil {
		var zero T
		return zero, wrapf(err, format, args...)
	}
	return v, nil
}

// alreadyExists reads the result of an INSERT … ON CONFLICT DO NOTHING
// RETURNING: no row means the key was taken.
func alreadyExists(err error, what string) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%w: %s", store.ErrAlreadyExists, what)
	}
	return mapErr(err)
}

// insertUnique runs an INSERT … ON CONFLICT DO NOTHING RETURNING (one
// column); taken names the key in the ErrAlreadyExists it returns when
// no row was inserted.
func (c *conn) insertUnique(ctx context.Context, taken, sql string, args ...any) error {
	var key any
	return alreadyExists(c.db.QueryRow(ctx, sql, args...).Scan(&key), taken)
}

// collect reads every row of a query with scan, mapping errors.
func collect[T any](rows pgx.Rows, err error, scan func(pgx.Row) (T, error)) ([]T, error) {
	if err != nil {
		return nil, mapErr(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (T, error) { return scan(r) })
	return out, mapErr(err)
}

// limitOf is a LIMIT parameter: n > 0, or NULL (no cap).
func limitOf(n int) *int {
	if n <= 0 {
		return nil
	}
	return &n
}

func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

// nullTime stores the zero time as NULL.
func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// timeValue is nullTime for decisionsql.Values.
func timeValue(t time.Time) any { return nullTime(t) }

// nullTimePtr stores nil and a pointer to the zero time as NULL (read back
// as nil), as the SQLite driver does.
func nullTimePtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	return nullTime(*t)
}

// zeroTime reads NULL back as the zero time, other times in UTC.
func zeroTime(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.UTC()
}

// notNull returns s, or an empty slice for a NOT NULL column (pgx sends
// a nil slice as NULL).
func notNull[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// nilIfEmpty reads an empty column back as nil, as the SQLite driver does.
func nilIfEmpty[T any](s []T) []T {
	if len(s) == 0 {
		return nil
	}
	return s
}

// Pending returns the migrations Open would apply to the database at
// url, oldest first, reading only (its session is read-only). A schema
// newer than this binary knows is a *migrations.NewerSchemaError.
func Pending(ctx context.Context, url string) ([]migrations.Status, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		// The parse error may quote the URL, password included.
		return nil, errors.New("postgres: invalid database URL")
	}
	cfg.RuntimeParams["default_transaction_read_only"] = "on"
	db := stdlib.OpenDB(*cfg)
	defer db.Close()
	if err := db.PingContext(ctx); err != nil {
		return nil, fmt.Errorf("postgres: connect: %w", err)
	}
	pending, err := migrations.Pending(ctx, db, migrations.Postgres)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	return pending, nil
}
