package leasestore

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// EventRead is a read of the events after an id, with the snapshot it was
// read in: Xmin is the oldest transaction still running then (every
// older one had finished), Xmax the first not yet begun. Both are 0 when
// no event was read.
type EventRead struct {
	Events     []Event
	Xmin, Xmax uint64
}

// EventsAfter reads up to limit events with ids above after, in id order.
// An id missing among them is in flight or rolled back: an event's
// transaction began before any later id was allocated, so the id is
// settled (committed and visible, or never) once a later read's Xmin
// reaches this read's Xmax.
func (s *Store) EventsAfter(ctx context.Context, after int64, limit int) (EventRead, error) {
	rows, err := s.pool.Query(ctx, qEventsAfter, after, limit)
	if err != nil {
		return EventRead{}, unavailable("events", err)
	}
	var out EventRead
	_, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (struct{}, error) {
		var e Event
		var epoch int32
		err := r.Scan(&e.ID, &e.Name, &e.Kind, &e.Token, &e.OwnerID, &e.Holder, &e.ProducerID,
			&epoch, &e.ExpiresAt, &e.At, &e.Client, &e.ForwardedBy, &out.Xmin, &out.Xmax)
		e.ProducerEpoch = int16(epoch)
		out.Events = append(out.Events, e)
		return struct{}{}, err
	})
	if err != nil {
		return EventRead{}, unavailable("events", err)
	}
	return out, nil
}

// EventsRange reads up to limit events with ids in (after, upto] of the
// names starting with one of prefixes, in id order. Each prefix is read
// through the (name, id) pattern index (migration 0010), so a catch-up
// reads the events under its prefixes, never the other tenants' (FM91).
// Overlapping prefixes return an event once per prefix.
func (s *Store) EventsRange(ctx context.Context, prefixes []string, after, upto int64, limit int) ([]Event, error) {
	if len(prefixes) == 0 {
		return nil, nil
	}
	q, args := eventsRangeQuery(prefixes, after, upto, limit)
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, unavailable("events", err)
	}
	evs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Event, error) { return scanEvent(r) })
	if err != nil {
		return nil, unavailable("events", err)
	}
	return evs, nil
}

// eventsRangeQuery is EventsRange's statement: each prefix as a name
// range [lo, hi).
func eventsRangeQuery(prefixes []string, after, upto int64, limit int) (string, []any) {
	lo, hi := make([]string, len(prefixes)), make([]string, len(prefixes))
	for i, p := range prefixes {
		lo[i], hi[i] = p, nameRangeEnd(p)
	}
	return qEventsRange, []any{lo, hi, after, upto, limit}
}

// nameRangeEnd is the end of the names under prefix: prefixEnd, or above
// every lease name (ASCII, so below U+007F) when there is none.
func nameRangeEnd(prefix string) string {
	if end, ok := prefixEnd(prefix); ok {
		return end
	}
	return "\x7f"
}

// LastEventID returns the newest event id (0: none) and the xmax of the
// snapshot it was read in: events with lower ids still in flight then are
// settled once SnapshotXmin reaches it.
func (s *Store) LastEventID(ctx context.Context) (int64, uint64, error) {
	var id int64
	var xmax uint64
	if err := s.pool.QueryRow(ctx, qLastEventID).Scan(&id, &xmax); err != nil {
		return 0, 0, unavailable("events", err)
	}
	return id, xmax, nil
}

// SnapshotXmin returns the oldest transaction running now: every older one
// has finished (EventsAfter).
func (s *Store) SnapshotXmin(ctx context.Context) (uint64, error) {
	var x uint64
	if err := s.pool.QueryRow(ctx, qSnapshot).Scan(&x); err != nil {
		return 0, unavailable("events", err)
	}
	return x, nil
}

// pruneBatch is how many events one prune statement deletes.
const pruneBatch = 10000

// PruneEvents deletes the events older than age (database time), in
// statements of pruneBatch rows, and returns how many it deleted. Grants
// are events too: a prune shortens the history GET /v1/leases/{name} and
// the watch streams' Last-Event-ID can reach, never a lease.
func (s *Store) PruneEvents(ctx context.Context, age time.Duration) (int64, error) {
	if age <= 0 {
		return 0, &InvalidError{Field: "older_than", Message: "must be positive"}
	}
	var total int64
	for {
		tag, err := s.pool.Exec(ctx, qPruneEvents, age.Milliseconds(), pruneBatch)
		if err != nil {
			return total, unavailable("prune events", err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < pruneBatch {
			return total, nil
		}
	}
}

// Listen holds one connection of the pool, LISTENs for the notifications
// of new events and calls notified once when listening begins (a
// notification may have been missed before) and once per notification.
// It returns when ctx ends (nil) or the connection fails; the caller
// reconnects and catches up by id.
func (s *Store) Listen(ctx context.Context, notified func()) error {
	pc, err := s.pool.Acquire(ctx)
	if err != nil {
		return unavailable("listen", err)
	}
	conn := pc.Hijack()
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	if _, err := conn.Exec(ctx, qListen); err != nil {
		return unavailable("listen", err)
	}
	notified()
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return unavailable("listen", err)
		}
		notified()
	}
}

func scanEvent(r scanner) (Event, error) {
	var e Event
	var epoch int32
	err := r.Scan(&e.ID, &e.Name, &e.Kind, &e.Token, &e.OwnerID, &e.Holder, &e.ProducerID,
		&epoch, &e.ExpiresAt, &e.At, &e.Client, &e.ForwardedBy)
	e.ProducerEpoch = int16(epoch)
	return e, err
}
