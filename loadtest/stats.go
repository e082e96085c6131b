package loadtest

import (
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencegate/fencegate/loadtest/report"
	"github.com/fencegate/fencegate/verify"
)

// Grant is an acquire the gateway acknowledged (for I4).
type Grant struct {
	Lease string
	Token int64
	AckAt time.Time
}

// AckedBatch is a batch the gateway answered 2xx (for I3 and the ledger).
type AckedBatch struct {
	Lease   string
	Owner   string
	Token   int64
	BatchID string
	Offsets []int64
	// At is when the batch was acknowledged.
	At time.Time
}

// stats are what workers record during the gateway phase.
type stats struct {
	start    time.Time
	produce  report.Histogram
	handover report.Histogram
	renew    report.Histogram

	records, batches, handovers, fences, errors atomic.Int64
	staleRefused, staleAttempts                 atomic.Int64
	attempts, replicaFreezes, rehomes           atomic.Int64
	deferred                                    atomic.Int64 // acquires answered 429 (retried after Retry-After)

	mu       sync.Mutex
	acked    []AckedBatch
	grants   []Grant
	latest   map[string]int64 // lease -> newest acknowledged token
	timeline []timelineSecond
	// answersByCode counts produce answers ("ok", a problem code, or
	// "transport"); staleByLayer counts the answers to generations that a
	// later one had overtaken, by the layer that answered.
	answersByCode map[string]int64
	staleByLayer  map[string]int64
	// The run splits when every lease has been granted once: before is
	// the cold start (its handovers, errors and length), after is the
	// steady state, whose figures exclude the start.
	wantLeases   int
	held         map[string]bool
	steady       atomic.Bool
	steadyAt     time.Time // under mu
	coldHandover report.Histogram
	coldErrors   atomic.Int64
	steadyStats  steadyFigures
	// batched are the leases with an acknowledged batch; allBatchedAt is
	// when the last of them had its first (zero: not yet), and
	// allBatched is closed then; handoversAtAllBatched are the handovers
	// until that moment. Under mu.
	batched      map[string]bool
	allBatchedAt time.Time
	// endedAt is when a scenario ended the gateway phase before its
	// Duration (endEarly; zero: it ran its Duration).
	endedAt               time.Time
	allBatched            chan struct{}
	handoversAtAllBatched int64
	// errorsByCall counts worker errors by call and answer, for example
	// "acquire too_many_requests".
	errorsByCall map[string]int64
	// drainTook is how long the drained replica took from SIGTERM to exit;
	// rehomeTook how long until every lease it held had a new generation
	// elsewhere (-1: some never did). Written by the drain fault before
	// the run ends.
	drainTook, rehomeTook time.Duration
	drainErrors           int64 // worker errors from SIGTERM until every lease moved
	// checked are the attempts whose answer the log must confirm: definite
	// refusals (nothing committed) and 200s to requests sent stale.
	checked []attemptAnswer
	// history is every produce attempt with its answer, by partition, for
	// the history checker (verify.CheckHistory).
	history map[int32][]verify.Op
	// netFaultEnds are when each network fault ended (--net-fault).
	netFaultEnds []time.Time
}

// attemptAnswer is one produce attempt the log is checked against.
type attemptAnswer struct {
	id string
	// definite: answered "nothing of this batch is or will be committed".
	definite bool
	// staleOK: sent after a later generation was acknowledged, and
	// answered 200.
	staleOK bool
}

type timelineSecond struct {
	hist report.Histogram
	report.Second
}

// steadyFigures are recorded once every lease has been granted.
type steadyFigures struct {
	produce, handover, renew report.Histogram
	records                  atomic.Int64
}

func newStats(leases int) *stats {
	return &stats{start: time.Now(), wantLeases: leases, held: map[string]bool{}, latest: map[string]int64{}, answersByCode: map[string]int64{}, staleByLayer: map[string]int64{},
		errorsByCall: map[string]int64{}, history: map[int32][]verify.Op{}, batched: map[string]bool{}, allBatched: make(chan struct{})}
}

// error counts a worker error: an answer to call the worker cannot act on.
func (s *stats) error(call string, rep reply) {
	s.errors.Add(1)
	if !s.steady.Load() {
		s.coldErrors.Add(1)
	}
	s.mu.Lock()
	s.errorsByCall[call+" "+answerCode(rep)]++
	s.mu.Unlock()
}

// nextAttempt names a new produce attempt.
func (s *stats) nextAttempt() string { return "a" + strconv.FormatInt(s.attempts.Add(1), 10) }

// answer records the answer to attempt, a batch of op (lease, token,
// batch id) on partition. staleAtSend and staleAtAnswer say whether a
// later generation of the lease was acknowledged before the request was
// sent, or before its answer came.
func (s *stats) answer(attempt string, partition int32, op verify.Op, rep reply, staleAtSend, staleAtAnswer bool) {
	l := layer(rep)
	if l == layerBrokerFence {
		s.fenced()
	}
	op.Answer = historyAnswer(rep, &op)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.history[partition] = append(s.history[partition], op)
	s.answersByCode[answerCode(rep)]++
	if a := (attemptAnswer{id: attempt, definite: definite(rep), staleOK: staleAtSend && rep.status == 200}); a.definite || a.staleOK {
		s.checked = append(s.checked, a)
	}
	if !staleAtSend && !staleAtAnswer {
		return
	}
	s.staleAttempts.Add(1)
	s.staleByLayer[l]++
	if rep.status != 200 {
		s.staleRefused.Add(1)
		s.slot(time.Now()).Refused++
	}
}

func (s *stats) slot(t time.Time) *timelineSecond {
	i := int(t.Sub(s.start) / time.Second)
	for len(s.timeline) <= i {
		s.timeline = append(s.timeline, timelineSecond{})
	}
	return &s.timeline[i]
}

func (s *stats) batch(b AckedBatch, records int, took time.Duration) {
	s.produce.Record(took)
	s.records.Add(int64(records))
	if s.steady.Load() {
		s.steadyStats.produce.Record(took)
		s.steadyStats.records.Add(int64(records))
	}
	s.batches.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.acked = append(s.acked, b)
	s.firstBatch(b.Lease)
	sl := s.slot(time.Now())
	sl.Records += int64(records)
	sl.Batches++
	sl.hist.Record(took)
}

// firstBatch notes that lease has an acknowledged batch, and when every
// lease has one, the moment and the handovers until then. Under mu.
func (s *stats) firstBatch(lease string) {
	if s.batched[lease] || !s.allBatchedAt.IsZero() {
		return
	}
	s.batched[lease] = true
	if len(s.batched) >= s.wantLeases {
		s.allBatchedAt = time.Now()
		s.handoversAtAllBatched = s.handovers.Load()
		close(s.allBatched)
	}
}

func (s *stats) grant(g Grant, took time.Duration) {
	s.handover.Record(took)
	s.handovers.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.steady.Load() {
		s.steadyStats.handover.Record(took)
	} else {
		s.coldHandover.Record(took)
		s.held[g.Lease] = true
		if len(s.held) >= s.wantLeases {
			s.steadyAt = time.Now()
			s.steady.Store(true)
		}
	}
	s.grants = append(s.grants, g)
	s.latest[g.Lease] = max(s.latest[g.Lease], g.Token)
	s.slot(g.AckAt).Handovers++
}

// renewed records a renewal's latency.
func (s *stats) renewed(took time.Duration) {
	s.renew.Record(took)
	if s.steady.Load() {
		s.steadyStats.renew.Record(took)
	}
}

func (s *stats) fenced() {
	s.fences.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.slot(time.Now()).Fences++
}

// latestGrant returns the newest acknowledged token of lease.
func (s *stats) latestGrant(lease string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.latest[lease]
}

// seconds returns the timeline with quantiles filled in.
func (s *stats) seconds() []report.Second {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]report.Second, len(s.timeline))
	for i := range s.timeline {
		out[i] = s.timeline[i].Second
		out[i].P50Ms = s.timeline[i].hist.Ms(0.5)
		out[i].P99Ms = s.timeline[i].hist.Ms(0.99)
	}
	return out
}

// endEarly records that a scenario ends the gateway phase now, before
// its Duration (a broker-fault run after its rounds, a cold start once
// every lease wrote): the phase's figures are per second of what ran.
func (s *stats) endEarly() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.endedAt.IsZero() {
		s.endedAt = time.Now()
	}
}
