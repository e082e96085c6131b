package gateway

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencegate/fencegate/barrier"
	"github.com/fencegate/fencegate/leasestore"
	"github.com/fencegate/fencegate/txnmap"
)

// session is the local state of one generation of one lease on this
// replica: exactly one token bound to exactly one producer instance.
//
// mu serialises the transactions of the session (a producer has at most
// one open transaction). The ownership state (deadline, ended) has its own
// small lock so that renewals, takeovers and the reaper never wait behind a
// transaction in flight.
type session struct {
	name       string
	owner      string
	token      int64
	client     string // the API client the generation is bound to
	place      txnmap.Placement
	producerID int64
	epoch      int16

	mu        sync.Mutex
	prod      *producer   // nil once closed (ended or parked)
	committed batchMemory // its own lock
	lastBatch time.Time   // monotonic: the last batch admitted, or the grant; guarded by mu
	// parked: the producer was closed after idling (park.go); set under
	// mu, read without it (metrics, the park loop). The session stays
	// live: it renews, and its next batch is refused not_holder.
	parked atomic.Bool

	// renewMu serialises the session's renewals: each sets the local
	// deadline from its own request start (extend).
	renewMu sync.Mutex

	state    sync.Mutex
	deadline time.Time // monotonic: request start + TTL
	ended    *Error    // why the session ended; nil while live
}

// admit lets a request use a session: same owner, same token, not ended
// and inside the local deadline (a renewal, and the re-checks of a batch
// in flight; a batch enters through take, which applies the same two
// checks around the batch-id memory). It never consults
// Postgres (docs/design.md, "Produce"): produce must survive a lock-service blip,
// and safety comes from the broker's epoch fence, not from this check.
// A request of a later token than the session's never gets here
// (Gateway.sessionFor): that is a routing answer, not a lost lease.
func (s *session) admit(owner string, token int64, now time.Time) *Error {
	if e := s.generation(owner, token); e != nil {
		return e
	}
	return s.live(now)
}

// generation refuses a request of another generation than the session's.
// Owner and token never change in a session's life, so it takes no lock.
func (s *session) generation(owner string, token int64) *Error {
	switch {
	case token != s.token:
		return errorf(CodeLeaseLost, "token %d is not the current generation of %q on this replica (current %d)", token, s.name, s.token)
	case owner != s.owner:
		return errorf(CodeLeaseLost, "owner %q does not hold %q", owner, s.name)
	}
	return nil
}

// live refuses once the session ended or its local deadline passed.
func (s *session) live(now time.Time) *Error {
	s.state.Lock()
	defer s.state.Unlock()
	switch {
	case s.ended != nil:
		return s.ended
	case !now.Before(s.deadline):
		// Fail closed: past the local deadline nothing is written, even if
		// nobody took the lease.
		s.ended = expiredError(s.name)
		return s.ended
	}
	return nil
}

// take decides what a batch may do with the session, in the one order
// that keeps every answer true (s.mu is held): a request of another
// generation, or from a client that may not act for the generation's
// (FM38), is refused; a batch id this generation committed is
// remembered, and answered with its original offsets even after the
// session ended (a definite refusal would tell the worker "not written"
// of a batch that landed); anything else must find the session live.
// It returns the remembered result, or nil and why the batch may not be
// written (nil: admitted).
func (s *session) take(req ProduceRequest, now time.Time) (*ProduceResult, *Error) {
	if res, e := s.prior(req); res != nil || e != nil {
		return res, e
	}
	return nil, s.live(now)
}

// prior is what take decides before it asks whether the session is live;
// it needs no lock of the session's. Under s.mu (take) a retry of the
// batch in flight finds it remembered once it committed; without
// (Gateway.drained) it may not yet.
func (s *session) prior(req ProduceRequest) (*ProduceResult, *Error) {
	if e := s.generation(req.Owner, req.Token); e != nil {
		return nil, e
	}
	if e := req.Caller.mayActFor(s.client, s.name); e != nil {
		return nil, e
	}
	return s.remembered(req)
}

// remembered returns the result of a batch id this generation committed,
// or nil. A retry with another number of records is a worker bug, refused
// rather than guessed at.
func (s *session) remembered(req ProduceRequest) (*ProduceResult, *Error) {
	res, ok := s.committed.recall(req.BatchID)
	switch {
	case !ok:
		return nil, nil
	case len(res.Offsets) != len(req.Records):
		return nil, errorf(CodeInvalidRequest, "batch_id %q was committed in this generation with %d records; this request has %d",
			req.BatchID, len(res.Offsets), len(req.Records))
	}
	return &res, nil
}

// expiredError is the answer once the local deadline passed: reason
// "expired" tells the worker (and the harness) that the local deadline,
// not a later generation, refused the request.
func expiredError(name string) *Error {
	e := errorf(CodeLeaseLost, "lease %q expired (local deadline passed)", name)
	e.Reason = leasestore.LostExpired
	e.outcome = outcomeExpired
	return e
}

// end marks the session ended with reason; the first reason wins.
func (s *session) end(reason *Error) bool {
	s.state.Lock()
	defer s.state.Unlock()
	if s.ended != nil {
		return false
	}
	s.ended = reason
	return true
}

// endedReason returns why the session ended, or nil.
func (s *session) endedReason() *Error {
	s.state.Lock()
	defer s.state.Unlock()
	return s.ended
}

// extend sets the local deadline after Postgres confirmed a renewal whose
// request started ttl before deadline: later or earlier than before, since
// a renewal with a shorter TTL moved the database's expiry earlier too
// (I5). Renewals of a session are serialised (renewMu), so the last one
// Postgres applied is the last one set. It never revives an ended session.
func (s *session) extend(deadline time.Time) bool {
	s.state.Lock()
	defer s.state.Unlock()
	if s.ended != nil {
		return false
	}
	s.deadline = deadline
	return true
}

// shorten moves the local deadline to deadline if that is earlier: a
// renewal whose outcome is unknown may have set the database's expiry
// there.
func (s *session) shorten(deadline time.Time) {
	s.state.Lock()
	defer s.state.Unlock()
	if deadline.Before(s.deadline) {
		s.deadline = deadline
	}
}

// remaining is the time left before the local deadline (never negative).
func (s *session) remaining(now time.Time) time.Duration {
	s.state.Lock()
	defer s.state.Unlock()
	return max(s.deadline.Sub(now), 0)
}

func (s *session) expired(now time.Time) bool {
	s.state.Lock()
	defer s.state.Unlock()
	return !now.Before(s.deadline)
}

// closeProducer destroys the producer; the caller holds s.mu.
func (s *session) closeProducer() {
	if s.prod != nil {
		s.prod.close()
		s.prod = nil
	}
}

// stamp is what every record of this generation says in its fencegate
// headers; a data record adds its batch and seq.
func (s *session) stamp() barrier.Stamp {
	return barrier.Stamp{Lease: s.name, Token: s.token, Owner: s.owner}
}

// rememberedBatches and rememberedOffsets bound what a session keeps for
// idempotent retries within its generation: at most 1024 batch ids and
// 16,384 offsets (128 KiB), whichever is reached first. Bounded in entries
// alone, a session of 10,000-record batches kept about 80 MB.
const (
	rememberedBatches = 1024
	rememberedOffsets = 1 << 14
)

// batchMemory remembers the last committed batches of a generation, within
// rememberedBatches and rememberedOffsets, so that a worker that lost a 200
// (a timeout) and retries the same batch_id gets the original offsets and
// writes nothing. It has its own lock, so that a draining replica answers
// a retry without waiting behind the batch in flight. Older ids are
// forgotten in commit order (a batch larger than rememberedOffsets is not
// kept at all); a retry of a forgotten id writes the batch again and the
// ledger keeps it once (its dedup key is the owner's batch id).
type batchMemory struct {
	mu      sync.Mutex
	byID    map[string]ProduceResult
	order   []string // ids in commit order, oldest first
	offsets int      // offsets kept, over byID
}

func (m *batchMemory) recall(id string) (ProduceResult, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.byID[id]
	return r, ok
}

func (m *batchMemory) remember(id string, r ProduceResult) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(r.Offsets) > rememberedOffsets {
		return
	}
	if m.byID == nil {
		m.byID = make(map[string]ProduceResult)
	}
	for len(m.order) >= rememberedBatches || m.offsets+len(r.Offsets) > rememberedOffsets {
		m.forgetOldest()
	}
	m.order = append(m.order, id)
	m.byID[id] = r
	m.offsets += len(r.Offsets)
}

func (m *batchMemory) forgetOldest() {
	old := m.order[0]
	m.order = m.order[1:]
	m.offsets -= len(m.byID[old].Offsets)
	delete(m.byID, old)
}

// size is what the memory holds: batch ids and offsets.
func (m *batchMemory) size() (batches, offsets int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.byID), m.offsets
}
