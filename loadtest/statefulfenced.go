package loadtest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/fencegate/fencegate/client/fencedb"
	"github.com/fencegate/fencegate/loadtest/report"
)

// fencedState is the stateful workers' own database (issue 25): after
// each acknowledged batch a worker records where its lease stands in
// loadtest_worker_state through client/fencedb, under its token, and a
// frozen worker that wakes records its stale position the same way. The
// check afterwards: no write of an overtaken generation was applied,
// every refusal has its receipt, and the table is never ahead of the
// ledger.
type fencedState struct {
	db                       *sql.DB
	applied, refused, failed atomic.Int64
	// logFrom and receiptsFrom are the ids before this run: a database
	// that served another run keeps its rows, which this one ignores.
	logFrom, receiptsFrom int64
}

// qWorkerState makes the workers' table and the log of its applied
// writes, in write order (each under the lease's fence row lock).
const qWorkerState = `
CREATE TABLE IF NOT EXISTS loadtest_worker_state (lease text PRIMARY KEY, next_item bigint NOT NULL, token bigint NOT NULL);
CREATE TABLE IF NOT EXISTS loadtest_worker_state_log (id bigserial PRIMARY KEY, lease text NOT NULL, token bigint NOT NULL, next_item bigint NOT NULL)`

func newFencedState(ctx context.Context, pool *pgxpool.Pool) (*fencedState, error) {
	db := stdlib.OpenDBFromPool(pool)
	if err := fencedb.Migrate(ctx, db); err != nil {
		return nil, fmt.Errorf("fencedb schema: %w", err)
	}
	if _, err := db.ExecContext(ctx, qWorkerState); err != nil {
		return nil, err
	}
	f := &fencedState{db: db}
	err := db.QueryRowContext(ctx, `SELECT (SELECT coalesce(max(id), 0) FROM loadtest_worker_state_log),
		(SELECT coalesce(max(id), 0) FROM fencegate_refusals)`).Scan(&f.logFrom, &f.receiptsFrom)
	return f, err
}

// record writes lease's position next under token, fenced.
func (f *fencedState) record(ctx context.Context, lease, owner string, token int64, next int) {
	if f == nil {
		return
	}
	err := fencedb.Do(ctx, f.db, fencedb.Write{Resource: lease, Token: token, Owner: owner}, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO loadtest_worker_state (lease, next_item, token) VALUES ($1, $2, $3)
			ON CONFLICT (lease) DO UPDATE SET next_item = EXCLUDED.next_item, token = EXCLUDED.token`, lease, next, token); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO loadtest_worker_state_log (lease, token, next_item) VALUES ($1, $2, $3)`, lease, token, next)
		return err
	})
	switch {
	case errors.Is(err, fencedb.ErrFenced):
		f.refused.Add(1)
	case err != nil:
		if ctx.Err() == nil {
			f.failed.Add(1)
		}
	default:
		f.applied.Add(1)
	}
}

// check judges the table against the ledger's checkpoints (next per
// lease): per lease the applied writes' tokens never go down in write
// order, the row holds the last of them, its position is never past the
// ledger's checkpoint; and the receipts are as many as the refusals.
func (f *fencedState) check(ctx context.Context, next map[string]int) (*report.FencedState, error) {
	out := &report.FencedState{Applied: f.applied.Load(), Refused: f.refused.Load(), Failed: f.failed.Load()}
	rows, err := f.db.QueryContext(ctx, `SELECT lease, token, next_item FROM loadtest_worker_state_log WHERE id > $1 ORDER BY lease, id`, f.logFrom)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	high := map[string]int64{}
	last := map[string]int{}
	for rows.Next() {
		var lease string
		var token int64
		var n int
		if err := rows.Scan(&lease, &token, &n); err != nil {
			return nil, err
		}
		if token < high[lease] {
			out.Fail("%s: token %d's write applied after token %d's", lease, token, high[lease])
		}
		high[lease], last[lease] = max(high[lease], token), n
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	for lease, n := range last {
		if n > next[lease] {
			out.Fail("%s: the workers' table says item %d, the ledger's checkpoint %d", lease, n, next[lease])
		}
	}
	if err := f.db.QueryRowContext(ctx, `SELECT count(*) FROM fencegate_refusals WHERE id > $1`, f.receiptsFrom).Scan(&out.Receipts); err != nil {
		return nil, err
	}
	if out.Receipts != out.Refused {
		out.Fail("%d receipts for %d refused writes", out.Receipts, out.Refused)
	}
	out.Pass = len(out.Examples) == 0 && out.Failed == 0
	return out, nil
}
