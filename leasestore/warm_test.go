package leasestore_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencegate/fencegate/internal/pgtest"
	"github.com/fencegate/fencegate/leasestore"
)

// preparedOn lists the statements prepared on one connection, as Postgres
// sees them.
func preparedOn(t *testing.T, ctx context.Context, c *pgxpool.Conn) map[string]bool {
	t.Helper()
	rows, err := c.Query(ctx, `SELECT statement FROM pg_prepared_statements`)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, s := range mustCollect(t, rows) {
		got[s] = true
	}
	return got
}

func mustCollect(t *testing.T, rows pgx.Rows) []string {
	t.Helper()
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// poolStore opens a pool of at most n connections on a migrated test
// database (tune adjusts its configuration) and a Store on it.
func poolStore(t *testing.T, ctx context.Context, n int32, tune func(*pgxpool.Config)) (*pgtest.DB, *pgxpool.Pool, *leasestore.Store) {
	t.Helper()
	db := pgtest.New(t)
	cfg, err := pgxpool.ParseConfig(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = n
	if tune != nil {
		tune(cfg)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	store, err := leasestore.New(pool, leasestore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return db, pool, store
}

// TestWarmPreparesEveryConnection: after Warm(n) the pool holds n open
// connections and every one has every worker-path statement prepared, so
// the first renewal wave after a start neither opens a connection nor
// plans a statement.
func TestWarmPreparesEveryConnection(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const n = 3
	_, pool, store := poolStore(t, ctx, n, nil)
	if err := store.Warm(ctx, n); err != nil {
		t.Fatal(err)
	}
	if got := pool.Stat().TotalConns(); got != n {
		t.Fatalf("pool holds %d connections after Warm(%d)", got, n)
	}
	var held []*pgxpool.Conn
	defer func() {
		for _, c := range held {
			c.Release()
		}
	}()
	for i := range n {
		c, err := pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
		got := preparedOn(t, ctx, c)
		for _, q := range leasestore.WorkerPath {
			if !got[q] {
				t.Errorf("connection %d lacks a worker-path statement (%d prepared): %.60q", i, len(got), q)
			}
		}
	}
}

// TestPrepareConnBeforeMigration: a connection opened before the
// migrations ran (the gateway's pool while it migrates) is accepted with
// nothing prepared, instead of failing the pool.
func TestPrepareConnBeforeMigration(t *testing.T) {
	db := pgtest.NewEmpty(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if err := leasestore.PrepareConn(ctx, conn); err != nil {
		t.Fatalf("PrepareConn on an unmigrated database: %v", err)
	}
}

// TestStoreOnPreparedConnections: a lease's whole life through a pool
// whose connections prepared the worker path when they opened.
func TestStoreOnPreparedConnections(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db, pool, store := poolStore(t, ctx, 1, func(c *pgxpool.Config) { c.AfterConnect = leasestore.PrepareConn })
	b := &testBundle{db: db, store: store, ctx: ctx}
	l := acquireActive(t, b, "shard:1", "w1", time.Minute)
	if _, err := store.Renew(ctx, "shard:1", "w1", l.Token, time.Minute, ""); err != nil {
		t.Fatalf("renew: %v", err)
	}
	if _, err := store.Release(ctx, "shard:1", "w1", l.Token); err != nil {
		t.Fatalf("release: %v", err)
	}
	c, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	if got := preparedOn(t, ctx, c); len(got) < len(leasestore.WorkerPath) {
		t.Errorf("%d statements prepared on the pool's connection, want at least %d", len(got), len(leasestore.WorkerPath))
	}
}

// TestPreparedStatementsSurviveAMigration: a migration that changes a
// column the worker path returns (a rolling upgrade) fails the requests
// that meet the old plan on the connections they had, and the connections
// are replaced, so the requests after those succeed.
func TestPreparedStatementsSurviveAMigration(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const n = 2
	db, _, store := poolStore(t, ctx, n, func(c *pgxpool.Config) { c.MinConns, c.AfterConnect = n, leasestore.PrepareConn })
	if err := store.Warm(ctx, n); err != nil {
		t.Fatal(err)
	}
	b := &testBundle{db: db, store: store, ctx: ctx}
	l := acquireActive(t, b, "shard:1", "w1", time.Minute)
	if _, err := db.Pool.Exec(ctx, `ALTER TABLE leases ALTER COLUMN holder TYPE varchar(300)`); err != nil {
		t.Fatal(err)
	}
	failed := 0
	for range 2 * n {
		if _, err := store.Renew(ctx, "shard:1", "w1", l.Token, time.Minute, ""); err != nil {
			failed++
		}
	}
	if failed > n {
		t.Fatalf("%d of %d renewals failed after the migration; at most one per connection (%d) may", failed, 2*n, n)
	}
	for i := range 3 {
		if _, err := store.Renew(ctx, "shard:1", "w1", l.Token, time.Minute, ""); err != nil {
			t.Fatalf("renewal %d after the pool was replaced: %v", i, err)
		}
	}
}
