// Package schema owns the ledger's tables (fences, accepted_records,
// rejected_records, consumer_positions, kept_records, rollout_marks,
// checkpoints, ledger_retention, ledger_owner) and its views applied_keys and ledger_records: their
// migration line, recorded in ledger_migrations, and the reset a
// development broker needs. The lease store's tables have a line of their own.
//
// It must never import the gateway or the lease store: the ledger's
// schema belongs to the materializer alone, and its tables and columns
// are a contract with downstream readers.
package schema

import (
	"context"
	"embed"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencegate/fencegate/internal/migrate"
)

//go:embed migrations/*.sql
var files embed.FS

var line = migrate.Line{Files: files, Dir: "migrations", Table: "ledger_migrations",
	LockID: 0x6c6564676572} // "ledger"

// Migration is one numbered SQL file of the ledger's schema.
type Migration = migrate.Migration

// Migrations returns the ledger's migrations in version order.
func Migrations() ([]Migration, error) { return line.Migrations() }

// Migrate applies every ledger migration not yet applied and returns the
// versions it applied.
func Migrate(ctx context.Context, pool *pgxpool.Pool) ([]int, error) { return line.Apply(ctx, pool) }

// qReset empties the ledger and its positions. Only for a development
// broker that starts empty: the ledger of an earlier run would point at
// offsets that no longer exist.
const qReset = `TRUNCATE fences, accepted_records, rejected_records, consumer_positions, checkpoints, kept_records, rollout_marks, ledger_owner`

// Reset empties the ledger (development only; see qReset).
func Reset(ctx context.Context, pool *pgxpool.Pool) error {
	_, err := pool.Exec(ctx, qReset)
	return err
}
