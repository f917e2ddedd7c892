package sqlite

import (
	"context"
	"time"

	"github.com/portcullis-dev/portcullis/store/internal/sqlwhere"
)

// engine runs the statements both engines share (sqlexec.Engine:
// sentrysql, tooldefsql) in the writer's transaction or on the read pool.
type engine struct{ db querier }

func (engine) Param(n int) string   { return sqlwhere.Numbered(n) }
func (engine) Time(t time.Time) any { return nanos(t) }

func (e engine) Exec(ctx context.Context, q string, args ...any) error {
	_, err := e.db.ExecContext(ctx, q, args...)
	return mapErr(err)
}

func (e engine) Rows(ctx context.Context, q string, args []any, each func(func(...any) error) error) error {
	_, err := collect(ctx, e.db, func(r scanner) (struct{}, error) { return struct{}{}, each(r.Scan) }, q, args...)
	return err
}
