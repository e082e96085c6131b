package gateway

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/fencegate/fencegate/leasestore"
)

// The relay: each replica's one reader of the outbox (lease_events), which
// hands every event, once and in id order, to the watch streams whose
// subscription matches it (watch.go serves the streams).

// relayBatch is how many events one relay read takes.
const relayBatch = 1000

// settleRetry is how soon the relay reads again while an id below the
// newest is missing (in flight or rolled back).
const settleRetry = 10 * time.Millisecond

// listenRetry is the wait before the relay listens again after its
// connection failed (at most the poll interval).
const listenRetry = 200 * time.Millisecond

// relay hands the outbox's events, in id order, each once, to the
// subscriptions that match it.
type relay struct {
	src EventSource
	cfg WatchConfig
	log *slog.Logger

	wake  chan struct{} // a notification came (capacity 1)
	ready chan struct{} // closed once the cursor is set and settled

	mu     sync.Mutex
	cursor int64 // every event up to it was handed out (or never committed)
	// gapEnd and gapXmax: ids below gapEnd missing from a read whose
	// snapshot's xmax was gapXmax are settled once a read's xmin reaches
	// gapXmax (leasestore.EventsAfter). gapXmax 0: no gap.
	gapEnd  int64
	gapXmax uint64
	byName  map[string]map[*sub]struct{}
	prefix  map[*sub]struct{}
	streams map[string]int // by client
	total   int
	closing bool
	subs    map[*sub]struct{} // every subscription, for the drain
}

// sub is one stream's subscription: events matching it, in id order.
type sub struct {
	name   string // exact name, or "" for a prefix
	prefix string
	events chan *leasestore.Event // shared by the subscriptions: read only
	lagged chan struct{}          // closed when events overflowed: read the outbox
	closed chan struct{}          // closed by the drain
}

func (s *sub) matches(name string) bool {
	if s.name != "" {
		return s.name == name
	}
	return strings.HasPrefix(name, s.prefix)
}

func newRelay(src EventSource, cfg WatchConfig, log *slog.Logger) *relay {
	return &relay{src: src, cfg: cfg, log: log, wake: make(chan struct{}, 1), ready: make(chan struct{}),
		byName: map[string]map[*sub]struct{}{}, prefix: map[*sub]struct{}{}, streams: map[string]int{},
		subs: map[*sub]struct{}{}}
}

func (r *relay) notified() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// run starts at the newest event and relays until ctx ends.
func (r *relay) run(ctx context.Context) {
	if err := r.start(ctx); err != nil {
		return
	}
	go r.listen(ctx)
	t := time.NewTimer(r.cfg.Poll)
	defer t.Stop()
	for {
		wait := r.cfg.Poll
		blocked, err := r.readAll(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			r.log.Warn("watch relay: reading lease_events failed", "error", err)
		case blocked:
			wait = settleRetry
		}
		t.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-r.wake:
		case <-t.C:
		}
	}
}

// start sets the cursor to the newest event and waits until every event
// in flight below it is settled: no stream exists before ready, and one
// resuming below the cursor reads those events from the outbox.
func (r *relay) start(ctx context.Context) error {
	for {
		id, xmax, err := r.src.LastEventID(ctx)
		if err == nil {
			err = r.settle(ctx, xmax)
		}
		if err == nil {
			r.mu.Lock()
			r.cursor = id
			r.mu.Unlock()
			close(r.ready)
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		r.log.Warn("watch relay: starting failed, retrying", "error", err)
		if sleepCtx(ctx, r.cfg.Poll) != nil {
			return ctx.Err()
		}
	}
}

// settle waits until every transaction below xmax has finished.
func (r *relay) settle(ctx context.Context, xmax uint64) error {
	for {
		xmin, err := r.src.SnapshotXmin(ctx)
		if err != nil || xmin >= xmax {
			return err
		}
		if err := sleepCtx(ctx, settleRetry); err != nil {
			return err
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// listen keeps one listening connection, reconnecting after a failure;
// every (re)connection wakes the relay, which catches up by id.
func (r *relay) listen(ctx context.Context) {
	for ctx.Err() == nil {
		err := r.src.Listen(ctx, r.notified)
		if ctx.Err() != nil {
			return
		}
		r.log.Warn("watch relay: the listening connection failed; reconnecting (events are read every poll interval meanwhile)", "error", err)
		_ = sleepCtx(ctx, min(listenRetry, r.cfg.Poll))
	}
}

// readAll hands out every settled event after the cursor; blocked says a
// missing id holds back those after it.
func (r *relay) readAll(ctx context.Context) (blocked bool, err error) {
	for {
		r.mu.Lock()
		after := r.cursor
		r.mu.Unlock()
		rd, err := r.src.EventsAfter(ctx, after, relayBatch)
		if err != nil {
			return false, err
		}
		if r.apply(rd) {
			return true, nil
		}
		if len(rd.Events) < relayBatch {
			return false, nil
		}
	}
}

// apply hands out rd's events in id order from the cursor on and reports
// whether a missing id that may still commit stopped it. An id is
// skipped only once settled: its transaction finished without it.
func (r *relay) apply(rd leasestore.EventRead) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range rd.Events {
		if e.ID <= r.cursor {
			continue
		}
		if e.ID > r.cursor+1 {
			if r.gapXmax == 0 || e.ID > r.gapEnd {
				r.gapEnd, r.gapXmax = e.ID, rd.Xmax
				return true
			}
			if rd.Xmin < r.gapXmax {
				return true
			}
		}
		r.deliverLocked(e)
		r.cursor = e.ID
		if r.cursor >= r.gapEnd {
			r.gapXmax = 0
		}
	}
	return false
}

func (r *relay) deliverLocked(ev leasestore.Event) {
	e := &ev
	for s := range r.byName[e.Name] {
		r.sendLocked(s, e)
	}
	for s := range r.prefix {
		if s.matches(e.Name) {
			r.sendLocked(s, e)
		}
	}
}

// sendLocked queues e for s; a stream too far behind is unsubscribed and
// told (lagged) to read the outbox from its last event.
func (r *relay) sendLocked(s *sub, e *leasestore.Event) {
	select {
	case s.events <- e:
	default:
		r.unsubscribeLocked(s)
		close(s.lagged)
	}
}

// readyWait bounds how long a stream waits for a relay starting.
const readyWait = 5 * time.Second

// waitReady waits until the relay started (at most readyWait).
func (r *relay) waitReady(ctx context.Context) *Error {
	t := time.NewTimer(readyWait)
	defer t.Stop()
	select {
	case <-r.ready:
		return nil
	case <-ctx.Done():
	case <-t.C:
	}
	return errorf(CodeStoreUnavailable, "the watch relay has not started (Postgres unreachable?); retry later")
}

// errStreams is the 429 of a stream beyond a cap.
func errStreams(what string, n int) *Error {
	return errorf(CodeTooManyRequests, "%d watch streams are open %s; retry later", n, what)
}

// admit counts a new stream of client, or refuses it (429, draining).
func (r *relay) admit(client string) (func(), *Error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.closing:
		return nil, errDraining()
	case r.total >= r.cfg.MaxStreams:
		return nil, errStreams("on this replica", r.total)
	case r.streams[client] >= r.cfg.MaxStreamsPerClient:
		return nil, errStreams("for this client", r.streams[client])
	}
	r.total++
	r.streams[client]++
	return func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.total--
		if r.streams[client]--; r.streams[client] == 0 {
			delete(r.streams, client)
		}
	}, nil
}

// subscribe registers a subscription and returns it with the cursor at
// that moment: every later event reaches it, every earlier one is in the
// outbox.
func (r *relay) subscribe(name, prefix string) (*sub, int64) {
	s := &sub{name: name, prefix: prefix, events: make(chan *leasestore.Event, r.cfg.Buffer),
		lagged: make(chan struct{}), closed: make(chan struct{})}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closing {
		close(s.closed)
		return s, r.cursor
	}
	if name != "" {
		if r.byName[name] == nil {
			r.byName[name] = map[*sub]struct{}{}
		}
		r.byName[name][s] = struct{}{}
	} else {
		r.prefix[s] = struct{}{}
	}
	r.subs[s] = struct{}{}
	return s, r.cursor
}

func (r *relay) unsubscribe(s *sub) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.unsubscribeLocked(s)
}

func (r *relay) unsubscribeLocked(s *sub) {
	if _, ok := r.subs[s]; !ok {
		return
	}
	delete(r.subs, s)
	if s.name != "" {
		delete(r.byName[s.name], s)
		if len(r.byName[s.name]) == 0 {
			delete(r.byName, s.name)
		}
	} else {
		delete(r.prefix, s)
	}
}

// drain refuses new streams and ends every open one; it returns how many
// it ended.
func (r *relay) drain() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closing = true
	n := r.total
	for s := range r.subs {
		r.unsubscribeLocked(s)
		close(s.closed)
	}
	return n
}
