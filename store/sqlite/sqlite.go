// Package sqlite is the embedded store.Driver: one file, pure Go
// (modernc.org/sqlite), no server to run — the gateway's zero-setup
// default. It runs statements and maps SQLite's errors; every rule of the
// product is in package store. It applies the schema in migrations/sqlite
// on Open.
//
// Writes go through a single connection whose transactions begin IMMEDIATE,
// so concurrent writers in this process queue for it instead of failing
// with SQLITE_BUSY; reads use a separate pool of read-only connections,
// which WAL mode lets run alongside the writer.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/portcullis-dev/portcullis/migrations"
	"github.com/portcullis-dev/portcullis/store"
	"github.com/portcullis-dev/portcullis/store/internal/providersql"
	"github.com/portcullis-dev/portcullis/store/internal/sqlread"
)

// Config tunes the SQLite store. The zero value is ready to use.
type Config struct {
	// Logger receives lifecycle messages. Default: discard.
	Logger *slog.Logger
	// MaxReadConns caps the read-only pool. Default (0): the greater of 4
	// and runtime.NumCPU(). Writes always use one connection.
	MaxReadConns int
	// BusyTimeout is how long a statement waits for a lock held by another
	// connection to the file (another process, a checkpoint) before it
	// fails. Default (0): 5 s.
	BusyTimeout time.Duration
}

// Driver is a store.Driver on an SQLite file. It is safe for concurrent
// use within one process; two processes must not open the same file.
//
// Outside InTx its primitives read on the read pool and write on the
// writer, each on its own (a primitive of several statements in its own
// transaction).
type Driver struct {
	txn
	w    *sql.DB // one connection, BEGIN IMMEDIATE: every write
	r    *sql.DB // read-only pool: every read
	log  *slog.Logger
	feed store.CommitFeed
	// migrated are the migrations Open applied.
	migrated []int64
}

var _ store.Driver = (*Driver)(nil)

// Open opens (creating it if needed) the database file at path, applies
// pending migrations and returns the store. A new file is created with mode
// 0600 and missing directories with 0700: the file holds token hashes and
// every policy.
func Open(ctx context.Context, path string, cfg Config) (*Driver, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("component", "store.sqlite")
	if path == "" {
		return nil, errors.New("sqlite: empty database path")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("sqlite: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(abs), 0o700); err != nil {
		return nil, fmt.Errorf("sqlite: create directory: %w", err)
	}
	f, err := os.OpenFile(abs, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	switch {
	case err == nil:
		_ = f.Close()
	case errors.Is(err, fs.ErrExist):
		if fi, err := os.Stat(abs); err == nil && fi.Mode().Perm()&0o077 != 0 {
			log.Warn("database file is readable by other users", "path", abs, "mode", fi.Mode().Perm().String())
		}
	default:
		return nil, fmt.Errorf("sqlite: create database file: %w", err)
	}

	// SQLite decodes %XX in a file: URI, so escape the path; WAL, the
	// -wal and -shm files inherit the main file's mode. Every pragma is
	// read back in a test: the driver cannot check _pragma values.
	name := "file:" + (&url.URL{Path: abs}).EscapedPath()
	busy := cfg.BusyTimeout
	if busy <= 0 {
		busy = 5 * time.Second
	}
	common := fmt.Sprintf("_pragma=busy_timeout(%d)&_pragma=foreign_keys(1)", busy.Milliseconds())
	// synchronous(FULL): a commit is on disk before it is acknowledged
	// (NORMAL, common with WAL, may lose the last commits on power loss).
	w, err := sql.Open("sqlite", name+"?_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&"+common+"&_txlock=immediate")
	if err != nil {
		return nil, fmt.Errorf("sqlite: open: %w", err)
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxIdleTime(0)
	w.SetConnMaxLifetime(0)
	if err := w.PingContext(ctx); err != nil {
		_ = w.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", abs, err)
	}
	migrated, err := migrations.Apply(ctx, w, migrations.SQLite)
	if err != nil {
		_ = w.Close()
		return nil, fmt.Errorf("sqlite: %w", err)
	}
	d := &Driver{w: w, log: log, migrated: migrated}
	d.txn = txn{d: d, wr: w, Writes: providersql.WritesOn(engine{w})}
	if n, err := d.chainUnchained(ctx); err != nil {
		_ = w.Close()
		return nil, fmt.Errorf("sqlite: %w", err)
	} else if n > 0 {
		log.Info("chained audit entries written before the hash chain", "entries", n)
	}

	r, err := sql.Open("sqlite", name+"?"+common+"&_pragma=query_only(1)")
	if err != nil {
		_ = w.Close()
		return nil, fmt.Errorf("sqlite: open: %w", err)
	}
	n := cfg.MaxReadConns
	if n <= 0 {
		n = max(4, runtime.NumCPU())
	}
	r.SetMaxOpenConns(n)
	r.SetMaxIdleConns(n)
	log.Info("store open", "path", abs, "read_conns", n)
	d.r, d.rd, d.Reads = r, r, sqlread.On(engine{r})
	return d, nil
}

// Close closes both pools.
// Migrated returns the migrations Open applied.
func (d *Driver) Migrated() []int64 { return d.migrated }

func (d *Driver) Close() error {
	return errors.Join(d.r.Close(), d.w.Close())
}

// Ping checks the file can be read.
func (d *Driver) Ping(ctx context.Context) error {
	if err := d.r.PingContext(ctx); err != nil {
		return fmt.Errorf("sqlite: ping: %w", err)
	}
	return nil
}

// alreadyExists lists the unique columns whose violation means "that
// name, version, key or approver is taken" (ErrAlreadyExists); any other
// unique violation is a lost race (ErrConflict). SQLite names the columns
// only in the message ("UNIQUE constraint failed: tokens.name"), not by
// constraint name.
var alreadyExists = map[string]bool{
	"sandboxes.name": true,
	"tokens.name":    true,
	"policy_versions.sandbox, policy_versions.version":            true,
	"proposals.sandbox, proposals.idempotency_key":                true,
	"proposal_approvals.proposal_id, proposal_approvals.approver": true,
	"approval_policies.version":                                   true,
}

// mapErr turns a database error into the store's sentinels, by extended
// SQLite result code (the driver enables extended codes on every
// connection). It is the only place that inspects SQLite errors. The
// original error stays wrapped for logs.
//
// SQLITE_BUSY is not a conflict: it means another connection held the
// lock past the busy timeout, not that a concurrent writer changed what
// the caller expected, so it stays an engine error.
func mapErr(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, sql.ErrNoRows) {
		return store.ErrNotFound
	}
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return err
	}
	switch se.Code() {
	case sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY: // the referenced sandbox is gone
		return fmt.Errorf("%w: %w", store.ErrNotFound, err)
	case sqlite3.SQLITE_CONSTRAINT_UNIQUE, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY:
		if alreadyExists[uniqueColumns(se.Error())] {
			return fmt.Errorf("%w: %w", store.ErrAlreadyExists, err)
		}
		return fmt.Errorf("%w: %w", store.ErrConflict, err)
	}
	return err
}

// uniqueColumns returns "table.column[, table.column…]" from SQLite's
// unique-violation message, or "".
func uniqueColumns(msg string) string {
	const prefix = "UNIQUE constraint failed: "
	i := strings.Index(msg, prefix)
	if i < 0 {
		return ""
	}
	cols := msg[i+len(prefix):]
	if j := strings.Index(cols, " ("); j >= 0 { // the driver appends " (code)"
		cols = cols[:j]
	}
	return cols
}

// wrapRow returns v, or the zero value and err (mapped) after what
// failed (format and args).
func wrapRow[T any](v T, err error, format string, args ...any) (T, error) {
	if err != nil {
		var zero T
		return zero, fmt.Errorf(format+": %w", append(args, mapErr(err))...)
	}
	return v, nil
}

// querier is what runs statements: a pool, the writer, or a transaction.
type querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	PrepareContext(ctx context.Context, query string) (*sql.Stmt, error)
}

// txn is the store.Tx of one write transaction (tx set: reads and writes
// go through it) or, embedded in Driver, of none (reads on the pool, each
// write on its own on the writer).
type txn struct {
	sqlread.Reads      // on rd
	providersql.Writes // on wr
	d                  *Driver
	rd, wr             querier
	tx                 *sql.Tx   // nil outside a transaction
	now                time.Time // the transaction's clock
	// versions inserted, announced once the transaction commits.
	versions []store.PolicyVersion
}

// Now is the transaction's clock, read when it began; outside a
// transaction, the current time.
func (t *txn) Now() time.Time {
	if t.tx == nil {
		return time.Now().UTC()
	}
	return t.now
}

// InTx runs fn in a write transaction (BEGIN IMMEDIATE on the single
// writer connection: write transactions run one at a time) and commits
// it, then announces the versions it inserted to ListenPolicyCommits.
func (d *Driver) InTx(ctx context.Context, fn func(tx store.Tx) error) error {
	return d.inTx(ctx, func(t *txn) error { return fn(t) })
}

// InTxEnforceFirst is InTx: a single writer has no log of others' work
// for a commit to wait behind, so announcing before the commit is durable
// would gain nothing.
func (d *Driver) InTxEnforceFirst(ctx context.Context, fn func(tx store.Tx) error) error {
	return d.InTx(ctx, fn)
}

func (d *Driver) inTx(ctx context.Context, fn func(t *txn) error) error {
	tx, err := d.w.BeginTx(ctx, nil)
	if err != nil {
		return mapErr(err)
	}
	defer func() { _ = tx.Rollback() }()
	t := &txn{d: d, rd: tx, wr: tx, tx: tx, now: time.Now().UTC(), Reads: sqlread.On(engine{tx}), Writes: providersql.WritesOn(engine{tx})}
	if err := fn(t); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return mapErr(err)
	}
	for _, v := range t.versions {
		d.feed.Publish(v)
	}
	return nil
}

// atomic runs fn in t's transaction, or outside one in a transaction of
// its own: for primitives of several statements.
func (t *txn) atomic(ctx context.Context, fn func(t *txn) error) error {
	if t.tx != nil {
		return fn(t)
	}
	return t.d.inTx(ctx, fn)
}

// ListenPolicyCommits calls fn for each policy version this process
// commits, after its transaction committed, until ctx ends (see
// store.CommitFeed: a listener that falls far behind misses versions).
// An SQLite file has one gateway, so there are no other commits to hear.
func (d *Driver) ListenPolicyCommits(ctx context.Context, fn func(store.Commit)) error {
	return d.feed.Listen(ctx, fn)
}

// nanos is how times are stored: UTC nanoseconds since the epoch.
func nanos(t time.Time) int64 { return t.UnixNano() }

func fromNanos(n int64) time.Time { return time.Unix(0, n).UTC() }

func fromNullNanos(n sql.NullInt64) *time.Time {
	if !n.Valid {
		return nil
	}
	t := fromNanos(n.Int64)
	return &t
}

// collect runs a query and scans every row with scan.
func collect[T any](ctx context.Context, q querier, scan func(scanner) (T, error), query string, args ...any) ([]T, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, mapErr(err)
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, mapErr(err)
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, mapErr(err)
	}
	return out, nil
}

// scanner is a row or rows.
type scanner = interface{ Scan(...any) error }

// exec runs a write on the writer (or t's transaction); what names it in
// the error.
func (t *txn) exec(ctx context.Context, what, query string, args ...any) error {
	if _, err := t.wr.ExecContext(ctx, query, args...); err != nil {
		return fmt.Errorf("%s: %w", what, mapErr(err))
	}
	return nil
}

// update is exec for a write of one existing row: ErrNotFound when it
// changed none.
func (t *txn) update(ctx context.Context, what, query string, args ...any) error {
	res, err := t.wr.ExecContext(ctx, query, args...)
	var n int64
	if err == nil {
		n, err = res.RowsAffected()
	}
	switch {
	case err != nil:
		return fmt.Errorf("%s: %w", what, mapErr(err))
	case n == 0:
		return fmt.Errorf("%s: %w", what, store.ErrNotFound)
	}
	return nil
}

// Pending returns the migrations Open would apply to the database file
// at path, oldest first, reading only: the file is opened read-only, and
// a missing one is a new database (every migration pending), not
// created. A schema newer than this binary knows is a
// *migrations.NewerSchemaError.
func Pending(ctx context.Context, path string) ([]migrations.Status, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("sqlite: %w", err)
	}
	if _, err := os.Stat(abs); errors.Is(err, fs.ErrNotExist) {
		return migrations.Pending(ctx, nil, migrations.SQLite)
	}
	db, err := openFile(abs, "ro")
	if err != nil {
		return nil, err
	}
	defer db.Close()
	pending, err := migrations.Pending(ctx, db, migrations.SQLite)
	if err != nil {
		return nil, fmt.Errorf("sqlite %s: %w", abs, err)
	}
	return pending, nil
}
