package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/pgtest"
	"github.com/fencegate/fencegate/materializer"
)

// TestAgeFlagReadsDaysAndDurations: --older-than and --ledger-retention
// take whole days or a Go duration, and refuse anything else.
func TestAgeFlagReadsDaysAndDurations(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]time.Duration{"7d": 7 * 24 * time.Hour, "36h": 36 * time.Hour, "0": 0, "90m": 90 * time.Minute} {
		var d time.Duration
		if err := (age{&d}).Set(in); err != nil || d != want {
			t.Errorf("age %q = %v, %v; want %v", in, d, err, want)
		}
	}
	for _, in := range []string{"7 days", "-1h", "1.5d", "d", "-2d"} {
		var d time.Duration
		if err := (age{&d}).Set(in); err == nil {
			t.Errorf("age %q = %v, want an error", in, d)
		}
	}
}

// TestLedgerPruneCommand: `ledger prune` refuses an age below the
// retention the materializer recorded (exit 1, naming it), counts without
// deleting under --dry-run, and deletes at the retention.
func TestLedgerPruneCommand(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	for _, q := range []string{
		`INSERT INTO consumer_positions VALUES ('t', 0, 2)`,
		`INSERT INTO accepted_records (lease, owner_id, token, batch_id, seq, topic, partition, "offset", value, accepted_at)
		 VALUES ('shard:1', 'o', 1, 'b', 0, 't', 0, 0, 'v', now() - interval '3 days'), ('shard:1', 'o', 1, 'b', 1, 't', 0, 1, 'v', now())`,
	} {
		if _, err := db.Pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if err := materializer.SetRetention(ctx, db.Pool, 48*time.Hour); err != nil {
		t.Fatal(err)
	}
	prune := func(args ...string) (int, string) {
		var out, errb bytes.Buffer
		code := run(ctx, append([]string{"ledger", "prune", "--database-url", db.URL}, args...), &out, &errb)
		return code, out.String() + errb.String()
	}
	rows := func() int64 {
		var n int64
		if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM accepted_records`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if code, out := prune("--older-than", "1d"); code != 1 || !strings.Contains(out, "below the ledger's retention 48h0m0s") {
		t.Fatalf("prune --older-than 1d under a 48h retention: exit %d, %q; want 1 naming the retention", code, out)
	}
	if code, out := prune("--dry-run"); code != 0 || !strings.Contains(out, "would delete (dry run) accepted 1,") || rows() != 2 {
		t.Fatalf("prune --dry-run: exit %d, %q, %d rows left; want 1 counted and 2 left", code, out, rows())
	}
	if code, out := prune(); code != 0 || !strings.Contains(out, "deleted accepted 1,") || rows() != 1 {
		t.Fatalf("prune: exit %d, %q, %d rows left; want the 3-day-old row deleted", code, out, rows())
	}
}
