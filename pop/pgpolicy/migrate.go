package pgpolicy

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"sort"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// Migration is one versioned schema file of migrations/.
type Migration struct {
	Version string // file name, e.g. "0001_design_schema.sql"
	SQL     string
}

// Migrations are the embedded schema files in version order.
func Migrations() ([]Migration, error) {
	names, err := fs.Glob(migrationFS, "migrations/*.sql")
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	out := make([]Migration, 0, len(names))
	for _, n := range names {
		b, err := migrationFS.ReadFile(n)
		if err != nil {
			return nil, err
		}
		out = append(out, Migration{Version: n[len("migrations/"):], SQL: string(b)})
	}
	return out, nil
}

// Migrate applies the migrations not yet recorded in
// poplimit_schema_migrations, each in its own transaction under an
// advisory lock (concurrent migrators wait for each other). Idempotent: a
// second run applies nothing. It returns the versions it applied.
func Migrate(ctx context.Context, pool *pgxpool.Pool) ([]string, error) {
	ms, err := Migrations()
	if err != nil {
		return nil, err
	}
	var applied []string
	for _, m := range ms {
		done := false
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(7161616)`); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS poplimit_schema_migrations (version TEXT PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())`); err != nil {
				return err
			}
			var n int
			if err := tx.QueryRow(ctx, `SELECT count(*) FROM poplimit_schema_migrations WHERE version = $1`, m.Version).Scan(&n); err != nil {
				return err
			}
			if n > 0 {
				done = true
				return nil
			}
			if _, err := tx.Exec(ctx, m.SQL); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `INSERT INTO poplimit_schema_migrations (version) VALUES ($1)`, m.Version)
			return err
		})
		if err != nil {
			return applied, fmt.Errorf("%w: %s: %v", ErrMigrate, m.Version, err)
		}
		if !done {
			applied = append(applied, m.Version)
		}
	}
	return applied, nil
}
