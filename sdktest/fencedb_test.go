package sdktest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/jackc/pgx/v5/stdlib"

	"github.com/fencegate/fencegate/client/fencedb"
	"github.com/fencegate/fencegate/internal/pgtest"
)

// fenceDB is a migrated database with fencedb's tables and a table of
// effects: each applied write appends one row (resource, token, what).
func fenceDB(t testing.TB) *sql.DB {
	t.Helper()
	db, _ := fenceDBOn(t)
	return db
}

// fenceDBOn is fenceDB with the test database it opened.
func fenceDBOn(t testing.TB) (*sql.DB, *pgtest.DB) {
	t.Helper()
	pg := pgtest.New(t)
	db := stdlib.OpenDBFromPool(pg.Pool)
	t.Cleanup(func() { db.Close() })
	ctx := context.Background()
	if err := fencedb.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	if err := fencedb.Migrate(ctx, db); err != nil { // idempotent
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE effects (id bigserial, resource text, token bigint, what text)`); err != nil {
		t.Fatal(err)
	}
	return db, pg
}

// effect applies one fenced write that appends an effect row.
func effect(ctx context.Context, db *sql.DB, resource string, token int64, what string) error {
	return fencedb.Do(ctx, db, fencedb.Write{Resource: resource, Token: token, Owner: fmt.Sprintf("w-%d", token)},
		func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO effects (resource, token, what) VALUES ($1, $2, $3)`, resource, token, what)
			return err
		})
}

func countRows(t testing.TB, db *sql.DB, q string, args ...any) int {
	t.Helper()
	var n int
	if err := db.QueryRowContext(context.Background(), q, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestFencedbFalsifier is the review's falsifier: epoch 1 completes a
// task, the lease expires and is reassigned to epoch 2, epoch 2 completes
// it, then epoch 1's completion is replayed. Pass: the replay is refused,
// no second effect, exactly one refusal row. A UNIQUE (task, epoch) key
// would have accepted it: task42:1 and task42:2 are distinct keys.
func TestFencedbFalsifier(t *testing.T) {
	t.Parallel()
	db, ctx := fenceDB(t), context.Background()
	if _, err := db.ExecContext(ctx, `CREATE TABLE tasks (id text PRIMARY KEY, done_by bigint);
		INSERT INTO tasks VALUES ('task42', NULL)`); err != nil {
		t.Fatal(err)
	}
	complete := func(token int64) (int64, error) {
		var updated int64
		err := fencedb.Do(ctx, db, fencedb.Write{Resource: "task42", Token: token, Owner: fmt.Sprintf("w-%d", token)},
			func(tx *sql.Tx) error {
				res, err := tx.ExecContext(ctx, `UPDATE tasks SET done_by = $1 WHERE id = 'task42'`, token)
				if err == nil {
					updated, err = res.RowsAffected()
				}
				return err
			})
		return updated, err
	}
	if n, err := complete(1); err != nil || n != 1 {
		t.Fatalf("epoch 1: %d rows, %v", n, err)
	}
	if n, err := complete(2); err != nil || n != 1 {
		t.Fatalf("epoch 2: %d rows, %v", n, err)
	}
	n, err := complete(1) // the replay
	var fenced *fencedb.FencedError
	if !errors.As(err, &fenced) || fenced.Fence != 2 || n != 0 {
		t.Fatalf("replayed epoch 1: %d rows, %v; want 0 rows and a FencedError at fence 2", n, err)
	}
	if got := countRows(t, db, `SELECT count(*) FROM tasks WHERE done_by = 2`); got != 1 {
		t.Fatalf("task42 is no longer done by epoch 2 (%d)", got)
	}
	if got := countRows(t, db, `SELECT count(*) FROM fencegate_refusals WHERE resource = 'task42' AND token = 1 AND fence_token = 2 AND reason = 'stale'`); got != 1 {
		t.Fatalf("%d refusal rows, want 1", got)
	}
	t.Logf("replay of epoch 1 after epoch 2: 0 rows updated, %v, 1 refusal row", err)
}

// TestFencedbLowerWaitsForHigher: the lower token's transaction waits on
// the fence row while the higher one holds it, then reads what the higher
// committed and is refused; in the other order the higher waits for the
// lower, then advances the fence. Either way no effect of the lower token
// follows one of the higher.
func TestFencedbLowerWaitsForHigher(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name          string
		first, second int64
		wantSecond    bool // the second is applied
	}{
		{"higher holds, lower waits", 5, 4, false},
		{"lower holds, higher waits", 4, 5, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			db, pg := fenceDBOn(t)
			ctx := context.Background()
			// The fence row exists before: the second write must wait on
			// its lock, not on the first one's insert of it.
			if err := effect(ctx, db, "r", 1, "before"); err != nil {
				t.Fatal(err)
			}
			holding, release := make(chan struct{}), make(chan struct{})
			firstDone := make(chan error, 1)
			go func() {
				firstDone <- fencedb.Do(ctx, db, fencedb.Write{Resource: "r", Token: c.first}, func(tx *sql.Tx) error {
					if _, err := tx.ExecContext(ctx, `INSERT INTO effects (resource, token) VALUES ('r', $1)`, c.first); err != nil {
						return err
					}
					close(holding)
					<-release
					return nil
				})
			}()
			<-holding
			secondDone := make(chan error, 1)
			go func() { secondDone <- effect(ctx, db, "r", c.second, "second") }()
			pgtest.WaitLockWaiter(t, pg, secondDone)
			close(release)
			if err := <-firstDone; err != nil {
				t.Fatal(err)
			}
			err := <-secondDone
			if applied := err == nil; applied != c.wantSecond || (!applied && !errors.Is(err, fencedb.ErrFenced)) {
				t.Fatalf("second write (token %d): %v, want applied %v", c.second, err, c.wantSecond)
			}
			if got := countRows(t, db, `SELECT count(*) FROM effects WHERE token = $1`, c.second); (got == 1) != c.wantSecond {
				t.Fatalf("%d effects of token %d", got, c.second)
			}
			fence := countRows(t, db, `SELECT token FROM fencegate_fences WHERE resource = 'r'`)
			if fence != 5 {
				t.Fatalf("fence %d, want 5", fence)
			}
		})
	}
}

// TestFencedbSameGenerationPasses: equal tokens are one generation, whose
// writes all pass (its idempotency is the caller's key); the fence is not
// "<=".
func TestFencedbSameGenerationPasses(t *testing.T) {
	t.Parallel()
	db, ctx := fenceDB(t), context.Background()
	for i := range 3 {
		if err := effect(ctx, db, "r", 6, fmt.Sprint(i)); err != nil {
			t.Fatalf("write %d of generation 6: %v", i, err)
		}
	}
	if got := countRows(t, db, `SELECT count(*) FROM effects WHERE token = 6`); got != 3 {
		t.Fatalf("%d effects of generation 6, want 3", got)
	}
}

// TestFencedbRollbackAfterCheck: a write whose own statements fail after
// the fence check rolls the fence back with them: the fence does not move,
// no receipt is filed, and a lower token after it is still applied.
func TestFencedbRollbackAfterCheck(t *testing.T) {
	t.Parallel()
	db, ctx := fenceDB(t), context.Background()
	if err := effect(ctx, db, "r", 3, "first"); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("the caller's statement failed")
	err := fencedb.Do(ctx, db, fencedb.Write{Resource: "r", Token: 9}, func(*sql.Tx) error { return boom })
	if !errors.Is(err, boom) {
		t.Fatalf("Do = %v, want the caller's error", err)
	}
	if fence := countRows(t, db, `SELECT token FROM fencegate_fences WHERE resource = 'r'`); fence != 3 {
		t.Fatalf("fence %d after a rolled-back write of 9, want 3", fence)
	}
	if err := effect(ctx, db, "r", 4, "after"); err != nil {
		t.Fatalf("token 4 after the rolled-back 9: %v", err)
	}
	if got := countRows(t, db, `SELECT count(*) FROM fencegate_refusals`); got != 0 {
		t.Fatalf("%d receipts, want none", got)
	}
}

// TestFencedbResourcesAreIndependent: one lease's generations fence each
// resource on its own: a token refused on one resource is applied on
// another that no later generation wrote.
func TestFencedbResourcesAreIndependent(t *testing.T) {
	t.Parallel()
	db, ctx := fenceDB(t), context.Background()
	for i := range 20 {
		if err := effect(ctx, db, fmt.Sprintf("shard:7/doc-%d", i), 2, "gen 2"); err != nil {
			t.Fatal(err)
		}
	}
	if err := effect(ctx, db, "shard:7/doc-3", 1, "gen 1"); !errors.Is(err, fencedb.ErrFenced) {
		t.Fatalf("gen 1 on doc-3 after gen 2: %v", err)
	}
	if err := effect(ctx, db, "shard:7/doc-99", 1, "gen 1"); err != nil {
		t.Fatalf("gen 1 on a resource gen 2 never wrote: %v", err)
	}
	if got := countRows(t, db, `SELECT count(*) FROM fencegate_fences`); got != 21 {
		t.Fatalf("%d fence rows, want 21", got)
	}
}

// TestFencedbAgreesWithModel runs random interleavings of tokens over a
// few resources, each write from one of several goroutines at once, and
// checks the database against a model afterwards: per resource, the
// applied effects' tokens never go down in commit order, a refused write
// left one receipt and no effect, and the fence is the highest applied
// token.
func TestFencedbAgreesWithModel(t *testing.T) {
	t.Parallel()
	db, ctx := fenceDB(t), context.Background()
	const cases, writers, perWriter = 40, 4, 6
	resources := []string{"a", "b", "c"}
	refused := 0
	for c := range cases {
		rng := rand.New(rand.NewPCG(uint64(c), 7))
		errs := make(chan error, writers*perWriter)
		want := map[string]int{}    // refusals per resource, from the answers
		applied := map[string]int{} // writes answered nil per resource
		type answer struct {
			res string
			err error
		}
		answers := make(chan answer, writers*perWriter)
		plans := make([][]struct {
			res   string
			token int64
		}, writers)
		for w := range writers {
			for range perWriter {
				plans[w] = append(plans[w], struct {
					res   string
					token int64
				}{fmt.Sprintf("%d/%s", c, resources[rng.IntN(len(resources))]), int64(1 + rng.IntN(6))})
			}
		}
		done := make(chan struct{})
		for w := range writers {
			go func() {
				for _, p := range plans[w] {
					err := effect(ctx, db, p.res, p.token, "")
					answers <- answer{p.res, err}
				}
				done <- struct{}{}
			}()
		}
		for range writers {
			<-done
		}
		close(answers)
		for a := range answers {
			switch {
			case errors.Is(a.err, fencedb.ErrFenced):
				want[a.res]++
				refused++
			case a.err != nil:
				errs <- a.err
			default:
				applied[a.res]++
			}
		}
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		for _, r := range resources {
			res := fmt.Sprintf("%d/%s", c, r)
			checkResource(t, db, res, want[res], applied[res])
		}
	}
	t.Logf("%d cases of %d concurrent writes over %d resources: %d refused, every history monotone", cases, writers*perWriter, len(resources), refused)
}

// checkResource: the effects of res, in commit (id) order, never go down
// in token (the writes of one resource take its fence row's lock, so id
// order is lock order); the fence is their highest; there is one effect
// per write answered nil and one receipt per write refused.
func checkResource(t *testing.T, db *sql.DB, res string, refusals, applied int) {
	t.Helper()
	if got := countRows(t, db, `SELECT count(*) FROM effects WHERE resource = $1`, res); got != applied {
		t.Fatalf("%s: %d effects, %d writes answered applied", res, got, applied)
	}
	rows, err := db.QueryContext(context.Background(), `SELECT token FROM effects WHERE resource = $1 ORDER BY id`, res)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var high int64
	for rows.Next() {
		var tok int64
		if err := rows.Scan(&tok); err != nil {
			t.Fatal(err)
		}
		if tok < high {
			t.Fatalf("%s: token %d applied after %d", res, tok, high)
		}
		high = tok
	}
	if high > 0 {
		if fence := countRows(t, db, `SELECT token FROM fencegate_fences WHERE resource = $1`, res); int64(fence) != high {
			t.Fatalf("%s: fence %d, highest applied %d", res, fence, high)
		}
	}
	if got := countRows(t, db, `SELECT count(*) FROM fencegate_refusals WHERE resource = $1`, res); got != refusals {
		t.Fatalf("%s: %d receipts, %d refusals answered", res, got, refusals)
	}
}

// BenchmarkFencedWrite: one UPDATE of a row in a transaction of its own,
// plain and through fencedb.Do (three more statements under the fence
// row's lock), side by side.
func BenchmarkFencedWrite(b *testing.B) {
	db, ctx := fenceDB(b), context.Background()
	if _, err := db.ExecContext(ctx, `CREATE TABLE counters (id int PRIMARY KEY, n bigint); INSERT INTO counters VALUES (1, 0)`); err != nil {
		b.Fatal(err)
	}
	update := func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `UPDATE counters SET n = n + 1 WHERE id = 1`)
		return err
	}
	b.Run("plain", func(b *testing.B) {
		for b.Loop() {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				b.Fatal(err)
			}
			if err := update(tx); err != nil {
				b.Fatal(err)
			}
			if err := tx.Commit(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("fenced", func(b *testing.B) {
		for b.Loop() {
			if err := fencedb.Do(ctx, db, fencedb.Write{Resource: "counter:1", Token: 1}, update); err != nil {
				b.Fatal(err)
			}
		}
	})
}
