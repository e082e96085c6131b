package materializer_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/pgtest"
	"github.com/fencegate/fencegate/materializer"
)

// TestFM85_MirrorAndLedgerNeverShareADatabase: a kafka-only trusted
// sink's mirror writes the fences and checkpoints of the database it is
// given; on a database a Postgres ledger keeps, its fences made the
// ledger refuse valid records (bad_barrier, stale). Whichever of the two
// starts second on a database the other keeps refuses to start, naming
// the other, and changes nothing: once with the ledger first, once with
// the mirror first.
func TestFM85_MirrorAndLedgerNeverShareADatabase(t *testing.T) {
	t.Parallel()
	b := setup(t)
	last := b.trustedWorkload()
	b.runUntil(b.newMaterializer(nil), b.db, 1, last)
	fences := stateRows(t, b.db)
	onLedger := func(c *materializer.TrustedConfig) { c.Mirror = b.db.Pool }
	err := b.runTrustedUntil(b.newTrusted("mirror", onLedger, nil), 1, last)
	if err == nil || !strings.Contains(err.Error(), "kept by a Postgres ledger") {
		t.Fatalf("a mirror on the ledger's database: %v, want a refusal naming the Postgres ledger", err)
	}
	if got := stateRows(t, b.db); got != fences {
		t.Fatalf("the refused mirror changed the ledger's fences or checkpoints:\n%s\nwant:\n%s", got, fences)
	}

	own := pgtest.New(t)
	onOwn := func(c *materializer.TrustedConfig) { c.Mirror = own.Pool }
	if err := b.runTrustedUntil(b.newTrusted("mirror-own", onOwn, nil), 1, last); err != nil {
		t.Fatalf("a mirror on a database of its own: %v", err)
	}
	mirrored := stateRows(t, own) + positions(t, own)
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	err = b.newMaterializerOn(own, nil).Run(ctx)
	if err == nil || !strings.Contains(err.Error(), "kept by a kafka-only trusted sink's mirror") {
		t.Fatalf("a Postgres ledger on the mirror's database: %v, want a refusal naming the mirror", err)
	}
	if got := stateRows(t, own) + positions(t, own); got != mirrored {
		t.Fatalf("the refused ledger changed the mirror's tables:\n%s\nwant:\n%s", got, mirrored)
	}
}

// positions renders a ledger database's consumer positions.
func positions(t *testing.T, db *pgtest.DB) string {
	t.Helper()
	return dumpRows(t, db, `SELECT topic, partition, next_offset FROM consumer_positions ORDER BY topic, partition`)
}
