package leasestore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencegate/fencegate/internal/pgtest"
	"github.com/fencegate/fencegate/leasestore"
)

// renewCall is one caller's renewal in TestRenewalsThatArriveTogetherShareOneStatement.
type renewCall struct {
	name, owner string
	token       int64
	ttl         time.Duration
	wantLost    leasestore.LostReason // "" when it must renew
}

type renewResult struct {
	l   leasestore.Lease
	err error
}

// TestRenewalsThatArriveTogetherShareOneStatement: renewals that reach the
// store while its renewal statements run share the next statement, and each
// caller gets its own row's answer: its own TTL and expiry, or its own
// refusal. One lease in the shared statement expires while that statement
// runs (it waits for another writer's lock on the row past the lease's
// expiry, in database time): it is refused (FM03), the others renew.
func TestRenewalsThatArriveTogetherShareOneStatement(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// The lockers and the probes use a pool of their own: the store's
	// (four connections) holds the renewal statements.
	cfg, err := pgxpool.ParseConfig(b.db.URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 8
	side, err := pgxpool.NewWithConfig(b.ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(side.Close)
	b = &testBundle{db: &pgtest.DB{URL: b.db.URL, Pool: side}, store: b.store, ctx: b.ctx}
	firstA := acquireActive(t, b, "co:first-a", "w0", time.Minute)
	firstB := acquireActive(t, b, "co:first-b", "w0", time.Minute)
	a := acquireActive(t, b, "co:a", "wa", time.Minute)
	d := acquireActive(t, b, "co:d", "wd", time.Minute)
	wrong := acquireActive(t, b, "co:wrong-token", "wt", time.Minute)
	other := acquireActive(t, b, "co:other-owner", "wo", time.Minute)
	dying := acquireActive(t, b, "co:dying", "wx", 4*time.Second)

	// The first two statements (DefaultRenewStatements run at once) wait
	// for locks on their rows; the shared one waits for a lock on the
	// dying lease's row. The lockers change the rows, so that Postgres
	// checks the renewal's predicate again on the newest row.
	holdA := lockRow(t, b, firstA.Name)
	go func() { _, _ = b.store.Renew(b.ctx, firstA.Name, "w0", firstA.Token, time.Minute, "") }()
	waitFor(t, "the first statement to wait for its lock", func() bool { return lockWaiters(t, b) == 1 })
	holdB := lockRow(t, b, firstB.Name)
	go func() { _, _ = b.store.Renew(b.ctx, firstB.Name, "w0", firstB.Token, time.Minute, "") }()
	waitFor(t, "the second statement to wait for its lock", func() bool { return lockWaiters(t, b) == 2 })
	holdDying := lockRow(t, b, dying.Name)

	calls := []renewCall{
		{name: a.Name, owner: "wa", token: a.Token, ttl: 41 * time.Second},
		{name: d.Name, owner: "wd", token: d.Token, ttl: 43 * time.Second},
		{name: wrong.Name, owner: "wt", token: wrong.Token + 1000, ttl: time.Minute, wantLost: leasestore.LostTokenMismatch},
		{name: other.Name, owner: "someone-else", token: other.Token, ttl: time.Minute, wantLost: leasestore.LostNotOwner},
		{name: dying.Name, owner: "wx", token: dying.Token, ttl: time.Minute, wantLost: leasestore.LostExpired},
	}
	results := make([]chan renewResult, len(calls))
	for i, c := range calls {
		results[i] = make(chan renewResult, 1)
		go func() {
			l, err := b.store.Renew(b.ctx, c.name, c.owner, c.token, c.ttl, "")
			results[i] <- renewResult{l, err}
		}()
	}
	waitFor(t, "the five renewals to queue", func() bool { return leasestore.RenewalsWaiting(b.store) == len(calls) })
	commit(t, holdA)
	waitFor(t, "the shared statement to wait for the dying lease's lock", func() bool {
		return leasestore.RenewalsWaiting(b.store) == 0 && lockWaiters(t, b) == 2
	})
	if !live(t, b, dying.Name) {
		t.Fatal("the dying lease expired before the shared statement reached it; the test proves nothing (a slow machine?)")
	}
	pollExpired(t, b, dying.Name)
	commit(t, holdDying)

	for i, c := range calls {
		r := <-results[i]
		checkAnswer(t, b, c, r)
	}
	commit(t, holdB)
	if n := leasestore.RenewStatements(b.store); n != 3 {
		t.Fatalf("renewal statements = %d, want 3 (two alone, then the five together)", n)
	}
}

func checkAnswer(t *testing.T, b *testBundle, c renewCall, r renewResult) {
	t.Helper()
	if c.wantLost != "" {
		var lost *leasestore.LostError
		if !errors.As(r.err, &lost) || lost.Reason != c.wantLost {
			t.Errorf("renew %s: %v, want lost (%s)", c.name, r.err, c.wantLost)
		}
		return
	}
	if r.err != nil {
		t.Errorf("renew %s: %v", c.name, r.err)
		return
	}
	row, err := b.store.Get(b.ctx, c.name)
	if err != nil {
		t.Fatal(err)
	}
	if r.l.Name != c.name || r.l.OwnerID != c.owner || r.l.Token != c.token || r.l.TTL != c.ttl ||
		!r.l.ExpiresAt.Equal(row.ExpiresAt) {
		t.Errorf("renew %s answered %+v, want its own row (ttl %s, expires %s)", c.name, r.l, c.ttl, row.ExpiresAt)
	}
	if left := row.ExpiresAt.Sub(row.Now); left <= c.ttl-10*time.Second || left > c.ttl {
		t.Errorf("renew %s: %s left of ttl %s", c.name, left, c.ttl)
	}
}

// lockRow opens a transaction that changes name's row (and so holds its
// lock) until commit.
func lockRow(t *testing.T, b *testBundle, name string) pgx.Tx {
	t.Helper()
	tx, err := b.db.Pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	if _, err := tx.Exec(b.ctx, `UPDATE leases SET updated_at = clock_timestamp() WHERE name = $1`, name); err != nil {
		t.Fatal(err)
	}
	return tx
}

func commit(t *testing.T, tx pgx.Tx) {
	t.Helper()
	if err := tx.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// lockWaiters counts the test database's backends waiting for a lock.
func lockWaiters(t *testing.T, b *testBundle) int {
	t.Helper()
	var n int
	err := b.db.Pool.QueryRow(b.ctx, `SELECT count(*) FROM pg_stat_activity
		WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// live reports whether name's lease is unexpired in database time.
func live(t *testing.T, b *testBundle, name string) bool {
	t.Helper()
	var ok bool
	if err := b.db.Pool.QueryRow(b.ctx, `SELECT expires_at > clock_timestamp() FROM leases WHERE name = $1`, name).Scan(&ok); err != nil {
		t.Fatal(err)
	}
	return ok
}

// pollExpired waits until name's committed row has expired in database
// time (its row lock is held, so Get's reader sees the committed row).
func pollExpired(t *testing.T, b *testBundle, name string) {
	t.Helper()
	waitFor(t, name+" to expire", func() bool { return !live(t, b, name) })
}

// waitFor polls cond on a short ticker until it holds or 20 s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(20 * time.Second)
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}
