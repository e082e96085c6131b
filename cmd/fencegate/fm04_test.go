package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/pgtest"
	"github.com/fencegate/fencegate/leasestore"
)

// TestFM04_ServeRefusesCachedSequence: `fencegate serve` itself refuses to
// start on a token sequence with CACHE 50 (two backends would hold
// different blocks, and a later grant could get a lower token): it
// returns ErrUnsafeSequence and never listens.
func TestFM04_ServeRefusesCachedSequence(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	if _, err := db.Pool.Exec(ctx, `ALTER SEQUENCE lease_token_seq CACHE 50`); err != nil {
		t.Fatal(err)
	}
	ready := make(chan string, 1)
	f := serveFlags{listen: "127.0.0.1:0", replica: "r1", minTTL: time.Millisecond, maxTTL: time.Hour,
		txnTimeout: 10 * time.Second, commonFlags: commonFlags{databaseURL: db.URL, brokers: "127.0.0.1:1",
			configPath: routeConfig(t, "shard-output", 16), barrierKey: "0123456789abcdef0123"}}
	err := serve(ctx, f, slog.New(slog.NewTextHandler(io.Discard, nil)), ready)
	if !errors.Is(err, leasestore.ErrUnsafeSequence) {
		t.Fatalf("serve on a CACHE 50 sequence: %v, want ErrUnsafeSequence", err)
	}
	select {
	case addr := <-ready:
		t.Fatalf("serve listened on %s with an unsafe sequence", addr)
	default:
	}
}
