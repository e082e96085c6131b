package sdktest

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/fencegate/fencegate/client"
	"github.com/fencegate/fencegate/gateway"
)

// idleWatchers is how many watchers the notice benchmarks keep open on
// the watched replica, noticeLeases how many leases are taken over.
const (
	idleWatchers = 1000
	noticeLeases = 100
)

// BenchmarkWatchNotice measures, from a new generation's grant (its
// event's time, the database's clock on this host) to the old owner's
// Lost(), p50 and p99 over noticeLeases takeovers, with idleWatchers
// more streams open on the old owner's replica: the takeover on the same
// replica and on another one. Run with -benchtime=1x (each run takes
// every lease over once).
func BenchmarkWatchNotice(b *testing.B) {
	for _, where := range []string{"same-replica", "other-replica"} {
		b.Run(where, func(b *testing.B) {
			for range b.N {
				lat := noticeLatencies(b, where == "other-replica")
				slices.Sort(lat)
				b.ReportMetric(ms(lat[len(lat)/2]), "p50_ms")
				b.ReportMetric(ms(lat[(len(lat)*99+99)/100-1]), "p99_ms")
				b.ReportMetric(ms(lat[len(lat)-1]), "max_ms")
			}
		})
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// noticeLatencies takes every lease over once and returns the latencies.
func noticeLatencies(b *testing.B, elsewhere bool) []time.Duration {
	bd := setup(b)
	a, other := bd.newReplica(nil), bd.newReplica(nil)
	a.watching(gateway.WatchConfig{})
	other.watching(gateway.WatchConfig{})
	for i := range idleWatchers {
		openRawQueued(b, a.url, fmt.Sprintf("/v1/leases/shard:idle-%d/events", i), -1, 1)
	}
	c := newClient(b, a.url, "w1", func(cfg *client.Config) {
		cfg.TTL, cfg.RenewEvery, cfg.DisableWatch = time.Minute, 50*time.Second, false
	})
	defer c.Close(context.Background())
	leases := make([]*client.Lease, noticeLeases)
	for i := range leases {
		l, err := c.Acquire(context.Background(), fmt.Sprintf("shard:n-%d", i))
		if err != nil {
			b.Fatal(err)
		}
		leases[i] = l
	}
	waitStreams(b, a, idleWatchers+noticeLeases)
	target := a.url
	if elsewhere {
		target = other.url
	}
	b.ResetTimer()
	var lat []time.Duration
	for _, l := range leases {
		regenerate(b, target, l.Name(), "w1", l.Grant().Token)
		err := lostWithin(b, l, 10*time.Second)
		at := time.Now()
		var ne *client.NoticeError
		if !errors.As(err, &ne) {
			b.Fatalf("lost with %v, want a notice", err)
		}
		lat = append(lat, at.Sub(ne.Event.At))
	}
	b.StopTimer()
	return lat
}

// waitStreams waits until n watch streams are open on r.
func waitStreams(tb testing.TB, r *replica, n int) {
	tb.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(30 * time.Second)
	for r.h.WatchStreams() < n {
		select {
		case <-tick.C:
		case <-deadline:
			tb.Fatalf("%d watch streams open, want %d", r.h.WatchStreams(), n)
		}
	}
}

// BenchmarkIdleWatchers measures what idleWatchers open, idle streams
// cost this process (the replica and the watchers' HTTP clients both:
// an upper bound for the replica): heap and goroutines after they opened,
// and CPU over idleWindow with heartbeats at the default interval.
func BenchmarkIdleWatchers(b *testing.B) {
	const idleWindow = 20 * time.Second
	for range b.N {
		bd := setup(b)
		a := bd.newReplica(nil)
		a.watching(gateway.WatchConfig{})
		heap0, gr0 := heapNow()
		for i := range idleWatchers {
			openRawQueued(b, a.url, fmt.Sprintf("/v1/leases/shard:idle-%d/events", i), -1, 1)
		}
		waitStreams(b, a, idleWatchers)
		heap1, gr1 := heapNow()
		cpu0 := cpuNow()
		<-time.After(idleWindow)
		cpu := cpuNow() - cpu0
		b.ReportMetric(float64(heap1-heap0)/idleWatchers/1024, "heap_KiB/watcher")
		b.ReportMetric(float64(gr1-gr0)/idleWatchers, "goroutines/watcher")
		b.ReportMetric(ms(cpu)/idleWindow.Seconds(), "cpu_ms/s")
	}
}

func heapNow() (uint64, int) {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse + m.StackInuse, runtime.NumGoroutine()
}

func cpuNow() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
