package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/portcullis-dev/portcullis/store"
	"github.com/portcullis-dev/portcullis/store/internal/decisionsql"
	"github.com/portcullis-dev/portcullis/store/internal/sqlwhere"
)

// ---- signing keys ----

// SigningKeys returns the signing keys, oldest first.
func (c *conn) SigningKeys(ctx context.Context) ([]store.SigningKey, error) {
	rows, err := c.db.Query(ctx, `
		SELECT id, public_key, private_key, endorsement, created_at
		FROM signing_keys ORDER BY seq`)
	out, err := collect(rows, err, func(r pgx.Row) (store.SigningKey, error) {
		var k store.SigningKey
		err := r.Scan(&k.ID, &k.PublicKey, &k.PrivateKey, &k.Endorsement, &k.CreatedAt)
		k.CreatedAt, k.Endorsement = k.CreatedAt.UTC(), nilIfEmpty(k.Endorsement)
		return k, err
	})
	if err != nil {
		return nil, fmt.Errorf("signing keys: %w", err)
	}
	return out, nil
}

// InsertSigningKey stores k as the newest key (seq one past the highest).
// Two replicas appending after the same key both compute the same seq;
// the unique constraint on seq makes the second wait for the first and
// then fail, which mapErr turns into ErrConflict.
func (c *conn) InsertSigningKey(ctx context.Context, k store.SigningKey) error {
	_, err := c.db.Exec(ctx, `
		INSERT INTO signing_keys (id, seq, public_key, private_key, endorsement, created_at)
		VALUES ($1, (SELECT coalesce(max(seq), 0) + 1 FROM signing_keys), $2, $3, $4, $5)`,
		k.ID, k.PublicKey, k.PrivateKey, notNull(k.Endorsement), k.CreatedAt)
	return wrapf(err, "insert signing key %q", k.ID)
}

// ---- sandbox CAs ----

const caColumns = `sandbox, cert_pem, key_pem, created_at`

// GetSandboxCA returns the sandbox's CA or ErrNotFound.
func (c *conn) GetSandboxCA(ctx context.Context, sandbox string) (store.SandboxCA, error) {
	ca, err := scanCA(c.db.QueryRow(ctx, `SELECT `+caColumns+` FROM sandbox_cas WHERE sandbox = $1`, sandbox))
	return wrapRow(ca, err, "get CA of sandbox %q", sandbox)
}

func scanCA(r pgx.Row) (store.SandboxCA, error) {
	var ca store.SandboxCA
	err := r.Scan(&ca.Sandbox, &ca.CertPEM, &ca.KeyPEM, &ca.CreatedAt)
	ca.CreatedAt = ca.CreatedAt.UTC()
	return ca, err
}

// InsertSandboxCA stores ca unless the sandbox has a CA, and returns the
// one stored. A concurrent writer's uncommitted row makes the INSERT wait
// for it; the SELECT (a new snapshot under READ COMMITTED) then sees the
// winner.
func (c *conn) InsertSandboxCA(ctx context.Context, ca store.SandboxCA) (store.SandboxCA, error) {
	_, err := c.db.Exec(ctx, `
		INSERT INTO sandbox_cas (sandbox, cert_pem, key_pem, created_at) VALUES ($1, $2, $3, $4)
		ON CONFLICT (sandbox) DO NOTHING`, ca.Sandbox, ca.CertPEM, ca.KeyPEM, ca.CreatedAt)
	if err != nil {
		// foreign key: no such sandbox
		return store.SandboxCA{}, fmt.Errorf("put CA of sandbox %q: %w", ca.Sandbox, mapErr(err))
	}
	return c.GetSandboxCA(ctx, ca.Sandbox)
}

// ---- proxy statuses ----

// upsertProxy stores one status unless its sandbox is gone. The key-share
// lock is the one the foreign key would take: a concurrent DeleteSandbox
// either waits for this transaction (and its cascade removes the row) or
// commits first, and then EXISTS finds no sandbox and the row is skipped,
// instead of failing the whole batch with a foreign key violation.
const upsertProxy = `
	INSERT INTO proxies (sandbox, proxy_id, replica, build, connected, connected_at, last_seen_at,
		applied_version, applied_hash, last_ack_at, last_nack_version, last_nack_error, last_nack_at,
		lag_millis, decisions_dropped, credentials_generation, credentials_error)
	SELECT $1::text, $2::text, $3::text, $4::text, $5::boolean, $6::timestamptz, $7::timestamptz,
		$8::bigint, $9::text, $10::timestamptz, $11::bigint, $12::text, $13::timestamptz,
		$14::bigint, $15::bigint, $16::bigint, $17::text
	WHERE EXISTS (SELECT 1 FROM sandboxes WHERE name = $1 FOR KEY SHARE)
	ON CONFLICT (sandbox, proxy_id) DO UPDATE SET (replica, build, connected, connected_at, last_seen_at,
		applied_version, applied_hash, last_ack_at, last_nack_version, last_nack_error, last_nack_at,
		lag_millis, decisions_dropped, credentials_generation, credentials_error) = (excluded.replica, excluded.build, excluded.connected,
		excluded.connected_at, excluded.last_seen_at, excluded.applied_version, excluded.applied_hash,
		excluded.last_ack_at, excluded.last_nack_version, excluded.last_nack_error, excluded.last_nack_at,
		excluded.lag_millis, excluded.decisions_dropped, excluded.credentials_generation, excluded.credentials_error)
	WHERE excluded.connected OR NOT proxies.connected OR proxies.replica = excluded.replica`

// SaveProxyStatuses upserts the statuses in one batch (one round trip,
// and outside a transaction still one implicit transaction), skipping
// those of sandboxes that no longer exist.
func (c *conn) SaveProxyStatuses(ctx context.Context, statuses []store.ProxyStatus) error {
	if err := store.CheckProxyStatuses(statuses); err != nil {
		return err
	}
	if len(statuses) == 0 {
		return nil
	}
	// Rows are locked in key order, so two replicas saving overlapping
	// batches cannot deadlock; the sort is stable, so of two statuses of
	// one proxy the later still wins.
	sorted := slices.Clone(statuses)
	slices.SortStableFunc(sorted, func(a, b store.ProxyStatus) int {
		return cmp.Or(strings.Compare(a.Sandbox, b.Sandbox), strings.Compare(a.ProxyID, b.ProxyID))
	})
	var b pgx.Batch
	for _, st := range sorted {
		b.Queue(upsertProxy, st.Sandbox, st.ProxyID, st.Replica, st.Build, st.Connected,
			nullTime(st.ConnectedAt), nullTime(st.LastSeenAt),
			st.AppliedVersion, st.AppliedHash, nullTimePtr(st.LastAckAt),
			st.LastNackVersion, st.LastNackError, nullTimePtr(st.LastNackAt),
			st.LagMillis, st.DecisionsDropped, st.CredentialsGeneration, st.CredentialsError)
	}
	if err := mapErr(c.db.SendBatch(ctx, &b).Close()); err != nil {
		return fmt.Errorf("save %d proxy statuses: %w", len(statuses), err)
	}
	return nil
}

// ListProxyStatuses returns the statuses of one sandbox ("" for all),
// ordered by sandbox and proxy id.
func (c *conn) ListProxyStatuses(ctx context.Context, sandbox string) ([]store.ProxyStatus, error) {
	rows, err := c.db.Query(ctx, `
		SELECT sandbox, proxy_id, replica, build, connected, connected_at, last_seen_at,
			applied_version, applied_hash, last_ack_at, last_nack_version, last_nack_error, last_nack_at,
			lag_millis, decisions_dropped, credentials_generation, credentials_error
		FROM proxies
		WHERE $1 = '' OR sandbox = $1
		ORDER BY sandbox, proxy_id`, sandbox)
	out, err := collect(rows, err, func(r pgx.Row) (store.ProxyStatus, error) {
		var st store.ProxyStatus
		var connected, seen *time.Time
		err := r.Scan(&st.Sandbox, &st.ProxyID, &st.Replica, &st.Build, &st.Connected, &connected, &seen,
			&st.AppliedVersion, &st.AppliedHash, &st.LastAckAt, &st.LastNackVersion, &st.LastNackError, &st.LastNackAt,
			&st.LagMillis, &st.DecisionsDropped, &st.CredentialsGeneration, &st.CredentialsError)
		st.ConnectedAt, st.LastSeenAt = zeroTime(connected), zeroTime(seen)
		st.LastAckAt, st.LastNackAt = utcPtr(st.LastAckAt), utcPtr(st.LastNackAt)
		return st, err
	})
	if err != nil {
		return nil, fmt.Errorf("list proxy statuses: %w", err)
	}
	return out, nil
}

// ---- decisions ----

// AppendDecisions stores the records with one COPY.
//
// Appends are serialised by a table lock that only appenders take (readers
// are not blocked), held until commit: ids are then visible in the order
// they were assigned, so a reader tailing with AfterID never skips a
// record that commits later with a smaller id.
func (d *Driver) AppendDecisions(ctx context.Context, records []store.Decision) (int, error) {
	if err := store.CheckDecisions(records); err != nil {
		return 0, err
	}
	if len(records) == 0 {
		return 0, nil
	}
	var n int64
	err := pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `LOCK TABLE decisions IN SHARE ROW EXCLUSIVE MODE`); err != nil {
			return mapErr(err)
		}
		var err error
		n, err = tx.CopyFrom(ctx, pgx.Identifier{"decisions"}, decisionsql.Columns,
			pgx.CopyFromSlice(len(records), func(i int) ([]any, error) {
				return decisionsql.Values(nil, &records[i], timeValue), nil
			}))
		return mapErr(err)
	})
	if err != nil {
		return 0, fmt.Errorf("append %d decisions: %w", len(records), err)
	}
	return int(n), nil
}

// ListDecisions returns the records f matches, oldest first.
func (d *Driver) ListDecisions(ctx context.Context, f store.DecisionFilter) ([]store.Decision, error) {
	q, args, newest := decisionsql.Select(f, sqlwhere.Dollar)
	rows, err := d.pool.Query(ctx, q, args...)
	out, err := collect(rows, err, func(r pgx.Row) (store.Decision, error) {
		var (
			row      decisionsql.Row
			id       int64
			received time.Time
			at, last *time.Time
		)
		if err := r.Scan(row.Dest([]any{&id, &received}, &at, &last)...); err != nil {
			return store.Decision{}, err
		}
		return row.Decision(id, received.UTC(), zeroTime(at), zeroTime(last))
	})
	if err != nil {
		return nil, fmt.Errorf("list decisions: %w", err)
	}
	if newest {
		slices.Reverse(out)
	}
	return out, nil
}

// PruneDecisions deletes the records outside r's bounds,
// store.PruneBatch per statement (decisionsql.Prune).
func (d *Driver) PruneDecisions(ctx context.Context, r store.DecisionRetention) (int64, error) {
	return decisionsql.Prune(ctx, r, pruner{d})
}

// pruner runs decisionsql.Prune's statements on the pool, each its own
// implicit transaction.
type pruner struct{ d *Driver }

func (pruner) Param(n int) string       { return sqlwhere.Dollar(n) }
func (pruner) Received(t time.Time) any { return t }

func (p pruner) Delete(ctx context.Context, q string, args ...any) (int64, error) {
	tag, err := p.d.pool.Exec(ctx, q, args...)
	return tag.RowsAffected(), mapErr(err)
}

func (p pruner) Names(ctx context.Context, q string) ([]string, error) {
	rows, err := p.d.pool.Query(ctx, q)
	return collect(rows, err, func(r pgx.Row) (name string, err error) { return name, r.Scan(&name) })
}

func (p pruner) ID(ctx context.Context, q string, args ...any) (id int64, found bool, err error) {
	err = p.d.pool.QueryRow(ctx, q, args...).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	return id, err == nil, mapErr(err)
}
