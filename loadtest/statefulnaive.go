package loadtest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/fencegate/fencegate/barrier"
	"github.com/fencegate/fencegate/leasestore"
	"github.com/fencegate/fencegate/loadtest/report"
	"github.com/fencegate/fencegate/loadtest/stack"
	"github.com/fencegate/fencegate/verify"
)

// The naive stateful baseline processes the same input sequences as the
// stateful gateway workers, the way a worker without fencegate would: it
// takes its lease in Postgres, reads its resume point from a row of its
// own (here one shared value per lease, standing for that row), writes
// items i..j with a plain producer, and then moves the row to j+1. Its
// position and its output are two writes: a freeze between the lease
// check and the write (FreezeEvery) and a crash between the two writes
// (ChurnEvery, either order in turn) part them.

// naiveItemWorker is a naive worker with a position.
type naiveItemWorker struct {
	naiveWorker
	crash atomic.Bool
	// resume is the lease's resume point (the naive worker's row).
	resume *atomic.Int64
	next   int
}

// naiveItemCounts are the naive stateful run's fault counts.
type naiveItemCounts struct {
	freezes, crashes atomic.Int64
}

func (r *runner) naiveStateful(ctx context.Context, rep *report.Report, store *leasestore.Store, p *kafka.Producer) error {
	nctx, cancel := context.WithTimeout(ctx, r.baselineDuration())
	defer cancel()
	var workers []*naiveItemWorker
	for _, w := range r.naiveWorkers() {
		workers = append(workers, &naiveItemWorker{naiveWorker: naiveWorker{id: w.id, lease: w.lease, written: w.written}})
	}
	for i, w := range workers {
		if i == 0 || workers[i-1].lease != w.lease {
			w.resume = &atomic.Int64{}
		} else {
			w.resume = workers[i-1].resume
		}
	}
	var counts naiveItemCounts
	var wg sync.WaitGroup
	for _, w := range workers {
		wg.Add(1)
		go func() { defer wg.Done(); r.naiveItemLoop(nctx, store, p, w, &counts) }()
	}
	var faults sync.WaitGroup
	pick := func(fn func(w *naiveItemWorker)) func() {
		return func() {
			for _, i := range rand.Perm(len(workers)) {
				if workers[i].owned.Load() {
					fn(workers[i])
					return
				}
			}
		}
	}
	r.every(nctx, &faults, r.sc.FreezeEvery, pick(func(w *naiveItemWorker) { w.freeze.Store(true) }))
	r.every(nctx, &faults, r.sc.ChurnEvery, pick(func(w *naiveItemWorker) { w.crash.Store(true) }))
	wg.Wait()
	faults.Wait()
	p.Flush(30000)
	resume := map[string]int{}
	for _, w := range workers {
		resume[w.lease] = int(w.resume.Load())
	}
	f := &report.NaiveItems{Freezes: counts.freezes.Load(), Crashes: counts.crashes.Load()}
	var err error
	if f.Items, err = r.countNaiveItems(resume); err != nil {
		return err
	}
	if f.Takeovers, err = r.takeovers(ctx, "naive:%"); err != nil {
		return err
	}
	if rep.Stateful != nil {
		rep.Stateful.Naive = f
	}
	return nil
}

func (r *runner) naiveItemLoop(ctx context.Context, store *leasestore.Store, p *kafka.Producer, w *naiveItemWorker, counts *naiveItemCounts) {
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
			w.next = int(w.resume.Load()) // SELECT next FROM progress
			w.owned.Store(true)
		}
		if time.Since(renewed) >= r.sc.RenewEvery {
			if _, err := store.Renew(ctx, w.lease, w.id, w.token, r.sc.TTL, ""); err != nil {
				w.owned.Store(false)
				continue
			}
			renewed = time.Now()
		}
		l, err := store.Get(ctx, w.lease)
		if err != nil || l.Token != w.token || l.OwnerID != w.id || !l.Live() {
			w.owned.Store(false)
			continue
		}
		r.naiveItemStep(ctx, p, w, counts)
		pause := r.sc.TTL / 20
		if r.sc.Rate > 0 {
			pause = time.Duration(float64(time.Second) / r.sc.Rate)
		}
		wait(ctx, pause)
	}
}

// naiveItemStep writes the worker's next batch and moves its resume point,
// with the fault asked for: a freeze after the lease check, or a crash
// between the two writes.
func (r *runner) naiveItemStep(ctx context.Context, p *kafka.Producer, w *naiveItemWorker, counts *naiveItemCounts) {
	items := itemRange{w.next, w.next + r.sc.BatchSize - 1}
	switch {
	case w.freeze.Swap(false):
		counts.freezes.Add(1)
		r.naiveFrozen(ctx, &w.naiveWorker) // then writes anyway, from where it was
	case w.crash.Swap(false):
		// The process dies between its two writes: the resume point
		// saved, its records still in its producer's queue (lost); or
		// its records delivered, the resume point not saved.
		if counts.crashes.Add(1)%2 == 1 {
			w.resume.Store(int64(items.last + 1))
		} else {
			r.naiveItems(p, w, items)
		}
		w.owned.Store(false)
		wait(ctx, r.sc.TTL+r.sc.TTL/2) // the lease expires before it restarts
		return
	}
	r.naiveItems(p, w, items)
	w.resume.Store(int64(items.last + 1)) // UPDATE progress SET next = j+1
	w.next = items.last + 1
}

// naiveItems writes items r and waits for their delivery.
func (r *runner) naiveItems(p *kafka.Producer, w *naiveItemWorker, items itemRange) {
	topic := stack.NaiveTopic
	part, _ := r.stack.Router.Resolve(w.lease)
	for i := items.first; i <= items.last; i++ {
		_ = p.Produce(&kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: part.Partition},
			Value: itemValue(i, r.sc.RecordSize), Headers: barrier.Stamp{Lease: w.lease, Token: w.token, Owner: w.id,
				Batch: itemBatchID(items), Seq: i - items.first}.Headers()}, nil)
	}
	p.Flush(10000)
	w.written.Store(max(w.written.Load(), w.token))
}

// countNaiveItems reads the naive topic and judges each lease's items
// against its final resume point (or one past the highest item written,
// whichever is larger: the naive worker's row may have moved back).
func (r *runner) countNaiveItems(resume map[string]int) (report.ItemCounts, error) {
	seqs := itemSequences{values: map[string][][]byte{}, next: map[string]int{}}
	for part := range int32(stack.Partitions) {
		recs, err := verify.ReadPartition(r.stack.Kafka, stack.NaiveTopic, part, 60*time.Second)
		if err != nil {
			return report.ItemCounts{}, err
		}
		for _, rec := range recs {
			if i, ok := itemIndex(rec.Value); ok {
				seqs.values[rec.Lease] = append(seqs.values[rec.Lease], rec.Value)
				seqs.next[rec.Lease] = max(seqs.next[rec.Lease], i+1)
			}
		}
	}
	for l, n := range resume {
		seqs.next[l] = max(seqs.next[l], n)
	}
	if len(seqs.values) == 0 {
		return report.ItemCounts{}, fmt.Errorf("the naive stateful baseline wrote nothing")
	}
	var inv report.Invariant
	return seqs.judge(&inv), nil
}
