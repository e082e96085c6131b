// Package pgtest gives each test its own freshly migrated Postgres database
// on the project's throwaway server, so tests can run in parallel.
//
// The server is FENCEGATE_TEST_DATABASE_URL when set, otherwise the one
// `deploy/dev/pg.sh start` runs (make test starts it).
//
// It must never be imported by code that ships, nor hand two tests one
// database: a test that shares its database cannot claim what it proves.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencegate/fencegate/leasestore"
	"github.com/fencegate/fencegate/materializer/schema"
)

// DefaultURL is the development server of deploy/dev/pg.sh.
const DefaultURL = "postgres://fencegate@127.0.0.1:54329/fencegate?sslmode=disable"

// ServerURL returns the URL of the test server's maintenance database.
func ServerURL() string {
	if u := os.Getenv("FENCEGATE_TEST_DATABASE_URL"); u != "" {
		return u
	}
	return DefaultURL
}

// DB is one isolated test database.
type DB struct {
	URL  string
	Pool *pgxpool.Pool
}

// New creates an empty database for t with both migration lines applied
// (the lease store's and the ledger's), dropped when t ends.
func New(t testing.TB) *DB {
	t.Helper()
	db := NewEmpty(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := leasestore.Migrate(ctx, db.Pool); err != nil {
		t.Fatalf("pgtest: migrate the lease store: %v", err)
	}
	if _, err := schema.Migrate(ctx, db.Pool); err != nil {
		t.Fatalf("pgtest: migrate the ledger: %v", err)
	}
	return db
}

// NewEmpty creates an empty, unmigrated database for t.
func NewEmpty(t testing.TB) *DB {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, ServerURL())
	if err != nil {
		t.Fatalf("pgtest: connect to %s: %v (run `make test`, or `deploy/dev/pg.sh start`, "+
			"or set FENCEGATE_TEST_DATABASE_URL)", ServerURL(), err)
	}
	defer admin.Close(ctx)
	name := "fgtest_" + randomHex(8)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("pgtest: create database: %v", err)
	}
	dbURL := withDatabase(t, ServerURL(), name)
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		t.Fatalf("pgtest: pool: %v", err)
	}
	t.Cleanup(func() { dropDatabase(t, pool, name) })
	return &DB{URL: dbURL, Pool: pool}
}

func dropDatabase(t testing.TB, pool *pgxpool.Pool, name string) {
	pool.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, ServerURL())
	if err != nil {
		t.Logf("pgtest: drop %s: %v", name, err)
		return
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
		t.Logf("pgtest: drop %s: %v", name, err)
	}
}

func withDatabase(t testing.TB, raw, name string) string {
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatalf("pgtest: bad server URL: %v", err)
	}
	u.Path = "/" + name
	return u.String()
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// WaitExpired polls database time until lease name has ended (expired or
// released), on a short ticker with a deadline; tests use it to wait out a
// TTL without sleeping for a guessed duration.
func WaitExpired(t testing.TB, store *leasestore.Store, name string) {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(20 * time.Second)
	for {
		l, err := store.Get(context.Background(), name)
		if err != nil {
			t.Fatal(err)
		}
		if !l.Live() {
			return
		}
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("lease %s did not expire", name)
		}
	}
}

// WaitLockWaiter waits until a session of db's database waits for a lock,
// polling with a deadline; it fails the test if answered delivers first
// (the call that should be waiting answered instead).
func WaitLockWaiter(t testing.TB, db *DB, answered <-chan error) {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(10 * time.Second)
	for {
		var n int
		if err := db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		select {
		case err := <-answered:
			t.Fatalf("answered (%v) while it should wait for a lock", err)
		case <-tick.C:
		case <-deadline:
			t.Fatal("no session waited for a lock within 10s")
		}
	}
}
