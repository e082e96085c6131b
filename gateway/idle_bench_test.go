package gateway

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/kafkatest"
)

// BenchmarkIdleProducers: what live producers that send nothing cost the
// process (BENCHMARKS.md, "Cold start of 1,000, again"). 100 producers are
// started as a handover starts them (metadata, InitTransactions, one
// committed transaction), then the process's CPU is read over a 3 s window
// in which they only exist; the in-process broker is idle meanwhile.
// Reports cpu_pct_of_core (for the 100).
func BenchmarkIdleProducers(b *testing.B) {
	const n = 100
	k := kafkatest.Start(b, "idle", 16)
	cfg := KafkaConfig{Config: k.Conn, TransactionTimeoutMS: 10000}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ps := make([]*producer, 0, n)
	defer func() {
		for _, p := range ps {
			p.close()
		}
	}()
	for i := range n {
		p, err := newProducer(cfg, fmt.Sprintf("%s/idle-%d", k.RouterPrefix("idle"), i))
		if err != nil {
			b.Fatal(err)
		}
		ps = append(ps, p)
		if err := startIdle(ctx, p, k.Topic, int32(i%16)); err != nil {
			b.Fatal(err)
		}
	}
	var pct float64
	for b.Loop() {
		c0, t0 := processCPU(), time.Now()
		if !pause(ctx, 3*time.Second) {
			b.Fatal(ctx.Err())
		}
		pct = 100 * (processCPU() - c0).Seconds() / time.Since(t0).Seconds()
	}
	b.ReportMetric(pct, "cpu_pct_of_core")
}

// startIdle brings p to where a handover leaves it: connected, epoch
// bumped, one transaction committed.
func startIdle(ctx context.Context, p *producer, topic string, partition int32) error {
	if err := p.warm(ctx, topic); err != nil {
		return err
	}
	if err := p.p.InitTransactions(ctx); err != nil {
		return err
	}
	if err := p.p.BeginTransaction(); err != nil {
		return err
	}
	if _, err := p.send(ctx, topic, partition, []record{{key: []byte("k"), value: []byte("v")}}); err != nil {
		return err
	}
	return p.p.CommitTransaction(ctx)
}

// processCPU is the user and system CPU time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
