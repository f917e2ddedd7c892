package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/portcullis-dev/portcullis/store/internal/sqlwhere"
)

// engine runs the statements both engines share (sqlexec.Engine:
// sentrysql, tooldefsql) on the pool or a transaction.
type engine struct{ db dbtx }

func (engine) Param(n int) string   { return sqlwhere.Dollar(n) }
func (engine) Time(t time.Time) any { return t }

func (e engine) Exec(ctx context.Context, q string, args ...any) error {
	_, err := e.db.Exec(ctx, q, args...)
	return mapErr(err)
}

func (e engine) Rows(ctx context.Context, q string, args []any, each func(func(...any) error) error) error {
	rows, err := e.db.Query(ctx, q, args...)
	_, err = collect(rows, err, func(r pgx.Row) (struct{}, error) { return struct{}{}, each(r.Scan) })
	return err
}
