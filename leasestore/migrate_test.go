package leasestore_test

import (
	"context"
	"testing"

	"github.com/fencegate/fencegate/internal/pgtest"
	"github.com/fencegate/fencegate/leasestore"
)

// TestMigration0004_DedupKeyScopedToOwner: on a ledger written before
// 0004, the migration fills each record's owner from the lease history by
// token, and afterwards another owner's batch with the same id and seq is
// a new key while the same owner's is still a duplicate (FM26).
func TestMigration0004_DedupKeyScopedToOwner(t *testing.T) {
	t.Parallel()
	db := pgtest.NewEmpty(t)
	ctx := context.Background()
	ms, err := leasestore.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	apply := func(keep func(v int) bool) {
		for _, m := range ms {
			if keep(m.Version) {
				if _, err := db.Pool.Exec(ctx, m.SQL); err != nil {
					t.Fatalf("%s: %v", m.Name, err)
				}
			}
		}
	}
	apply(func(v int) bool { return v < 4 })
	for _, q := range []string{
		`INSERT INTO lease_events (name, kind, token, owner_id, holder, expires_at) VALUES ('shard:1', 'acquired', 7, 'o1', 'r', now())`,
		`INSERT INTO accepted_records (lease, token, batch_id, seq, topic, partition, "offset") VALUES ('shard:1', 7, 'b-1', 0, 't', 1, 10)`,
		`INSERT INTO applied_keys (lease, batch_id, seq) VALUES ('shard:1', 'b-1', 0)`,
	} {
		if _, err := db.Pool.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	apply(func(v int) bool { return v == 4 })
	var owner string
	if err := db.Pool.QueryRow(ctx, `SELECT owner_id FROM applied_keys WHERE lease = 'shard:1' AND batch_id = 'b-1'`).Scan(&owner); err != nil || owner != "o1" {
		t.Fatalf("applied key's owner after 0004: %q %v, want o1 (from the lease history)", owner, err)
	}
	insert := func(owner string) int64 {
		tag, err := db.Pool.Exec(ctx, `INSERT INTO applied_keys (lease, owner_id, batch_id, seq) VALUES ('shard:1', $1, 'b-1', 0) ON CONFLICT DO NOTHING`, owner)
		if err != nil {
			t.Fatal(err)
		}
		return tag.RowsAffected()
	}
	if n := insert("o2"); n != 1 {
		t.Fatal("another owner's b-1 is taken for a duplicate after 0004")
	}
	if n := insert("o1"); n != 0 {
		t.Fatal("the same owner's b-1 is no longer a duplicate after 0004")
	}
}
