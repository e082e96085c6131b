package schema_test

import (
	"context"
	"fmt"
	"strings"
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
	if err != nil || len(applied) != len(ledger) {
		t.Fatalf("the ledger's line on an old database: applied %v, %v", applied, err)
	}
	var owner string
	if err := db.Pool.QueryRow(ctx, `SELECT owner_id FROM applied_keys WHERE lease = 'shard:1' AND batch_id = 'b-1'`).Scan(&owner); err != nil || owner != "o1" {
		t.Fatalf("applied key's owner after the ledger's migration 2: %q %v, want o1 (from the lease history)", owner, err)
	}
	// The dedup rule since migration 3: the ledger's unique key, which
	// the materializer's ON CONFLICT names (applied_keys is its view).
	offset := int64(10)
	insert := func(owner string) int64 {
		offset++
		tag, err := db.Pool.Exec(ctx, `INSERT INTO accepted_records (lease, owner_id, token, batch_id, seq, topic, partition, "offset")
			VALUES ('shard:1', $1, 8, 'b-1', 0, 't', 1, $2) ON CONFLICT (lease, owner_id, batch_id, seq, partition) DO NOTHING`, owner, offset)
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

// TestAppliedKeysBecomeTheLedgersView: migration 3 replaces the applied_keys
// table, a second copy of accepted_records' dedup key, by a view of that
// key: a ledger migrated with records keeps every key readable under the
// old name and columns, and TRUNCATE of the ledger (Reset) empties it.
func TestAppliedKeysBecomeTheLedgersView(t *testing.T) {
	t.Parallel()
	db := pgtest.NewEmpty(t)
	ctx := context.Background()
	ms := migrateTo(t, db, 2)
	seed(t, db, `INSERT INTO accepted_records (lease, owner_id, token, batch_id, seq, topic, partition, "offset")
		VALUES ('shard:1', 'o1', 3, 'b-1', 0, 't', 1, 10), ('shard:1', 'o1', 3, 'b-1', 1, 't', 1, 11)`,
		`INSERT INTO applied_keys (lease, owner_id, batch_id, seq) VALUES ('shard:1', 'o1', 'b-1', 0), ('shard:1', 'o1', 'b-1', 1)`)
	if applied, err := schema.Migrate(ctx, db.Pool); err != nil || len(applied) != len(ms)-2 {
		t.Fatalf("migrations after 2: applied %v, %v", applied, err)
	}
	var kind string
	if err := db.Pool.QueryRow(ctx, `SELECT relkind::text FROM pg_class WHERE oid = 'applied_keys'::regclass`).Scan(&kind); err != nil || kind != "v" {
		t.Fatalf("applied_keys is of kind %q (%v), want a view (v)", kind, err)
	}
	keys := func() string {
		rows, err := db.Pool.Query(ctx, `SELECT lease, owner_id, batch_id, seq FROM applied_keys ORDER BY seq`)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for rows.Next() {
			vals, _ := rows.Values()
			out = append(out, fmt.Sprintf("%v %v %v %v", vals...))
		}
		rows.Close()
		return strings.Join(out, "; ")
	}
	if got, want := keys(), "shard:1 o1 b-1 0; shard:1 o1 b-1 1"; got != want {
		t.Fatalf("applied_keys after migration 3: %q, want %q", got, want)
	}
	if err := schema.Reset(ctx, db.Pool); err != nil {
		t.Fatalf("Reset with applied_keys a view: %v", err)
	}
	if got := keys(); got != "" {
		t.Fatalf("applied_keys after Reset: %q, want none", got)
	}
}

// TestAppliedKeysMigrationRefusesToForgetAKey: a key in the applied_keys
// table without its ledger row is dedup memory the view could not carry;
// migration 3 refuses the ledger, and leaves the table as it was.
func TestAppliedKeysMigrationRefusesToForgetAKey(t *testing.T) {
	t.Parallel()
	db := pgtest.NewEmpty(t)
	ctx := context.Background()
	migrateTo(t, db, 2)
	seed(t, db, `INSERT INTO applied_keys (lease, owner_id, batch_id, seq) VALUES ('shard:1', 'o1', 'b-1', 0)`)
	_, err := schema.Migrate(ctx, db.Pool)
	if err == nil || !strings.Contains(err.Error(), "applied_keys holds keys that accepted_records does not") {
		t.Fatalf("migration 3 over a key without its ledger row: %v, want a refusal", err)
	}
	var n int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM applied_keys WHERE batch_id = 'b-1'`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("the key after the refused migration: %d rows, %v; want it kept", n, err)
	}
}

// migrateTo applies the ledger's migrations up to version v as the line
// records them, and returns the whole line.
func migrateTo(t *testing.T, db *pgtest.DB, v int) []schema.Migration {
	t.Helper()
	ms, err := schema.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	seed(t, db, `CREATE TABLE ledger_migrations (version integer PRIMARY KEY, name text NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT clock_timestamp())`)
	for _, m := range ms[:v] {
		seed(t, db, m.SQL)
		if _, err := db.Pool.Exec(context.Background(), `INSERT INTO ledger_migrations (version, name) VALUES ($1, $2)`, m.Version, m.Name); err != nil {
			t.Fatal(err)
		}
	}
	return ms
}

func seed(t *testing.T, db *pgtest.DB, qs ...string) {
	t.Helper()
	for _, q := range qs {
		if _, err := db.Pool.Exec(context.Background(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}
