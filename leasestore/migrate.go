package leasestore

import (
	"context"
	"embed"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencegate/fencegate/internal/migrate"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// line is the lease store's migrations: leases, the token sequence, the
// lease history and the replica registry. The ledger's tables have their
// own line (materializer/schema).
var line = migrate.Line{Files: migrationFiles, Dir: "migrations", Table: "schema_migrations",
	LockID: 0x66656e6365} // "fence"

// Migration is one numbered SQL file of the lease store's schema.
type Migration = migrate.Migration

// Migrations returns the embedded migrations in version order.
func Migrations() ([]Migration, error) { return line.Migrations() }

// Migrate applies every embedded migration not yet applied, each in its own
// transaction, and returns the versions it applied.
func Migrate(ctx context.Context, pool *pgxpool.Pool) ([]int, error) { return line.Apply(ctx, pool) }
