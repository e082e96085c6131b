package sdktest

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"github.com/fencegate/fencegate/client/fencedb"
)

// TestFM86_SecondResourceRefusedInsideDoKeepsItsReceipt: inside Do on
// resource a, the callback checks a second resource b that a later
// generation wrote, and returns Check's refusal. Nothing of the write is
// applied (a's fence and the callback's effect roll back), and the
// refusal of b leaves exactly one receipt, as every refused write does.
func TestFM86_SecondResourceRefusedInsideDoKeepsItsReceipt(t *testing.T) {
	t.Parallel()
	db, ctx := fenceDB(t), context.Background()
	if err := effect(ctx, db, "b", 5, "later generation"); err != nil {
		t.Fatal(err)
	}
	err := fencedb.Do(ctx, db, fencedb.Write{Resource: "a", Token: 3, Owner: "w-3"}, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO effects (resource, token, what) VALUES ('a', 3, 'both')`); err != nil {
			return err
		}
		return fencedb.Check(ctx, tx, fencedb.Write{Resource: "b", Token: 3, Owner: "w-3"})
	})
	var fenced *fencedb.FencedError
	if !errors.As(err, &fenced) || fenced.Resource != "b" || fenced.Fence != 5 {
		t.Fatalf("Do = %v, want b's FencedError at fence 5", err)
	}
	if got := countRows(t, db, `SELECT count(*) FROM effects WHERE token = 3`); got != 0 {
		t.Fatalf("%d effects of the refused write applied, want none", got)
	}
	if got := countRows(t, db, `SELECT count(*) FROM fencegate_fences WHERE resource = 'a' AND token > 0`); got != 0 {
		t.Fatalf("a's fence advanced by a write that was not applied")
	}
	if got := countRows(t, db, `SELECT count(*) FROM fencegate_refusals WHERE resource = 'b' AND token = 3 AND fence_token = 5`); got != 1 {
		t.Fatalf("%d receipts of b's refusal, want exactly 1", got)
	}
}

// TestFM86_CallbackThatEndsTheTransactionIsAnsweredByItsFate: a callback
// that commits the transaction itself had its write applied: Do answers
// nil (and, if the callback then fails, an error that says the write was
// applied). One that rolls it back itself applied nothing: Do says so.
// Neither is answered by Commit's "transaction already done".
func TestFM86_CallbackThatEndsTheTransactionIsAnsweredByItsFate(t *testing.T) {
	t.Parallel()
	db, ctx := fenceDB(t), context.Background()
	write := func(token int64, what string, end func(*sql.Tx) error) error {
		return fencedb.Do(ctx, db, fencedb.Write{Resource: "r", Token: token}, func(tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, `INSERT INTO effects (resource, token, what) VALUES ('r', $1, $2)`, token, what); err != nil {
				return err
			}
			return end(tx)
		})
	}
	if err := write(1, "committed", func(tx *sql.Tx) error { return tx.Commit() }); err != nil {
		t.Fatalf("a callback that committed itself: Do = %v, want nil (its write was applied)", err)
	}
	boom := errors.New("after the commit")
	err := write(2, "committed then failed", func(tx *sql.Tx) error {
		if err := tx.Commit(); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, fencedb.ErrApplied) || !errors.Is(err, boom) {
		t.Fatalf("a callback that committed and then failed: Do = %v, want ErrApplied and its error", err)
	}
	err = write(3, "rolled back", func(tx *sql.Tx) error { return tx.Rollback() })
	if !errors.Is(err, fencedb.ErrNotApplied) {
		t.Fatalf("a callback that rolled back itself: Do = %v, want ErrNotApplied", err)
	}
	if got := countRows(t, db, `SELECT count(*) FROM effects`); got != 2 {
		t.Fatalf("%d effects, want the 2 committed ones", got)
	}
	if fence := countRows(t, db, `SELECT token FROM fencegate_fences WHERE resource = 'r'`); fence != 2 {
		t.Fatalf("fence %d, want 2", fence)
	}
}
