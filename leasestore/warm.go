package leasestore

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// workerPath are the statements a worker's requests run. A new Postgres
// backend plans each on its first use, and under load that first use
// took 0.2-0.4 s: after a cold start every lease renews at once, on
// connections that have not renewed yet (BENCHMARKS-history.md,
// "Renewals: the first wave after a cold start").
var workerPath = []string{qAcquire, qRegenerate, qActivate, qRenew, qRenewBatch, qRelease, qAbandon, qHeartbeat}

// PrepareConn prepares the worker-path statements on a new connection
// (pgxpool's AfterConnect), with generic plans only. Before the
// migrations have run there is nothing to prepare: the statements are
// then prepared on first use.
//
// Generic plans: every statement of the store looks rows up by key, so a
// plan for the values at hand is never better than the generic one. But
// Postgres picks per execution, and for qRenewBatch a custom plan always
// looked cheaper (it counts the elements of the arrays; the generic plan
// assumes ten): the shared statement was planned again at each
// execution, 0.1-0.2 ms of a backend's CPU, more than its execution
// (BENCHMARKS.md, renewals coalesced).
func PrepareConn(ctx context.Context, conn *pgx.Conn) error {
	if _, err := conn.Exec(ctx, qGenericPlans); err != nil {
		return err
	}
	for _, q := range workerPath {
		if _, err := conn.Prepare(ctx, q, q); err != nil {
			var pe *pgconn.PgError
			if errors.As(err, &pe) && pe.Code == "42P01" { // undefined_table
				return nil
			}
			return err
		}
	}
	return nil
}

// Warm opens n connections of the pool at once and prepares the
// worker-path statements on each, so that the first requests after a
// start find them ready. Connections that already have them prepare
// nothing.
func (s *Store) Warm(ctx context.Context, n int) error {
	held := make([]*pgxpool.Conn, 0, n)
	defer func() {
		for _, c := range held {
			c.Release()
		}
	}()
	for range n {
		c, err := s.pool.Acquire(ctx)
		if err != nil {
			return err
		}
		held = append(held, c)
		if err := PrepareConn(ctx, c.Conn()); err != nil {
			return err
		}
	}
	return nil
}

// replaceIfStale replaces the pool's connections when err says a prepared
// statement's plan no longer fits the schema ("cached plan must not change
// result type", 0A000: a migration changed a column a statement returns,
// as in a rolling upgrade). pgx prepares its own cached statements again
// after such an error, but not those PrepareConn made: without this, every
// use of the statement on that connection would fail until the connection
// expired. The request that met it has already failed (503, retried by the
// worker); connections in use close when they are released.
func (s *Store) replaceIfStale(err error) {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "0A000" {
		s.pool.Reset()
	}
}
