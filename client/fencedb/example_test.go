package fencedb_test

import (
	"context"
	"database/sql"
	"errors"
	"log"

	"github.com/fencegate/fencegate/client/fencedb"
)

// A worker marks a task complete in its own database under the token of
// the lease it holds. If a later generation of the lease has written the
// task meanwhile (this worker was frozen past its TTL and the lease moved),
// the completion is refused, nothing of it is applied, and the refusal is
// in fencegate_refusals.
func Example() {
	var db *sql.DB // sql.Open("pgx", url) with github.com/jackc/pgx/v5/stdlib
	ctx := context.Background()
	token := int64(7) // lease.Grant().Token of the worker's client.Lease
	err := fencedb.Do(ctx, db, fencedb.Write{Resource: "task:42", Token: token, Owner: "indexer-17"},
		func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, `UPDATE tasks SET done = true WHERE id = 42`)
			return err
		})
	switch {
	case errors.Is(err, fencedb.ErrFenced):
		log.Print("a later generation owns task:42: stop, this worker's lease is gone")
	case err != nil:
		log.Print(err) // nothing applied: retry, or give up
	}
}
