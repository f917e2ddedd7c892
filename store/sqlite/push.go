package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/portcullis-dev/portcullis/store"
	"github.com/portcullis-dev/portcullis/store/internal/decisionsql"
	"github.com/portcullis-dev/portcullis/store/internal/sqlwhere"
)

// ---- signing keys ----

// SigningKeys returns the signing keys, oldest first.
func (t *txn) SigningKeys(ctx context.Context) ([]store.SigningKey, error) {
	scan := func(r scanner) (store.SigningKey, error) {
		var k store.SigningKey
		var at int64
		err := r.Scan(&k.ID, &k.PublicKey, &k.PrivateKey, &k.Endorsement, &at)
		k.CreatedAt = fromNanos(at)
		if len(k.Endorsement) == 0 {
			k.Endorsement = nil
		}
		return k, err
	}
	out, err := collect(ctx, t.rd, scan, `
		SELECT id, public_key, private_key, endorsement, created_at
		FROM signing_keys ORDER BY seq`)
	if err != nil {
		return nil, fmt.Errorf("signing keys: %w", err)
	}
	return out, nil
}

// InsertSigningKey stores k as the newest key.
func (t *txn) InsertSigningKey(ctx context.Context, k store.SigningKey) error {
	return t.exec(ctx, fmt.Sprintf("insert signing key %q", k.ID), `
		INSERT INTO signing_keys (id, seq, public_key, private_key, endorsement, created_at)
		VALUES (?, (SELECT coalesce(max(seq), 0) + 1 FROM signing_keys), ?, ?, ?, ?)`,
		k.ID, k.PublicKey, k.PrivateKey, orEmpty(k.Endorsement), nanos(k.CreatedAt))

}

// ---- sandbox CAs ----

const caQuery = `SELECT sandbox, cert_pem, key_pem, created_at FROM sandbox_cas WHERE sandbox = ?`

func scanCA(r scanner) (store.SandboxCA, error) {
	var ca store.SandboxCA
	var at int64
	err := r.Scan(&ca.Sandbox, &ca.CertPEM, &ca.KeyPEM, &at)
	ca.CreatedAt = fromNanos(at)
	return ca, err
}

// GetSandboxCA returns the sandbox's CA or ErrNotFound.
func (t *txn) GetSandboxCA(ctx context.Context, sandbox string) (store.SandboxCA, error) {
	ca, err := scanCA(t.rd.QueryRowContext(ctx, caQuery, sandbox))
	return wrapRow(ca, err, "get CA of sandbox %q", sandbox)
}

// InsertSandboxCA stores ca unless the sandbox has a CA, and returns the
// one stored.
func (t *txn) InsertSandboxCA(ctx context.Context, ca store.SandboxCA) (store.SandboxCA, error) {
	var out store.SandboxCA
	err := t.atomic(ctx, func(t *txn) error {
		err := t.exec(ctx, "insert", `
			INSERT INTO sandbox_cas (sandbox, cert_pem, key_pem, created_at) VALUES (?, ?, ?, ?)
			ON CONFLICT (sandbox) DO NOTHING`, ca.Sandbox, ca.CertPEM, ca.KeyPEM, nanos(ca.CreatedAt))
		if err != nil {
			return err // foreign key: no such sandbox
		}
		out, err = scanCA(t.wr.QueryRowContext(ctx, caQuery, ca.Sandbox))
		return mapErr(err)
	})
	if err != nil {
		return store.SandboxCA{}, fmt.Errorf("insert CA of sandbox %q: %w", ca.Sandbox, err)
	}
	return out, nil
}

// ---- proxy statuses ----

// upsertProxy stores one status unless its sandbox is gone. (The WHERE
// also keeps SQLite from parsing ON CONFLICT as a join constraint.)
const upsertProxy = `
	INSERT INTO proxies (sandbox, proxy_id, replica, build, connected, connected_at, last_seen_at,
		applied_version, applied_hash, last_ack_at, last_nack_version, last_nack_error, last_nack_at,
		lag_millis, decisions_dropped, credentials_generation, credentials_error)
	SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17
	WHERE EXISTS (SELECT 1 FROM sandboxes WHERE name = ?1)
	ON CONFLICT (sandbox, proxy_id) DO UPDATE SET
		replica = excluded.replica, build = excluded.build,
		connected = excluded.connected, connected_at = excluded.connected_at,
		last_seen_at = excluded.last_seen_at,
		applied_version = excluded.applied_version, applied_hash = excluded.applied_hash,
		last_ack_at = excluded.last_ack_at,
		last_nack_version = excluded.last_nack_version, last_nack_error = excluded.last_nack_error,
		last_nack_at = excluded.last_nack_at,
		lag_millis = excluded.lag_millis, decisions_dropped = excluded.decisions_dropped,
		credentials_generation = excluded.credentials_generation, credentials_error = excluded.credentials_error
	WHERE excluded.connected OR NOT proxies.connected OR proxies.replica = excluded.replica`

// SaveProxyStatuses upserts the statuses in one transaction, skipping
// those of sandboxes that no longer exist.
func (t *txn) SaveProxyStatuses(ctx context.Context, statuses []store.ProxyStatus) error {
	if err := checkProxyStatuses(statuses); err != nil {
		return err
	}
	if len(statuses) == 0 {
		return nil
	}
	err := t.atomic(ctx, func(t *txn) error {
		stmt, err := t.wr.PrepareContext(ctx, upsertProxy)
		if err != nil {
			return mapErr(err)
		}
		defer stmt.Close()
		for _, st := range statuses {
			_, err := stmt.ExecContext(ctx, st.Sandbox, st.ProxyID, st.Replica, st.Build, st.Connected,
				nullNanos(st.ConnectedAt), nullNanos(st.LastSeenAt),
				st.AppliedVersion, st.AppliedHash, nullNanosPtr(st.LastAckAt),
				st.LastNackVersion, st.LastNackError, nullNanosPtr(st.LastNackAt),
				st.LagMillis, st.DecisionsDropped, st.CredentialsGeneration, st.CredentialsError)
			if err != nil {
				return fmt.Errorf("proxy %q of sandbox %q: %w", st.ProxyID, st.Sandbox, mapErr(err))
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("save %d proxy statuses: %w", len(statuses), err)
	}
	return nil
}

// ListProxyStatuses returns the statuses of one sandbox ("" for all),
// ordered by sandbox and proxy id.
func (t *txn) ListProxyStatuses(ctx context.Context, sandbox string) ([]store.ProxyStatus, error) {
	scan := func(r scanner) (store.ProxyStatus, error) {
		var st store.ProxyStatus
		var connected, seen, ack, nack sql.NullInt64
		err := r.Scan(&st.Sandbox, &st.ProxyID, &st.Replica, &st.Build, &st.Connected, &connected, &seen,
			&st.AppliedVersion, &st.AppliedHash, &ack, &st.LastNackVersion, &st.LastNackError, &nack,
			&st.LagMillis, &st.DecisionsDropped, &st.CredentialsGeneration, &st.CredentialsError)
		st.ConnectedAt, st.LastSeenAt = zeroNanos(connected), zeroNanos(seen)
		st.LastAckAt, st.LastNackAt = fromNullNanos(ack), fromNullNanos(nack)
		return st, err
	}
	out, err := collect(ctx, t.rd, scan, `
		SELECT sandbox, proxy_id, replica, build, connected, connected_at, last_seen_at,
			applied_version, applied_hash, last_ack_at, last_nack_version, last_nack_error, last_nack_at,
			lag_millis, decisions_dropped, credentials_generation, credentials_error
		FROM proxies
		WHERE ?1 = '' OR sandbox = ?1
		ORDER BY sandbox, proxy_id`, sandbox)
	if err != nil {
		return nil, fmt.Errorf("list proxy statuses: %w", err)
	}
	return out, nil
}

// ---- decisions ----

// AppendDecisions stores the records in one transaction, with one prepared
// statement.
func (d *Driver) AppendDecisions(ctx context.Context, records []store.Decision) (int, error) {
	if err := checkDecisions(records); err != nil {
		return 0, err
	}
	if len(records) == 0 {
		return 0, nil
	}
	at := time.Now().UnixNano()
	err := d.inTx(ctx, func(t *txn) error {
		stmt, err := t.wr.PrepareContext(ctx, `INSERT INTO decisions (received_at, `+strings.Join(decisionsql.Columns, ", ")+`)
			VALUES (?`+strings.Repeat(", ?", len(decisionsql.Columns))+`)`)
		if err != nil {
			return mapErr(err)
		}
		defer stmt.Close()
		var args []any
		for i := range records {
			args = decisionsql.Values(append(args[:0], at), &records[i], nanosValue)
			_, err := stmt.ExecContext(ctx, args...)
			if err != nil {
				return fmt.Errorf("record %d: %w", i, mapErr(err))
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("append %d decisions: %w", len(records), err)
	}
	return len(records), nil
}

// ListDecisions returns the records f matches, oldest first.
func (d *Driver) ListDecisions(ctx context.Context, f store.DecisionFilter) ([]store.Decision, error) {
	q, args, newest := decisionsql.Select(f, sqlwhere.Question)
	scan := func(r scanner) (store.Decision, error) {
		var (
			row      decisionsql.Row
			id       int64
			received int64
			at, last sql.NullInt64
		)
		if err := r.Scan(row.Dest([]any{&id, &received}, &at, &last)...); err != nil {
			return store.Decision{}, err
		}
		return row.Decision(id, fromNanos(received), zeroNanos(at), zeroNanos(last))
	}
	out, err := collect(ctx, d.r, scan, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list decisions: %w", err)
	}
	if newest {
		slices.Reverse(out)
	}
	return out, nil
}

// nanosValue is nullNanos for decisionsql.Values.
func nanosValue(t time.Time) any { return nullNanos(t) }

// nullNanos stores the zero time as NULL, others as nanoseconds.
func nullNanos(t time.Time) sql.NullInt64 {
	if t.IsZero() {
		return sql.NullInt64{}
	}
	return sql.NullInt64{Int64: t.UnixNano(), Valid: true}
}

func nullNanosPtr(t *time.Time) sql.NullInt64 {
	if t == nil {
		return sql.NullInt64{}
	}
	return nullNanos(*t)
}

// zeroNanos reads NULL back as the zero time.
func zeroNanos(n sql.NullInt64) time.Time {
	if !n.Valid {
		return time.Time{}
	}
	return fromNanos(n.Int64)
}

// PruneDecisions deletes the records outside r's bounds,
// store.PruneBatch per transaction (decisionsql.Prune).
func (d *Driver) PruneDecisions(ctx context.Context, r store.DecisionRetention) (int64, error) {
	return decisionsql.Prune(ctx, r, pruner{d})
}

// pruner runs decisionsql.Prune's statements: each DELETE in its own
// short write transaction, reads on the reader pool.
type pruner struct{ d *Driver }

func (pruner) Param(n int) string       { return sqlwhere.Question(n) }
func (pruner) Received(t time.Time) any { return t.UnixNano() }

func (p pruner) Delete(ctx context.Context, q string, args ...any) (int64, error) {
	var n int64
	err := p.d.inTx(ctx, func(t *txn) error {
		res, err := t.wr.ExecContext(ctx, q, args...)
		if err != nil {
			return mapErr(err)
		}
		n, err = res.RowsAffected()
		return err
	})
	return n, err
}

func (p pruner) Names(ctx context.Context, q string) ([]string, error) {
	return collect(ctx, p.d.r, func(r scanner) (string, error) {
		var name string
		return name, r.Scan(&name)
	}, q)
}

func (p pruner) ID(ctx context.Context, q string, args ...any) (id int64, found bool, err error) {
	err = p.d.r.QueryRowContext(ctx, q, args...).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, nil
	}
	return id, err == nil, mapErr(err)
}
