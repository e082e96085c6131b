package loadtest

import (
	"sync"
	"sync/atomic"
	"time"
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
	Token   int64
	BatchID string
	Offsets []int64
}

// second is one second of the timeline.
type second struct {
	Records   int64   `json:"records"`
	Batches   int64   `json:"batches"`
	P50Ms     float64 `json:"p50_ms"`
	P99Ms     float64 `json:"p99_ms"`
	Handovers int64   `json:"handovers"`
	Fences    int64   `json:"fences"`
	Refused   int64   `json:"stale_refused"`
}

// stats are what workers record during the gateway phase.
type stats struct {
	start    time.Time
	produce  Histogram
	handover Histogram
	renew    Histogram

	records, batches, handovers, fences, errors atomic.Int64
	staleAccepted, staleRefused, staleAttempts  atomic.Int64

	mu       sync.Mutex
	acked    []AckedBatch
	grants   []Grant
	timeline []timelineSecond
}

type timelineSecond struct {
	hist Histogram
	second
}

func newStats() *stats { return &stats{start: time.Now()} }

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
	s.batches.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.acked = append(s.acked, b)
	sl := s.slot(time.Now())
	sl.Records += int64(records)
	sl.Batches++
	sl.hist.Record(took)
}

func (s *stats) grant(g Grant, took time.Duration) {
	s.handover.Record(took)
	s.handovers.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.grants = append(s.grants, g)
	s.slot(g.AckAt).Handovers++
}

func (s *stats) fenced() {
	s.fences.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.slot(time.Now()).Fences++
}

func (s *stats) refused() {
	s.staleRefused.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.slot(time.Now()).Refused++
}

// latestGrant returns the newest acknowledged token of lease.
func (s *stats) latestGrant(lease string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var t int64
	for _, g := range s.grants {
		if g.Lease == lease && g.Token > t {
			t = g.Token
		}
	}
	return t
}

// seconds returns the timeline with quantiles filled in.
func (s *stats) seconds() []second {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]second, len(s.timeline))
	for i := range s.timeline {
		out[i] = s.timeline[i].second
		out[i].P50Ms = s.timeline[i].hist.Ms(0.5)
		out[i].P99Ms = s.timeline[i].hist.Ms(0.99)
	}
	return out
}
