package baseline

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/fencegate/fencegate/kafkaconn"
	"github.com/fencegate/fencegate/loadtest/report"
	"github.com/fencegate/fencegate/loadtest/stack"
)

// MinDuration is the shortest a baseline runs, however short the gateway
// phase.
const MinDuration = 2 * time.Second

// RunDirect runs the direct baseline alone (the process of `fencegate
// loadtest-baseline --mode direct`): one transactional producer per lease,
// the batches of b, for b.Duration (at least MinDuration), on the
// partitions the harness's router gives the leases.
func RunDirect(ctx context.Context, conn kafkaconn.Config, b Child) (report.DirectFigures, error) {
	router, err := stack.NewRouter()
	if err != nil {
		return report.DirectFigures{}, err
	}
	b.Duration = max(b.Duration, MinDuration)
	return Direct(ctx, conn, func(lease string) int32 {
		p, _ := router.Resolve(lease)
		return p.Partition
	}, b)
}

// NewProducer returns a baseline producer (transactional when
// transactionalID is set) whose generic events are drained. The naive
// baseline and the mixed fleet's direct workers write with it too.
func NewProducer(conn kafkaconn.Config, transactionalID string) (*kafka.Producer, error) {
	cm, err := conn.ConfigMap()
	if err != nil {
		return nil, err
	}
	// go.produce.channel.size 0: the same as the gateway's producers (no
	// unused 8 MB ProduceChannel per instance), so the yardstick is fair.
	for k, v := range (kafka.ConfigMap{"linger.ms": 1, "enable.metrics.push": false,
		"go.logs.channel.enable": false, "go.delivery.report.fields": "none", "go.produce.channel.size": 0}) {
		cm[k] = v
	}
	if transactionalID != "" {
		cm["transactional.id"] = transactionalID
	}
	p, err := kafka.NewProducer(&cm)
	if err != nil {
		return nil, err
	}
	go func() {
		for range p.Events() {
		}
	}()
	return p, nil
}

// Direct runs one transactional producer per lease (b.Producers of them,
// shard:0..) writing batches like the gateway's (stamped with the five
// fencegate headers unless b.Plain), with no HTTP and no leases: the
// ceiling. With a target rate (b.Rate) it paces each producer as the
// gateway's workers are paced (NextBatch), so that its latency is
// measured at the same offered load. The producers are initialised
// before the loop is timed (directProducers); partition places a lease.
func Direct(ctx context.Context, conn kafkaconn.Config, partition func(lease string) int32, b Child) (report.DirectFigures, error) {
	producers, err := directProducers(ctx, conn, b.Producers)
	if err != nil {
		return report.DirectFigures{}, err
	}
	defer closeAll(producers)
	value := bytes.Repeat([]byte("x"), b.RecordSize)
	var records atomic.Int64
	var hist report.Histogram
	dctx, cancel := context.WithTimeout(ctx, b.Duration)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, len(producers))
	for l, p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprintf("shard:%d", l)
			batch := transaction{topic: stack.DirectTopic, partition: partition(name), lease: name,
				owner: fmt.Sprintf("w%d-0", l), plain: b.Plain, size: b.BatchSize, value: value}
			errs <- directLoop(dctx, p, batch, b.Rate, &records, &hist)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return report.DirectFigures{}, err
		}
	}
	return report.DirectFigures{Records: records.Load(), Seconds: time.Since(start).Seconds(),
		P50Ms: hist.Ms(0.5), P99Ms: hist.Ms(0.99)}, nil
}

// directProducers initialises n transactional producers, one per lease,
// all at once, before the loop is timed: the gateway's steady state, too,
// starts once every lease is held.
func directProducers(ctx context.Context, conn kafkaconn.Config, n int) ([]*kafka.Producer, error) {
	ps := make([]*kafka.Producer, n)
	errs := make([]error, len(ps))
	var wg sync.WaitGroup
	for l := range ps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ps[l], errs[l] = initDirect(ctx, conn, l)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		closeAll(ps)
		return nil, err
	}
	return ps, nil
}

func initDirect(ctx context.Context, conn kafkaconn.Config, lease int) (*kafka.Producer, error) {
	p, err := NewProducer(conn, fmt.Sprintf("loadtest-direct-%d", lease))
	if err != nil {
		return nil, err
	}
	ictx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := p.InitTransactions(ictx); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

// closeAll closes the producers (nil ones skipped) in parallel.
func closeAll(ps []*kafka.Producer) {
	var wg sync.WaitGroup
	for _, p := range ps {
		if p != nil {
			wg.Add(1)
			go func() { defer wg.Done(); p.Close() }()
		}
	}
	wg.Wait()
}

// directLoop commits batch after batch on p until ctx ends, paced at
// rate by NextBatch.
func directLoop(ctx context.Context, p *kafka.Producer, b transaction, rate float64, records *atomic.Int64, hist *report.Histogram) error {
	next := time.Now()
	for n := 0; ctx.Err() == nil; n++ {
		if !sleep(ctx, time.Until(next)) {
			return nil
		}
		start := time.Now()
		if err := directBatch(p, b.messages(n)); err != nil {
			return err
		}
		hist.Record(time.Since(start))
		records.Add(int64(b.size))
		next = NextBatch(next, rate)
	}
	return nil
}

// sleep paces load: it pauses for d (nothing when d <= 0) and reports
// false if ctx ended first.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// NextBatch returns when the batch after one due at prev is due: at rate
// batches/s, or now in open loop (rate <= 0). It is the one pacing rule
// of the harness's workers and of the direct baseline.
func NextBatch(prev time.Time, rate float64) time.Time {
	if rate <= 0 {
		return time.Now()
	}
	next := prev.Add(time.Duration(float64(time.Second) / rate))
	if floor := time.Now().Add(-time.Second); next.Before(floor) {
		return floor // no catch-up burst after a stall
	}
	return next
}

// directBatch commits msgs as one transaction, waiting for every delivery
// report as the gateway does.
func directBatch(p *kafka.Producer, msgs []kafka.Message) error {
	if err := p.BeginTransaction(); err != nil {
		return err
	}
	dch := make(chan kafka.Event, len(msgs))
	for i := range msgs {
		if err := p.Produce(&msgs[i], dch); err != nil {
			return err
		}
	}
	for range msgs {
		if m := (<-dch).(*kafka.Message); m.TopicPartition.Error != nil {
			return m.TopicPartition.Error
		}
	}
	cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return p.CommitTransaction(cctx)
}
