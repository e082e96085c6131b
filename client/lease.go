package client

import (
	"cmp"
	"context"
	"errors"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fencegate/fencegate/client/wire"
)

// Lease is an acquired lease, renewed in the background until Release,
// the Client's Close, or loss; no context ends it. Its methods are safe
// for concurrent use.
type Lease struct {
	c    *Client
	name string
	leaseSettings

	// regen lets one new generation be asked for at a time: renewal and
	// produce both ask after not_holder or generation_ended, and a second
	// request with the same token would be refused (lease_lost) once the
	// first succeeded.
	regen sync.Mutex

	mu       sync.Mutex
	base     string // BaseURL, or the holder a 421 named
	grant    Grant
	deadline time.Time
	renewErr error // the last failed renewal, for the cause of a passed deadline
	err      error // non-nil once lost
	lost     chan struct{}

	ctx    context.Context // ends renewal requests on Release
	cancel context.CancelFunc
	done   chan struct{} // closed when the renewer stopped
}

// newLease is the lease of grant g, asked for at start; Client.start
// starts its renewer.
func (c *Client) newLease(name string, s leaseSettings, g Grant, start time.Time) *Lease {
	ctx, cancel := context.WithCancel(context.Background())
	return &Lease{c: c, name: name, leaseSettings: s, base: c.cfg.BaseURL, grant: g, deadline: start.Add(s.ttl),
		lost: make(chan struct{}), ctx: ctx, cancel: cancel, done: make(chan struct{})}
}

// Name returns the lease's name.
func (l *Lease) Name() string { return l.name }

// Grant returns the current generation. It changes when the SDK asks for a
// new generation (after not_holder or generation_ended).
func (l *Lease) Grant() Grant {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.grant
}

// Deadline returns the local deadline: the start of the last successful
// renewal or grant request plus the lease's TTL. Past it the lease
// refuses to produce and is lost.
func (l *Lease) Deadline() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deadline
}

// Lost is closed once the lease can no longer write: lost, past its local
// deadline, or released (Release, Client.Close). Err says why. A
// cancelled context never closes it: to end a lease, Release it.
func (l *Lease) Lost() <-chan struct{} { return l.lost }

// Err returns nil while the lease may write. Once Lost is closed it returns
// an error matching ErrLeaseLost and its cause: a *Problem (lease_lost with
// its Reason, or fenced), ErrDeadlinePassed (wrapping the last renewal's
// error) or ErrReleased.
func (l *Lease) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// loseLocked ends the lease with cause; l.mu is held.
func (l *Lease) loseLocked(cause error) error {
	if l.err == nil {
		l.err = &lostError{cause: cause}
		close(l.lost)
	}
	return l.err
}

// lose ends the lease with cause if token is still its current generation
// and reports whether it did. A refusal of an older token (our own new
// generation superseded it) is not a loss: the caller retries under the
// current token.
func (l *Lease) lose(token int64, cause error) (error, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err == nil && l.grant.Token != token {
		return nil, false
	}
	return l.loseLocked(cause), true
}

// loseUnlessMoved is lose for the refusal of a request that may have
// crossed a new generation asked for meanwhile (by Produce after
// not_holder, for instance a parked session, or by the renewal): the
// gateway refuses the old token as soon as the new generation's handover
// begins, long before its grant reaches us. It waits for a new generation
// in flight (regenerate holds regen) before it compares tokens.
func (l *Lease) loseUnlessMoved(token int64, cause error) (error, bool) {
	l.regen.Lock()
	defer l.regen.Unlock()
	return l.lose(token, cause)
}

// check returns the current token and address if the lease may still
// write. Past the local deadline the lease is lost (fail closed): the
// gateway's lease may have expired, and another owner may hold it.
func (l *Lease) check() (int64, string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err == nil && !time.Now().Before(l.deadline) {
		cause := ErrDeadlinePassed
		if l.renewErr != nil {
			cause = errorf("%w (last renewal: %w)", ErrDeadlinePassed, l.renewErr)
		}
		l.loseLocked(cause)
	}
	if l.err != nil {
		return 0, "", l.err
	}
	return l.grant.Token, l.base, nil
}

// extend moves the local deadline to start + TTL: the gateway extended the
// lease after start, so its expiry is later.
func (l *Lease) extend(start time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if d := start.Add(l.ttl); d.After(l.deadline) {
		l.deadline = d
	}
	l.renewErr = nil
}

// follow sends the lease's next requests to the holder a 421 named.
func (l *Lease) follow(err error) {
	var p *Problem
	if errors.As(err, &p) && p.HolderURL != "" {
		l.mu.Lock()
		l.base = p.HolderURL
		l.mu.Unlock()
		l.c.log.Debug("following misdirected to the holder", "lease", l.name, "holder", p.Holder, "holder_url", p.HolderURL)
	}
}

// rehome sends the lease's next requests to BaseURL again when the replica
// at base (a holder a 421 named) drains or does not answer: behind a load
// balancer they reach a replica that does.
func (l *Lease) rehome(base string, err error) {
	var p *Problem
	if errors.As(err, &p) && p.Code != CodeDraining {
		return
	}
	l.mu.Lock()
	if l.base == base {
		l.base = l.c.cfg.BaseURL
	}
	l.mu.Unlock()
}

// regenerate asks for a new generation with token, the generation that was
// refused (not_holder, generation_ended). It is a no-op when another call
// already moved the lease past token. lease_lost (or lease_held) means the
// lease is gone: the lease is lost.
func (l *Lease) regenerate(ctx context.Context, token int64) error {
	l.regen.Lock()
	defer l.regen.Unlock()
	cur, base, err := l.check()
	if err != nil || cur != token {
		return err
	}
	g, start, err := l.c.grant(ctx, base, l.name, token, l.ttl)
	if err == nil {
		l.mu.Lock()
		l.grant = g
		l.mu.Unlock()
		l.extend(start)
		l.c.log.Info("new generation", "lease", l.name, "token", g.Token, "previous", token)
		return nil
	}
	switch reactionTo(err) {
	case lost, held:
		lerr, _ := l.lose(token, err)
		return lerr
	case retry:
		l.rehome(base, err)
	}
	return err
}

func (l *Lease) renewLoop() {
	defer l.stopped()
	failures := 0
	wait := l.renewEvery
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		select {
		case <-l.ctx.Done():
			return
		case <-l.lost: // Produce or Renew found the lease lost
			return
		case <-t.C:
		}
		err := l.renewOnce(l.ctx)
		if l.Err() != nil {
			return
		}
		if err == nil {
			failures, wait = 0, l.renewEvery
		} else {
			failures++
			wait = l.c.backoff(failures, err)
		}
		// Wake at the local deadline at the latest, to fail closed on time.
		if until := time.Until(l.Deadline()); until < wait {
			wait = max(until, 0)
		}
		t.Reset(wait)
	}
}

// stopped ends the renewer. A lease lost while held is told to the
// LostHooks here, once: the renewer stops exactly once, and only Release
// stops it while the lease is not lost (Release then calls the
// ReleasedHooks).
func (l *Lease) stopped() {
	err := l.Err() // before done: once it is closed, Release may mark the lease released
	close(l.done)
	l.c.forget(l)
	if err == nil {
		return
	}
	l.c.log.Warn("lease lost", "lease", l.name, "token", l.Grant().Token, "err", err)
	each(l.c.cfg.Hooks, func(h LostHook) { h.OnLost(l, err) })
}

// Renew renews the lease now, as the background renewal does, without
// changing when that renewal runs next: for a worker about to start a
// step that must find the lease renewed. ctx bounds this renewal only,
// never the lease's life; the request also ends at the local deadline and
// when the lease is released.
//
// nil means the local deadline moved. An error matching ErrLeaseLost
// means the lease is lost (Lost is closed). Any other error (a transport
// error, a 503) leaves the lease as it was, renewed in the background
// until its deadline.
func (l *Lease) Renew(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(l.ctx, cancel)()
	return l.renewOnce(ctx)
}

// renewOnce is one renewal, logged and told to the RenewedHooks, unless
// Release cut it off: that is no failed renewal.
func (l *Lease) renewOnce(ctx context.Context) error {
	start := time.Now()
	err := l.renew(ctx)
	latency := time.Since(start)
	if err != nil && !strings.HasPrefix(err.Error(), prefix) {
		err = errorf("renew %s: %w", l.name, err) // net/http's: name the call
	}
	if err != nil && l.ctx.Err() != nil {
		return err
	}
	if err != nil {
		l.c.log.Warn("renewal failed", "lease", l.name, "latency", latency, "deadline", l.Deadline(), "err", err)
	} else {
		l.c.log.Debug("lease renewed", "lease", l.name, "token", l.Grant().Token, "latency", latency)
	}
	each(l.c.cfg.Hooks, func(h RenewedHook) { h.OnRenewed(l, latency, err) })
	return err
}

// renew renews the current generation once, following a 421 and asking
// for a new generation (which is also a renewal) on the spot. Every
// request ends after one renewal interval, at the local deadline, or when
// ctx ends, whichever comes first: a replica that stopped answering (or a
// balancer holding the request there) costs one interval and a retry,
// not the lease (FM52).
func (l *Lease) renew(parent context.Context) error {
	var err error
	for range 4 {
		token, base, cerr := l.check()
		if cerr != nil {
			return cerr
		}
		ctx, cancel := context.WithDeadline(parent, l.Deadline())
		start := time.Now()
		err = l.patch(ctx, base, token)
		if err == nil {
			cancel()
			l.extend(start)
			return nil
		}
		l.mu.Lock()
		l.renewErr = err
		l.mu.Unlock()
		switch reactionTo(err) {
		case lost:
			if lerr, ok := l.loseUnlessMoved(token, err); ok {
				cancel()
				return lerr
			}
			// Our own new generation superseded token: renew that one.
		case regenerate:
			err = l.regenerate(ctx, token)
			cancel()
			return err
		case follow:
			l.follow(err)
		case retry:
			l.rehome(base, err)
			cancel()
			return err
		default:
			cancel()
			return err
		}
		cancel()
	}
	return err
}

// patch sends one renewal request, bounded by one renewal interval within
// ctx: a new generation asked for after it keeps ctx's whole bound.
func (l *Lease) patch(ctx context.Context, base string, token int64) error {
	ctx, cancel := context.WithTimeout(ctx, l.renewEvery)
	defer cancel()
	return l.c.call(ctx, base, http.MethodPatch, "/v1/leases/"+url.PathEscape(l.name),
		map[string]any{"owner_id": l.c.cfg.Owner, "token": token, "ttl_ms": l.ttl.Milliseconds()}, nil)
}

// Record is one record to produce; a nil Key or Value is a null one.
// Key and Value may hold any bytes. Header names starting with
// "fencegate-" are reserved, and header names and values must be UTF-8
// without NUL (the ledger keeps them as JSON text): the gateway refuses
// any other batch with invalid_request, writing nothing.
type Record struct {
	Key, Value []byte
	Headers    map[string]string
}

// Result says where a committed batch is.
type Result struct {
	Name string `json:"name"`
	// Token is the generation that committed the batch: after a new
	// generation it is later than the one the batch was first sent under.
	Token         int64   `json:"token"`
	Topic         string  `json:"topic"`
	Partition     int32   `json:"partition"`
	Offsets       []int64 `json:"offsets"`
	ProducerEpoch int16   `json:"producer_epoch"`
	// CheckpointOffset is the offset of the batch's checkpoint record
	// (WithCheckpoint), after its records; 0 when the batch carried none
	// (a checkpoint record follows at least one record, so its offset is
	// never 0).
	CheckpointOffset int64 `json:"checkpoint_offset,omitempty"`
}

// ProduceOption sets something of one Produce call: WithCheckpoint.
type ProduceOption func(*produceSettings)

// produceSettings are what a Produce call takes from its ProduceOptions.
type produceSettings struct {
	checkpoint []byte // nil: none
}

// WithCheckpoint makes the batch carry value as the lease's checkpoint:
// the worker's state after this batch, typically where its input goes on
// (an offset, a cursor, a file position). The gateway writes it as one
// more record in the batch's own transaction, so it is committed exactly
// when the batch's records are, and the ledger keeps the newest accepted
// one per lease; Lease.Checkpoint reads it. A nil value is no checkpoint;
// an empty non-nil one is an empty checkpoint. The gateway refuses a
// value over 64 KiB with payload_too_large, writing nothing.
//
// A batch with a checkpoint is sent in version 2 of the binary body; a
// gateway that predates checkpoints refuses it (invalid_request) rather
// than drop the checkpoint. Batches without one stay in version 1.
func WithCheckpoint(value []byte) ProduceOption {
	return func(s *produceSettings) { s.checkpoint = value }
}

// produceOptions applies opts.
func produceOptions(opts []ProduceOption) produceSettings {
	var s produceSettings
	for _, o := range opts {
		if o != nil {
			o(&s)
		}
	}
	return s
}

// wireRecords converts recs for the binary body, header names sorted.
func wireRecords(recs []Record) []wire.Record {
	out := make([]wire.Record, len(recs))
	for i, r := range recs {
		out[i] = wire.Record{Key: r.Key, Value: r.Value}
		if len(r.Headers) == 0 {
			continue
		}
		hs := make([]wire.Header, 0, len(r.Headers))
		for _, k := range slices.Sorted(maps.Keys(r.Headers)) {
			hs = append(hs, wire.Header{Name: k, Value: []byte(r.Headers[k])})
		}
		out[i].Headers = hs
	}
	return out
}

// Produce writes recs as one batch, in one transaction, and returns where
// it was committed. batchID (1 to 255 bytes) is the idempotency key:
// retrying it never puts the batch in the ledger twice.
//
// Produce follows the answer table of the API until the batch is
// committed, refused for good, the lease is lost, or ctx ends:
//   - batch_aborted, too_many_requests, 5xx and transport errors: the same
//     batch id again, on the same generation, after a backoff;
//   - generation_ended, not_holder: a new generation with the current
//     token, then the same batch id under it;
//   - misdirected: the same request to the holder the 421 names;
//   - lease_lost, fenced: the lease is lost (Err, Lost);
//   - other 4xx: returned as a *Problem (fix the request).
//
// Every attempt starts before the lease's local deadline. When an error is
// returned after an attempt whose outcome stayed unknown, it matches
// ErrOutcomeUnknown: the batch may be committed.
//
// ctx bounds this call only (its attempts and the waits between them);
// when it ends, Produce returns an error matching ctx's error and the
// last answer. The lease goes on either way.
func (l *Lease) Produce(ctx context.Context, batchID string, recs []Record, opts ...ProduceOption) (Result, error) {
	start := time.Now()
	res, err := l.produce(ctx, batchID, recs, produceOptions(opts))
	latency := time.Since(start)
	outcome := outcomeOf(err)
	l.c.log.Debug("produce returned", "lease", l.name, "batch", batchID, "outcome", outcome.String(), "latency", latency, "err", err)
	each(l.c.cfg.Hooks, func(h ProducedHook) { h.OnProduced(l, batchID, outcome, latency, err) })
	return res, err
}

func (l *Lease) produce(ctx context.Context, batchID string, recs []Record, s produceSettings) (Result, error) {
	path := "/v1/leases/" + url.PathEscape(l.name) + "/records"
	records := wireRecords(recs)
	unknown := false
	fail := func(err error) (Result, error) {
		if unknown {
			err = errorf("%w; %w", err, ErrOutcomeUnknown)
		}
		return Result{}, err
	}
	var last error // the last answer, for the error after ctx ends
	waits := 0
	pause := func(err error) error {
		waits++
		return sleep(ctx, l.c.backoff(waits, err))
	}
	prev := refuse
	for {
		token, base, err := l.check()
		if err != nil {
			return fail(err)
		}
		if ctx.Err() != nil {
			return fail(ended("produce "+batchID, ctx, last))
		}
		var res Result
		err = l.c.call(ctx, base, http.MethodPost, path, wire.Batch{
			OwnerID: l.c.cfg.Owner, Token: token, BatchID: batchID, Records: records, Checkpoint: s.checkpoint}, &res)
		if err == nil {
			return res, nil
		}
		unknown = unknown || !definite(err)
		if ctx.Err() == nil {
			last = err // not the request the context's end cut off
		}
		r := reactionTo(err)
		again := r == prev // a second 421 or new generation in a row: the session is moving
		prev = r
		switch r {
		case lost:
			if lerr, ok := l.loseUnlessMoved(token, err); ok {
				return fail(lerr)
			}
			// Our own new generation superseded token (a renewal asked
			// for it meanwhile): the same batch id under the current one.
		case regenerate:
			rerr := l.regenerate(ctx, token)
			if lerr := l.Err(); lerr != nil {
				return fail(lerr)
			}
			if rerr != nil || again {
				_ = pause(cmp.Or(rerr, err)) // a context that ended is reported above
			}
		case follow:
			l.follow(err)
			if again {
				_ = pause(err)
			}
		case retry:
			l.rehome(base, err)
			l.c.log.Debug("produce failed, retrying", "lease", l.name, "batch", batchID, "token", token, "err", err)
			_ = pause(err)
		default:
			return fail(err)
		}
	}
}

// Release stops renewing and releases the lease at the replica holding its
// session (following a 421; retrying 503s and transport errors with
// backoff until ctx ends). Afterwards the lease is lost with cause
// ErrReleased, whatever the answer; a lease whose release did not get
// through expires at the gateway after its TTL. Releasing a lease that is
// already lost returns its error. Client.Close releases every lease of
// the client.
//
// ctx bounds the release request and its retries; the renewal stops at
// once whether or not ctx ends first.
func (l *Lease) Release(ctx context.Context) error {
	err := l.release(ctx)
	if err != nil {
		l.c.log.Warn("release failed", "lease", l.name, "err", err)
	} else {
		l.c.log.Info("lease released", "lease", l.name, "token", l.Grant().Token)
	}
	each(l.c.cfg.Hooks, func(h ReleasedHook) { h.OnReleased(l, err) })
	return err
}

func (l *Lease) release(ctx context.Context) error {
	l.cancel()
	<-l.done
	defer func() {
		l.mu.Lock()
		l.loseLocked(ErrReleased)
		l.mu.Unlock()
	}()
	var last error // the last answer, for the error after ctx ends
	for n := 1; ; n++ {
		token, base, err := l.check()
		if err != nil {
			return err
		}
		if ctx.Err() != nil {
			return ended("release "+l.name, ctx, last)
		}
		q := url.Values{"owner_id": {l.c.cfg.Owner}, "token": {strconv.FormatInt(token, 10)}}
		err = l.c.call(ctx, base, http.MethodDelete, "/v1/leases/"+url.PathEscape(l.name)+"?"+q.Encode(), nil, nil)
		if err == nil {
			return nil
		}
		if ctx.Err() == nil {
			last = err
		}
		switch reactionTo(err) {
		case follow:
			l.follow(err)
			if n > 1 {
				_ = sleep(ctx, l.c.backoff(n, err)) // a context that ended is reported above
			}
		case retry:
			l.rehome(base, err)
			_ = sleep(ctx, l.c.backoff(n, err))
		case lost:
			l.lose(token, err)
			return err
		default:
			return err
		}
	}
}
