package schema_test

import (
	"context"
	"testing"

	"github.com/fencegate/fencegate/internal/pgtest"
	"github.com/fencegate/fencegate/leasestore"
	"github.com/fencegate/fencegate/materializer/schema"
)

// TestLedgerAdoptsTheOldLineAndScopesDedupToOwner: a database migrated by
// the lease store's line as it was before the ledger had its own (ledger
// tables created by the lease store's migration 2, dedup key without the
// owner) is adopted by the ledger's line; its migration 2 fills each
// record's owner from the lease history by token, and afterwards another
// owner's batch with the same id and seq is a new key while the same
// owner's is still a duplicate (FM26).
func TestLedgerAdoptsTheOldLineAndScopesDedupToOwner(t *testing.T) {
	t.Parallel()
	db := pgtest.NewEmpty(t)
	ctx := context.Background()
	if _, err := leasestore.Migrate(ctx, db.Pool); err != nil {
		t.Fatal(err)
	}
	ledger, err := schema.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	// The old shape: the ledger's first migration run as the lease store
	// ran it, recorded nowhere in the ledger's line.
	if _, err := db.Pool.Exec(ctx, ledger[0].SQL); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`INSERT INTO lease_events (name, kind, token, owner_id, holder, expires_at) VALUES ('shard:1', 'acquired', 7, 'o1', 'r', now())`,
		`INSERT INTO accepted_records (lease, token, batch_id, seq, topic, partition, "offset") VALUES ('shard:1', 7, 'b-1', 0, 't', 1, 10)`,
		`INSERT INTO applied_keys (lease, batch_id, seq) VALUES ('shard:1', 'b-1', 0)`,
	} {
		if _, err := db.Pool.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	applied, err := schema.Migrate(ctx, db.Pool)
	if err != nil || len(applied) != 2 {
		t.Fatalf("the ledger's line on an old database: applied %v, %v", applied, err)
	}
	var owner string
	if err := db.Pool.QueryRow(ctx, `SELECT owner_id FROM applied_keys WHERE lease = 'shard:1' AND batch_id = 'b-1'`).Scan(&owner); err != nil || owner != "o1" {
		t.Fatalf("applied key's owner after the ledger's migration 2: %q %v, want o1 (from the lease history)", owner, err)
	}
	insert := func(owner string) int64 {
		tag, err := db.Pool.Exec(ctx, `INSERT INTO applied_keys (lease, owner_id, batch_id, seq) VALUES ('shard:1', $1, 'b-1', 0) ON CONFLICT DO NOTHING`, owner)
		if err != nil {
			t.Fatal(err)
		}
		return tag.RowsAffected()
	}
	if n := insert("o2"); n != 1 {
		t.Fatal("another owner's b-1 is taken for a duplicate after the ledger's migration 2")
	}
	if n := insert("o1"); n != 0 {
		t.Fatal("the same owner's b-1 is no longer a duplicate after the ledger's migration 2")
	}
}
