package leasestore_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkAcquire measures one grant (insert path) per iteration.
func BenchmarkAcquire(b *testing.B) {
	tb := setup(b)
	i := 0
	for b.Loop() {
		i++
		if _, err := tb.store.Acquire(tb.ctx, fmt.Sprintf("bench:%d", i), "w", time.Minute, "r", "c", ""); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAcquireTakeover measures the takeover path: each iteration takes
// over a released row.
func BenchmarkAcquireTakeover(b *testing.B) {
	tb := setup(b)
	for b.Loop() {
		l, err := tb.store.Acquire(tb.ctx, "bench:takeover", "w", time.Minute, "r", "c", "")
		if err != nil {
			b.Fatal(err)
		}
		if _, err := tb.store.Activate(tb.ctx, l.Name, l.Token, 1, 1); err != nil {
			b.Fatal(err)
		}
		if _, err := tb.store.Release(tb.ctx, l.Name, "w", l.Token); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRenew measures one renewal of an active lease.
func BenchmarkRenew(b *testing.B) {
	tb := setup(b)
	l, err := tb.store.Acquire(tb.ctx, "bench:renew", "w", time.Minute, "r", "c", "")
	if err != nil {
		b.Fatal(err)
	}
	if _, err := tb.store.Activate(tb.ctx, l.Name, l.Token, 1, 1); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := tb.store.Renew(tb.ctx, l.Name, "w", l.Token, time.Minute, ""); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRenewParallel renews distinct leases from parallel goroutines
// (FM20: acquire/renew under contention for the pool).
func BenchmarkRenewParallel(b *testing.B) {
	tb := setup(b)
	var n atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		name := fmt.Sprintf("bench:par:%d", n.Add(1))
		l, err := tb.store.Acquire(tb.ctx, name, "w", time.Minute, "r", "c", "")
		if err == nil {
			_, err = tb.store.Activate(tb.ctx, name, l.Token, 1, 1)
		}
		if err != nil {
			b.Error(err)
			return
		}
		for pb.Next() {
			if _, err := tb.store.Renew(tb.ctx, name, "w", l.Token, time.Minute, ""); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkAcquireParallel grants distinct leases from 32 goroutines, with
// the events' notification (migration 0007) and with its trigger
// disabled: Postgres serialises the commits of notifying transactions, so
// the ratio is the cost of notifying at a cold start.
func BenchmarkAcquireParallel(b *testing.B) {
	for _, notify := range []bool{true, false} {
		b.Run(fmt.Sprintf("notify=%t", notify), func(b *testing.B) {
			tb := setup(b)
			if !notify {
				if _, err := tb.db.Pool.Exec(tb.ctx, `ALTER TABLE lease_events DISABLE TRIGGER lease_events_notify`); err != nil {
					b.Fatal(err)
				}
			}
			var n atomic.Int64
			b.SetParallelism(16)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := tb.store.Acquire(tb.ctx, fmt.Sprintf("bench:cold:%d", n.Add(1)), "w", time.Minute, "r", "c", ""); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
