package materializer

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The keepers of a ledger database's fences and checkpoints (ledger
// migration 0008, ledger_owner).
const (
	ownerLedger = "ledger" // the Postgres ledger (Materializer.Run)
	ownerMirror = "mirror" // a kafka-only trusted sink's mirror
)

// ErrDatabaseTaken is returned (wrapped) by Run when the ledger database
// is kept by the other of the Postgres ledger and a trusted sink's
// mirror: both write its fences and checkpoints, by different rules, and
// the mirror's fences made the ledger refuse valid records (FM85).
var ErrDatabaseTaken = errors.New("materializer: the ledger database is kept by another kind of instance")

// claimDatabase claims pool's database for kind, or refuses when the
// other kind keeps it.
func claimDatabase(ctx context.Context, pool *pgxpool.Pool, kind string) error {
	if _, err := pool.Exec(ctx, qClaimDatabase, kind); err != nil {
		return fmt.Errorf("materializer: claim the ledger database (ledger migration 8: run `fencegate migrate`): %w", err)
	}
	owner := ownerLedger
	err := pool.QueryRow(ctx, qDatabaseOwner).Scan(&owner)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("materializer: read the ledger database's owner: %w", err)
	}
	switch {
	case owner == kind:
		return nil
	case owner == ownerLedger:
		return fmt.Errorf("%w: its fences and checkpoints are kept by a Postgres ledger (materialize --sinks postgres); "+
			"give the kafka-only trusted sink's mirror a database of its own (--database-url), or run it with --no-checkpoint-mirror", ErrDatabaseTaken)
	}
	return fmt.Errorf("%w: its fences and checkpoints are kept by a kafka-only trusted sink's mirror; "+
		"give the Postgres ledger a database of its own (--database-url), or run both sinks in one process (--sinks postgres,kafka)", ErrDatabaseTaken)
}
