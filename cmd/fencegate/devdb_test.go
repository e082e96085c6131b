package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/internal/pgtest"
)

// ledgerRows counts what dev clears: consumed positions (the ledger's)
// and recorded route placements; mine counts only those addLedgerRows
// wrote (a running dev records placements and positions of its own).
func ledgerRows(t *testing.T, dbURL string, mine bool) (positions, placements int) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	q := `SELECT (SELECT count(*) FROM consumer_positions), (SELECT count(*) FROM route_placements)`
	if mine {
		q = `SELECT (SELECT count(*) FROM consumer_positions WHERE topic = 'legacy-output' AND next_offset = 42),
			(SELECT count(*) FROM route_placements WHERE pattern = 'legacy:*' AND partitions = 7)`
	}
	if err := conn.QueryRow(ctx, q).Scan(&positions, &placements); err != nil {
		t.Fatal(err)
	}
	return positions, placements
}

func addLedgerRows(t *testing.T, dbURL string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `INSERT INTO consumer_positions (topic, partition, next_offset) VALUES ('legacy-output', 3, 42);
		INSERT INTO route_placements (pattern, version, topic, partitions) VALUES ('legacy:*', 1, 'legacy-output', 7);
		INSERT INTO rollout_states (pattern, state, version, changed_by) VALUES ('legacy:*', 'observe', 1, 'ops')`); err != nil {
		t.Fatal(err)
	}
}

// TestFM45_DevNeverClearsADatabaseItDidNotCreate: `fencegate dev` with
// FENCEGATE_DATABASE_URL (or --database-url) naming a database it did not
// create (here a migrated one holding a ledger position and a route
// placement, as a real deployment's would) refuses to start and leaves the
// ledger and the placements as they were. It used to truncate them and run.
// Not parallel: it sets FENCEGATE_DATABASE_URL, as the shell of the
// operator who found it had.
func TestFM45_DevNeverClearsADatabaseItDidNotCreate(t *testing.T) {
	db := pgtest.New(t)
	addLedgerRows(t, db.URL)
	loopback := []string{"--config", "../../deploy/dev/fencegate.yaml", "--listen", "127.0.0.1:0", "--kafka-listen", "127.0.0.1:0", "--materializer-listen", "127.0.0.1:0"}
	for _, c := range []struct {
		name string
		env  bool
		args []string
	}{
		{"FENCEGATE_DATABASE_URL", true, loopback},
		{"--database-url", false, append([]string{"--database-url", db.URL}, loopback...)},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.env {
				t.Setenv("FENCEGATE_DATABASE_URL", db.URL)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			var stderr bytes.Buffer
			code := run(ctx, append([]string{"dev"}, c.args...), &bytes.Buffer{}, &stderr)
			if code != 1 || !strings.Contains(stderr.String(), "not created by `fencegate dev`") {
				t.Errorf("dev on a database it did not create: exit %d:\n%s", code, stderr.String())
			}
			if pos, pl := ledgerRows(t, db.URL, true); pos != 1 || pl != 1 {
				t.Fatalf("dev touched a database it did not create: %d positions and %d placements left of 1 and 1", pos, pl)
			}
		})
	}
}

// TestFM45_DevUsesADatabaseOfItsOwn: dev's default database is its own
// (fencegate_dev), not the `fencegate` database operators and scripts use;
// a database named that does not exist is created and marked, and dev
// clears the ledger and placements of a database it marked, at each start.
func TestFM45_DevUsesADatabaseOfItsOwn(t *testing.T) {
	t.Parallel()
	var help bytes.Buffer
	if code := run(context.Background(), []string{"dev", "-h"}, &bytes.Buffer{}, &help); code != 0 ||
		!strings.Contains(help.String(), "(default "+devDatabaseURL+")") || !strings.Contains(devDatabaseURL, "/fencegate_dev?") {
		t.Fatalf("dev -h: exit %d, want the default %s:\n%s", code, devDatabaseURL, help.String())
	}

	ctx := context.Background()
	dbURL := newDevDatabaseURL(t)
	if err := resetDevDatabase(ctx, dbURL, discard); err != nil {
		t.Fatalf("dev on a database that does not exist: %v", err)
	}
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	var mark string
	err = conn.QueryRow(ctx, qDevDatabaseMark).Scan(&mark)
	conn.Close(ctx)
	if err != nil || mark != devDatabaseMark {
		t.Fatalf("the created database's mark: %q %v", mark, err)
	}
	addLedgerRows(t, dbURL)
	if err := resetDevDatabase(ctx, dbURL, discard); err != nil {
		t.Fatalf("dev on its own database: %v", err)
	}
	if pos, pl := ledgerRows(t, dbURL, false); pos != 0 || pl != 0 {
		t.Fatalf("dev left %d positions and %d placements in its own database", pos, pl)
	}
	// Its broker starts without the rollout markers: a state left here
	// would tell the gateway observe while the ledger judges enforced.
	conn, err = pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var states int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM rollout_states`).Scan(&states); err != nil || states != 0 {
		t.Fatalf("dev left %d rollout states in its own database (%v)", states, err)
	}
}

// newDevDatabaseURL names a database that does not exist yet on the test
// server (dev creates and marks it), dropped when the test ends.
func newDevDatabaseURL(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	name := "fgtest_dev_" + hex.EncodeToString(b)
	u, err := url.Parse(pgtest.ServerURL())
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	t.Cleanup(func() {
		conn, err := pgx.Connect(ctx, pgtest.ServerURL())
		if err != nil {
			t.Logf("drop %s: %v", name, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Logf("drop %s: %v", name, err)
		}
	})
	return u.String()
}

// TestFM93_DevJoinServesOnlyDevsDatabase: `fencegate dev --join` with
// --database-url naming a database dev did not create (a migrated one,
// as a deployment's) refuses to start: it would serve that database's
// leases to the public development token and replica credential. Before,
// it served it.
func TestFM93_DevJoinServesOnlyDevsDatabase(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var stderr bytes.Buffer
	code := run(ctx, []string{"dev", "--join", "--database-url", db.URL, "--config", "../../deploy/dev/fencegate.yaml",
		"--listen", "127.0.0.1:0", "--kafka-listen", "127.0.0.1:1"}, &bytes.Buffer{}, &stderr)
	if code != 1 || !strings.Contains(stderr.String(), "not created by `fencegate dev`") {
		t.Fatalf("dev --join on a database dev did not create: exit %d:\n%s", code, stderr.String())
	}
}
