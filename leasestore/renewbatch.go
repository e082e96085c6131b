package leasestore

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// DefaultRenewStatements is the default of Config.RenewStatements: two
// statements in flight, so that a renewal that arrives while one waits
// for its commit does not wait behind it, and a stall of one statement
// (a backend descheduled on a busy host) does not hold every renewal.
const DefaultRenewStatements = 2

// DefaultRenewBatch is the default of Config.RenewBatch: at 5,000 leases
// renewed three times per 10 s TTL, a statement in flight for a few
// milliseconds gathers a handful of renewals, far below it; the cap only
// bounds one statement's arrays when Postgres stalls and renewals pile up.
const DefaultRenewBatch = 256

// renewal is one caller's renewal waiting for its statement.
type renewal struct {
	ctx          context.Context
	name, owner  string
	gate         string
	token, ttlMS int64
	done         chan renewAnswer // buffered: the flusher never waits on a caller
}

// renewAnswer is one caller's row (err nil), pgx.ErrNoRows when its
// predicate refused, or the statement's failure.
type renewAnswer struct {
	l   Lease
	err error
}

// renewQueue coalesces renewals the way Postgres coalesces commits: while
// Config.RenewStatements renewal statements run, the renewals that arrive
// wait, and the next statement carries all of them (up to
// Config.RenewBatch). No timer holds a renewal back: one that finds fewer
// statements running starts one at once. A lease is in at most one
// statement at a time, so the store's own renewal statements never wait
// on each other's row locks (and cannot deadlock on them).
type renewQueue struct {
	mu         sync.Mutex
	waiting    []*renewal
	running    int             // flushers, each with at most one statement
	inFlight   map[string]bool // leases in a running statement
	statements atomic.Int64    // renewal statements sent (both paths)
}

// renewCoalesced queues r and waits for its answer or for ctx. A caller
// whose ctx ends first gets ErrUnavailable: its renewal may be in a
// statement that commits (outcome unknown, as for any statement cut off).
func (s *Store) renewCoalesced(r *renewal) (Lease, error) {
	r.done = make(chan renewAnswer, 1)
	q := &s.renewals
	q.mu.Lock()
	q.waiting = append(q.waiting, r)
	start := q.running < s.cfg.RenewStatements
	if start {
		q.running++
	}
	q.mu.Unlock()
	if start {
		go s.flushRenewals()
	}
	select {
	case a := <-r.done:
		return a.l, a.err
	case <-r.ctx.Done():
		return Lease{}, unavailable("renew", r.ctx.Err())
	}
}

// flushRenewals runs statements until it finds nothing to take.
func (s *Store) flushRenewals() {
	var batch []*renewal
	for {
		batch = s.renewals.take(batch, s.cfg.RenewBatch)
		if len(batch) == 0 {
			return
		}
		s.runRenewals(batch)
	}
}

// take releases the leases of the batch just run and removes up to max
// waiting renewals, at most one per lease and none of a lease in another
// running statement (two renewals of one row in one UPDATE would apply
// only one of them), dropping those whose caller has gone. With none to
// run the flusher ends, under the same lock as renewCoalesced's count,
// so that no renewal is left waiting without one: a renewal skipped for
// a lease in flight is taken by the flusher running that lease, which
// comes back here when its statement ends.
func (q *renewQueue) take(done []*renewal, max int) []*renewal {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.inFlight == nil {
		q.inFlight = map[string]bool{}
	}
	for _, r := range done {
		delete(q.inFlight, r.name)
	}
	var batch, rest []*renewal
	for _, r := range q.waiting {
		switch {
		case r.ctx.Err() != nil: // answered ErrUnavailable already
		case len(batch) < max && !q.inFlight[r.name]:
			q.inFlight[r.name] = true
			batch = append(batch, r)
		default:
			rest = append(rest, r)
		}
	}
	q.waiting = rest
	if len(batch) == 0 {
		q.running--
	}
	return batch
}

// runRenewals runs one qRenewBatch for batch and answers each caller with
// its own row: the statement returns the rows it renewed, and a caller
// whose lease is not among them was refused by its own predicate.
func (s *Store) runRenewals(batch []*renewal) {
	ctx, cancel := batchContext(batch)
	defer cancel()
	n := len(batch)
	names, owners, gates := make([]string, n), make([]string, n), make([]string, n)
	tokens, ttls := make([]int64, n), make([]int64, n)
	for i, r := range batch {
		names[i], owners[i], gates[i], tokens[i], ttls[i] = r.name, r.owner, r.gate, r.token, r.ttlMS
	}
	s.renewals.statements.Add(1)
	var renewed []Lease
	rows, err := s.pool.Query(ctx, qRenewBatch, names, owners, tokens, ttls, gates)
	if err == nil {
		renewed, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Lease, error) { return scanLease(r, false) })
	}
	if err != nil {
		s.replaceIfStale(err)
		err = unavailable("renew", err)
	}
	byName := make(map[string]Lease, len(renewed))
	for _, l := range renewed {
		byName[l.Name] = l
	}
	for _, r := range batch {
		r.done <- answerOf(r, byName, err)
	}
}

// answerOf is r's answer: the statement's failure, its own row, or
// pgx.ErrNoRows when its predicate refused.
func answerOf(r *renewal, byName map[string]Lease, err error) renewAnswer {
	if err != nil {
		return renewAnswer{err: err}
	}
	l, ok := byName[r.name]
	if !ok || l.OwnerID != r.owner || l.Token != r.token {
		return renewAnswer{err: pgx.ErrNoRows}
	}
	return renewAnswer{l: l}
}

// batchContext is the context of a shared statement: no one caller's
// cancellation cuts the others' statement off, and it ends at the latest
// of their deadlines (never, when one of them has none), so that it runs
// as long as some caller still waits for it.
func batchContext(batch []*renewal) (context.Context, context.CancelFunc) {
	var last time.Time
	for _, r := range batch {
		d, ok := r.ctx.Deadline()
		if !ok {
			return context.WithCancel(context.WithoutCancel(batch[0].ctx))
		}
		if d.After(last) {
			last = d
		}
	}
	return context.WithDeadline(context.WithoutCancel(batch[0].ctx), last)
}
