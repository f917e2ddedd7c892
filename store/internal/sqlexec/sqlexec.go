// Package sqlexec is what the SQL both store engines share runs on: an
// Engine each driver implements once (its placeholders, how it binds a
// time, one statement, the rows of a query), in a transaction or on its
// own, and the scanning of a time stored either engine's way. The shared
// statements (sentrysql, tooldefsql) are written against it.
package sqlexec

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// Engine runs statements on one engine, in a transaction or on its own.
// Errors come back mapped to the store's sentinels.
type Engine interface {
	// Param writes the engine's placeholder for the nth argument.
	Param(n int) string
	// Time binds a time the way the engine stores it.
	Time(t time.Time) any
	// Exec runs one statement.
	Exec(ctx context.Context, q string, args ...any) error
	// Rows runs q and calls each with the scan of every row, in order.
	Rows(ctx context.Context, q string, args []any, each func(scan func(dest ...any) error) error) error
}

// TimeDest is a scan destination for a time stored either way: a
// timestamp (Postgres) or UTC nanoseconds (SQLite). It sets *t in UTC.
func TimeDest(t *time.Time) sql.Scanner { return timeDest{t} }

type timeDest struct{ t *time.Time }

func (d timeDest) Scan(src any) error {
	switch v := src.(type) {
	case time.Time:
		*d.t = v.UTC()
	case int64:
		*d.t = time.Unix(0, v).UTC()
	default:
		return fmt.Errorf("scan time: unexpected %T", src)
	}
	return nil
}

// NullTimeDest is TimeDest for a time that may be NULL: nil then.
func NullTimeDest(t **time.Time) sql.Scanner { return nullTimeDest{t} }

type nullTimeDest struct{ t **time.Time }

func (d nullTimeDest) Scan(src any) error {
	if src == nil {
		*d.t = nil
		return nil
	}
	var t time.Time
	if err := TimeDest(&t).Scan(src); err != nil {
		return err
	}
	*d.t = &t
	return nil
}
