package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/portcullis-dev/portcullis/migrations"
)

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
