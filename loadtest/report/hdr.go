package report

import (
	"math/bits"
	"sync"
	"time"
)

// Histogram records durations with HDR-style precision: values below 128µs
// are exact, above that each power of two is split into 64 buckets, so any
// reported quantile is within 1.6% of the true value. It is safe for
// concurrent use and never allocates after creation.
type Histogram struct {
	mu     sync.Mutex
	counts [64 * 64]uint64
	total  uint64
	max    uint64
}

const subBits = 6 // 64 sub-buckets per power of two

func bucketOf(us uint64) int {
	if us < 1<<(subBits+1) {
		return int(us)
	}
	e := bits.Len64(us) - subBits - 1 // shift that leaves subBits+1 significant bits
	return (e+1)<<subBits + int(us>>e) - 1<<subBits
}

func valueOf(b int) uint64 {
	if b < 1<<(subBits+1) {
		return uint64(b)
	}
	e := b>>subBits - 1
	sub := uint64(b&(1<<subBits-1)) + 1<<subBits
	return sub<<e + (1<<e)/2 // middle of the bucket
}

// Record adds one duration.
func (h *Histogram) Record(d time.Duration) {
	us := uint64(max(d.Microseconds(), 0))
	b := min(bucketOf(us), len(h.counts)-1)
	h.mu.Lock()
	h.counts[b]++
	h.total++
	h.max = max(h.max, us)
	h.mu.Unlock()
}

// Count is the number of recorded values.
func (h *Histogram) Count() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.total
}

// Quantile returns the q-quantile (0..1), 0 when empty.
func (h *Histogram) Quantile(q float64) time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.total == 0 {
		return 0
	}
	rank := uint64(q*float64(h.total-1)) + 1
	var seen uint64
	for b, c := range h.counts {
		seen += c
		if seen >= rank {
			return time.Duration(min(valueOf(b), h.max)) * time.Microsecond
		}
	}
	return time.Duration(h.max) * time.Microsecond
}

// Ms returns the q-quantile in milliseconds.
func (h *Histogram) Ms(q float64) float64 { return float64(h.Quantile(q).Microseconds()) / 1000 }

// Merge adds o's counts to h.
func (h *Histogram) Merge(o *Histogram) {
	o.mu.Lock()
	counts, total, mx := o.counts, o.total, o.max
	o.mu.Unlock()
	h.mu.Lock()
	defer h.mu.Unlock()
	for i, c := range counts {
		h.counts[i] += c
	}
	h.total += total
	h.max = max(h.max, mx)
}
