// Package fencedb fences a worker's writes to its own database with the
// token of its lease, the way the gateway fences its writes to Kafka: a
// write of a generation that a later generation has already overtaken on
// the same resource is refused, inside the caller's own transaction, and
// leaves a receipt.
//
// An epoch in a payload is a claim; a fence is the receiver refusing
// claims it can no longer honour. A UNIQUE key on (task, token) is not a
// fence (task42:2 then task42:1 are two distinct keys, both accepted), and
// checking that the lease is live before writing leaves a gap between the
// check and the write. fencedb keeps one row per resource with the highest
// token applied to it, locks it in the transaction that writes, and
// compares there, so the check and the write commit together or not at
// all:
//
//	err := fencedb.Do(ctx, db, fencedb.Write{Resource: "task:42", Token: lease.Grant().Token, Owner: "indexer-17"},
//		func(tx *sql.Tx) error {
//			_, err := tx.ExecContext(ctx, `UPDATE tasks SET done = true WHERE id = 42`)
//			return err
//		})
//	if errors.Is(err, fencedb.ErrFenced) {
//		// a later generation wrote task:42: this worker lost the lease; the
//		// refusal is in fencegate_refusals
//	}
//
// The rule, in one place (Check): a token below the resource's fence is
// refused; a token above it advances the fence; an equal token is the same
// generation and passes (idempotency within a generation is the caller's
// own key, as the gateway's batch_id is). The token to present is the one
// the worker's lease grant carries (client.Grant.Token), which grows with
// every generation of the lease. Fence a resource with the tokens of the
// one lease that owns it: tokens of all leases come from one sequence, so
// another lease's token is ordered by when it was granted, not by who
// owns the resource.
//
// Guaranteed: no effect of a lower token is committed on a resource after
// a higher token's write to it committed; every refused write leaves
// exactly one receipt, committed exactly when nothing of that write was
// applied (with Do, a refusal of a second resource that the callback
// checks too); Do's answer says whether the write was applied, also when
// the callback ended the transaction itself. Not guaranteed: effects outside the transaction (a message
// sent, a file written, another database), and writes that reach the
// resource without going through Check.
//
// The statements are Postgres's ($n placeholders, ON CONFLICT, FOR
// UPDATE, clock_timestamp()). With $n replaced by ?, and clock_timestamp()
// by CURRENT_TIMESTAMP, they suit SQLite 3.24+ (which serialises writers,
// so FOR UPDATE is dropped) and, with INSERT IGNORE for ON CONFLICT DO
// NOTHING, MySQL/InnoDB under READ COMMITTED; only Postgres is tested. Do
// also asks Postgres for its transaction's fate when the callback ended
// it (txid_current, txid_status); elsewhere that needs its own query.
//
// Check must never let a token below the resource's fence through, and
// never judge outside the caller's transaction: a check apart from its
// write is not a fence.
//
// The package uses the standard library only (database/sql): any driver
// works, pgx's stdlib driver among them.
package fencedb

import (
	"context"
	"database/sql"
	_ "embed"
	"errors"
	"fmt"
)

// SchemaSQL is the migration that makes fencedb's tables (Postgres);
// every statement is idempotent.
//
//go:embed schema.sql
var SchemaSQL string

// Migrate applies SchemaSQL to db.
func Migrate(ctx context.Context, db *sql.DB) error {
	_, err := db.ExecContext(ctx, SchemaSQL)
	return err
}

// Write names the resource a write touches and the generation writing it.
type Write struct {
	// Resource is what the write changes ("task:42", "shard:8841/index"):
	// each has a fence of its own.
	Resource string
	// Token is the writer's lease token (client.Grant.Token); positive.
	Token int64
	// Owner is the writer's owner id, kept in the fence and the receipts.
	Owner string
}

// ErrFenced is a write refused because a later generation has written the
// resource; errors.As gives the *FencedError.
var ErrFenced = errors.New("fencedb: fenced by a later generation")

// FencedError says which resource refused which token, and the fence's.
type FencedError struct {
	Resource string
	Token    int64
	Fence    int64
	Owner    string
}

// Error names the resource and both tokens.
func (e *FencedError) Error() string {
	return fmt.Sprintf("fencedb: %q refused token %d: a later generation (token %d) wrote it", e.Resource, e.Token, e.Fence)
}

// Unwrap makes errors.Is(err, ErrFenced) hold.
func (e *FencedError) Unwrap() error { return ErrFenced }

const (
	// qEnsure gives a resource a fence row to lock, at token 0.
	qEnsure = `INSERT INTO fencegate_fences (resource, token) VALUES ($1, 0) ON CONFLICT (resource) DO NOTHING`
	// qLock reads the resource's fence under its row lock: a writer of
	// another generation waits here until this transaction ends, then
	// reads what it committed.
	qLock = `SELECT token FROM fencegate_fences WHERE resource = $1 FOR UPDATE`
	// qAdvance moves the fence up; the WHERE repeats the rule, so it can
	// never move down.
	qAdvance = `UPDATE fencegate_fences SET token = $2, owner_id = $3, updated_at = clock_timestamp()
 WHERE resource = $1 AND token < $2`
	// qReceipt files a refusal.
	qReceipt = `INSERT INTO fencegate_refusals (resource, token, fence_token, owner_id, reason) VALUES ($1, $2, $3, $4, 'stale')`
)

// Check is the fence, inside the caller's transaction tx: it locks the
// resource's fence row and compares w.Token with it. Below the fence, it
// files a receipt in tx and returns a *FencedError: the caller then
// commits tx (so the receipt stays) having written nothing else in it,
// which is why Check comes first in the transaction. At or above the
// fence it advances the fence to w.Token and returns nil: the caller's
// writes that follow in tx commit under the lock, with the fence.
//
// Under REPEATABLE READ or SERIALIZABLE a concurrent writer of the same
// resource makes the lock fail with a serialization error (SQLSTATE
// 40001): retry the transaction. READ COMMITTED (Postgres's default) waits
// and reads the committed fence.
func Check(ctx context.Context, tx *sql.Tx, w Write) error {
	if w.Resource == "" || w.Token <= 0 {
		return fmt.Errorf("fencedb: a write needs a resource and a positive token (got %q, %d)", w.Resource, w.Token)
	}
	if _, err := tx.ExecContext(ctx, qEnsure, w.Resource); err != nil {
		return fmt.Errorf("fencedb: fence row: %w", err)
	}
	var fence int64
	if err := tx.QueryRowContext(ctx, qLock, w.Resource).Scan(&fence); err != nil {
		return fmt.Errorf("fencedb: lock the fence: %w", err)
	}
	if w.Token < fence {
		if _, err := tx.ExecContext(ctx, qReceipt, w.Resource, w.Token, fence, w.Owner); err != nil {
			return fmt.Errorf("fencedb: receipt: %w", err)
		}
		return &FencedError{Resource: w.Resource, Token: w.Token, Fence: fence, Owner: w.Owner}
	}
	if w.Token > fence {
		if _, err := tx.ExecContext(ctx, qAdvance, w.Resource, w.Token, w.Owner); err != nil {
			return fmt.Errorf("fencedb: advance the fence: %w", err)
		}
	}
	return nil
}

// ErrApplied is returned (joined with fn's error) when fn committed the
// transaction itself and then failed: the write was applied, the fence's
// advance included, whatever fn said after.
var ErrApplied = errors.New("fencedb: the callback committed the transaction itself: the write was applied")

// ErrNotApplied is returned when fn rolled the transaction back itself
// and returned nil: nothing of the write was applied.
var ErrNotApplied = errors.New("fencedb: the callback rolled the transaction back itself: nothing was applied")

const (
	// qTxID names the transaction, so that Do can ask its fate once fn
	// ended it.
	qTxID = `SELECT txid_current()`
	// qTxStatus is a transaction's fate: committed, aborted or in
	// progress (NULL: too old to tell).
	qTxStatus = `SELECT coalesce(txid_status($1), 'unknown')`
)

// Do runs fn in a transaction of its own on db, fenced by w: Check first,
// then fn, then commit. Every answer is definite (FM86):
//
//   - nil: the write was applied (fn's statements and the fence's
//     advance committed), also when fn committed the transaction itself;
//   - w refused: its receipt is committed alone and the *FencedError
//     returned;
//   - fn returned an error: everything rolls back, the fence's advance
//     included, and the error is returned. A refusal of another resource
//     that fn checked (fn returned Check's *FencedError) is filed again in
//     a transaction of its own, so every refused write leaves exactly one
//     receipt;
//   - fn ended the transaction itself: its fate decides: committed is nil,
//     or ErrApplied joined with fn's error; rolled back is fn's error, or
//     ErrNotApplied.
//
// An error of the commit itself is returned as is: its outcome is the
// driver's to tell.
func Do(ctx context.Context, db *sql.DB, w Write, fn func(*sql.Tx) error) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }() // after Commit, a no-op
	var id int64
	if err := tx.QueryRowContext(ctx, qTxID).Scan(&id); err != nil {
		return fmt.Errorf("fencedb: transaction id: %w", err)
	}
	if err := Check(ctx, tx, w); err != nil {
		var fenced *FencedError
		if errors.As(err, &fenced) {
			if cerr := tx.Commit(); cerr != nil {
				return errors.Join(err, fmt.Errorf("fencedb: the receipt was not committed: %w", cerr))
			}
		}
		return err
	}
	ferr := fn(tx)
	end := tx.Rollback
	if ferr == nil {
		end = tx.Commit
	}
	if err := end(); errors.Is(err, sql.ErrTxDone) {
		return endedByCallback(ctx, db, id, ferr)
	} else if ferr == nil {
		return err
	}
	return refile(ctx, db, ferr)
}

// endedByCallback answers a Do whose fn ended transaction id itself, by
// the transaction's fate.
func endedByCallback(ctx context.Context, db *sql.DB, id int64, ferr error) error {
	var status string
	if err := db.QueryRowContext(ctx, qTxStatus, id).Scan(&status); err != nil {
		return errors.Join(ferr, fmt.Errorf("fencedb: the callback ended the transaction itself and its fate could not be read: %w", err))
	}
	switch {
	case status == "committed" && ferr == nil:
		return nil
	case status == "committed":
		return errors.Join(ErrApplied, ferr)
	case status != "aborted":
		return errors.Join(ferr, fmt.Errorf("fencedb: the callback ended the transaction itself; its fate is %q", status))
	case ferr == nil:
		return ErrNotApplied
	}
	return refile(ctx, db, ferr)
}

// refile files again, each in a transaction of its own, the receipts of
// the refusals in err (fn's own Checks of other resources): they rolled
// back with fn's transaction, and nothing of the write was applied.
func refile(ctx context.Context, db *sql.DB, err error) error {
	for _, f := range refusals(err) {
		if _, rerr := db.ExecContext(ctx, qReceipt, f.Resource, f.Token, f.Fence, f.Owner); rerr != nil {
			return errors.Join(err, fmt.Errorf("fencedb: the receipt of %q was not committed: %w", f.Resource, rerr))
		}
	}
	return err
}

// refusals returns every *FencedError in err's tree.
func refusals(err error) []*FencedError {
	switch e := err.(type) {
	case nil:
		return nil
	case *FencedError:
		return []*FencedError{e}
	case interface{ Unwrap() []error }:
		var out []*FencedError
		for _, inner := range e.Unwrap() {
			out = append(out, refusals(inner)...)
		}
		return out
	case interface{ Unwrap() error }:
		return refusals(e.Unwrap())
	}
	return nil
}
