package main

import (
	"context"
	"testing"
	"time"

	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/internal/pgtest"
)

// TestServeStartsWithItsPoolOpen: once serve says it is ready, every
// connection of the lease store's pool (32) is open, on a database it
// migrated itself, so the first renewal wave after a cold start opens
// none (leasestore's warm tests prove each is prepared).
func TestServeStartsWithItsPoolOpen(t *testing.T) {
	t.Parallel()
	db := pgtest.NewEmpty(t)
	startServeOn(t, db, gateway.ServerConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var open int
	err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid()`).Scan(&open)
	if err != nil {
		t.Fatal(err)
	}
	if open < 32 {
		t.Errorf("%d connections open to the lease store when serve was ready, want its whole pool (32)", open)
	}
}
