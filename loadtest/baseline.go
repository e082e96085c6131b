package loadtest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/fencegate/fencegate/barrier"
	"github.com/fencegate/fencegate/leasestore"
	"github.com/fencegate/fencegate/loadtest/baseline"
	"github.com/fencegate/fencegate/loadtest/report"
	"github.com/fencegate/fencegate/loadtest/stack"
	"github.com/fencegate/fencegate/txnmap"
	"github.com/fencegate/fencegate/verify"
)

// baselineDuration is how long each baseline runs.
func (r *runner) baselineDuration() time.Duration {
	return max(r.sc.Duration/2, baseline.MinDuration)
}

func (r *runner) baselines(ctx context.Context, rep *report.Report) error {
	if _, ok := r.stack.Separate(); ok {
		if err := r.separateBaselines(ctx, rep); err != nil {
			return err
		}
	} else if r.sc.Direct {
		d, err := r.direct(ctx)
		if err != nil {
			return fmt.Errorf("direct baseline: %w", err)
		}
		rep.Direct = d
	}
	if r.sc.Naive {
		if err := r.naive(ctx, rep); err != nil {
			return fmt.Errorf("naive baseline: %w", err)
		}
	}
	return nil
}

// naiveWorker is the design fencegate replaces: it checks its lease in
// Postgres, then produces with a plain producer.
type naiveWorker struct {
	id, lease string
	token     int64
	owned     atomic.Bool
	freeze    atomic.Bool
	// written is the highest token whose batch reached Kafka, shared by
	// the workers of one lease.
	written *atomic.Int64
}

// naive runs the check-then-write design under the same freeze injection
// and counts the stale records Kafka accepted.
func (r *runner) naive(ctx context.Context, rep *report.Report) error {
	store, err := leasestore.New(r.stack.Pool, leasestore.Config{ValidateName: txnmap.ValidateName})
	if err != nil {
		return err
	}
	p, err := baseline.NewProducer(r.stack.Kafka, "")
	if err != nil {
		return err
	}
	defer p.Close()
	if r.sc.Stateful {
		if err := r.naiveStateful(ctx, rep, store, p); err != nil {
			return err
		}
		stale, total, err := r.countNaiveStale()
		rep.Naive = report.NaiveFigures{Records: total, StaleAccepted: stale}
		return err
	}
	nctx, cancel := context.WithTimeout(ctx, r.baselineDuration())
	defer cancel()
	workers := r.naiveWorkers()
	var wg sync.WaitGroup
	var sent atomic.Int64
	for _, w := range workers {
		wg.Add(1)
		go func() { defer wg.Done(); r.naiveLoop(nctx, store, p, w, &sent) }()
	}
	var faults sync.WaitGroup
	freezeEvery := r.sc.FreezeEvery
	r.every(nctx, &faults, freezeEvery, func() {
		for _, i := range rand.Perm(len(workers)) {
			if workers[i].owned.Load() {
				workers[i].freeze.Store(true)
				return
			}
		}
	})
	wg.Wait()
	faults.Wait()
	p.Flush(30000)
	stale, total, err := r.countNaiveStale()
	rep.Naive = report.NaiveFigures{Records: total, StaleAccepted: stale}
	return err
}

func (r *runner) naiveWorkers() []*naiveWorker {
	var out []*naiveWorker
	for l := range r.sc.Leases {
		written := &atomic.Int64{}
		for i := range max(r.sc.WorkersPerLease, 2) {
			out = append(out, &naiveWorker{id: fmt.Sprintf("n%d-%d", l, i), lease: fmt.Sprintf("naive:%d", l), written: written})
		}
	}
	return out
}

func (r *runner) naiveLoop(ctx context.Context, store *leasestore.Store, p *kafka.Producer, w *naiveWorker, sent *atomic.Int64) {
	renewed := time.Now()
	for ctx.Err() == nil {
		if !w.owned.Load() {
			l, err := store.Acquire(ctx, w.lease, w.id, r.sc.TTL, "naive", "naive", "")
			if err == nil {
				_, err = store.Activate(ctx, w.lease, l.Token, 0, 0)
			}
			if err != nil {
				wait(ctx, r.sc.TTL/4)
				continue
			}
			w.token, renewed = l.Token, time.Now()
			w.owned.Store(true)
		}
		if time.Since(renewed) >= r.sc.RenewEvery {
			if _, err := store.Renew(ctx, w.lease, w.id, w.token, r.sc.TTL, ""); err != nil {
				w.owned.Store(false)
				continue
			}
			renewed = time.Now()
		}
		// Check ...
		l, err := store.Get(ctx, w.lease)
		if err != nil || l.Token != w.token || l.OwnerID != w.id || !l.Live() {
			w.owned.Store(false)
			continue
		}
		// ... then write: a freeze here is the incident.
		if w.freeze.Swap(false) {
			r.naiveFrozen(ctx, w)
		}
		r.naiveBatch(p, w)
		w.written.Store(max(w.written.Load(), w.token))
		sent.Add(int64(r.sc.BatchSize))
		pause := r.sc.TTL / 20
		if r.sc.Rate > 0 {
			pause = time.Duration(float64(time.Second) / r.sc.Rate)
		}
		wait(ctx, pause)
	}
}

// naiveFrozen is the incident in the naive design: the worker checked its
// lease, then freezes past its TTL until the next owner has written, and
// writes anyway.
func (r *runner) naiveFrozen(ctx context.Context, w *naiveWorker) {
	wait(ctx, r.sc.TTL+r.sc.TTL/2)
	deadline := time.Now().Add(3 * r.sc.TTL)
	for ctx.Err() == nil && w.written.Load() <= w.token && time.Now().Before(deadline) {
		wait(ctx, r.sc.TTL/10)
	}
	w.owned.Store(false)
}

func (r *runner) naiveBatch(p *kafka.Producer, w *naiveWorker) {
	topic := stack.NaiveTopic
	part, _ := r.stack.Router.Resolve(w.lease)
	for i := range r.sc.BatchSize {
		_ = p.Produce(&kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: part.Partition},
			Value: []byte("naive"), Headers: barrier.Stamp{Lease: w.lease, Token: w.token, Owner: w.id, Batch: w.id, Seq: i}.Headers()}, nil)
	}
	p.Flush(10000)
}

// countNaiveStale counts records written under a token lower than one
// already written to the same lease earlier in the log: writes of a former
// owner after its successor started.
func (r *runner) countNaiveStale() (stale, total int64, err error) {
	for part := range int32(stack.Partitions) {
		recs, err := verify.ReadPartition(r.stack.Kafka, stack.NaiveTopic, part, 60*time.Second)
		if err != nil {
			return 0, 0, err
		}
		highest := map[string]int64{}
		for _, rec := range recs {
			total++
			if barrier.Judge(highest[rec.Lease], rec.Token) == barrier.Stale {
				stale++
			}
			highest[rec.Lease] = max(highest[rec.Lease], rec.Token)
		}
	}
	if total == 0 {
		return 0, 0, errors.New("the naive baseline wrote nothing")
	}
	return stale, total, nil
}

// direct runs the direct baseline in process, stamped like the gateway's
// records, on the leases' partitions.
func (r *runner) direct(ctx context.Context) (report.DirectFigures, error) {
	return baseline.Direct(ctx, r.stack.Kafka, r.partition, baseline.Child{Mode: baseline.ModeDirect, Producers: r.sc.Leases,
		BatchSize: r.sc.BatchSize, RecordSize: r.sc.RecordSize, Duration: r.baselineDuration(), Rate: r.sc.Rate})
}
