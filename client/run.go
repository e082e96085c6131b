package client

import (
	"context"
	"errors"
	"sync"
	"time"
)

// Run is one generation of a lease under Client.Run: what the step
// function gets to do its work.
type Run struct {
	// Lease is the generation's lease: its Grant, Lost and Err.
	Lease *Lease
	// Checkpoint is the lease's checkpoint when the generation began (nil:
	// none): the step goes on from its Value (Resume).
	Checkpoint *Checkpoint
	// Settled says, for each batch that Produce left with its outcome
	// unknown (ErrOutcomeUnknown) in an earlier generation of this Run,
	// whether it landed (Checkpoint.Committed).
	Settled map[string]bool

	mu        sync.Mutex
	uncertain []string
}

// Resume is the value to go on from: Checkpoint.Value, nil when the lease
// has no checkpoint yet.
func (r *Run) Resume() []byte {
	if r.Checkpoint == nil {
		return nil
	}
	return r.Checkpoint.Value
}

// Produce is Lease.Produce; a batch whose outcome it leaves unknown is
// settled by the next generation's checkpoint (Settled).
func (r *Run) Produce(ctx context.Context, batchID string, recs []Record, opts ...ProduceOption) (Result, error) {
	res, err := r.Lease.Produce(ctx, batchID, recs, opts...)
	if errors.Is(err, ErrOutcomeUnknown) {
		r.mu.Lock()
		r.uncertain = append(r.uncertain, batchID)
		r.mu.Unlock()
	}
	return res, err
}

// Backoff after a loss before Run acquires the lease again.
const (
	RunMinBackoff = 100 * time.Millisecond
	RunMaxBackoff = 10 * time.Second
)

// Run supervises lease name for step, the worker's own logic: it waits
// for the lease (AcquireWait, with opts), reads its checkpoint, and calls
// step with a context cancelled the moment the lease is lost and the Run
// of this generation (Resume: where to go on; Produce: batches). When the
// lease is lost (an error matching ErrLeaseLost, or any error step returns
// once the lease is lost), Run backs off (RunMinBackoff doubling to
// RunMaxBackoff) and starts over with the next generation. When step
// returns nil, or an error of its own, Run releases the lease and returns
// that; when ctx ends, it releases the lease and returns ctx's error.
//
// This is the loop of the package Example, written once; a worker that
// needs something else (several leases in one loop, its own back-off)
// writes that loop itself.
func (c *Client) Run(ctx context.Context, name string, step func(ctx context.Context, r *Run) error, opts ...AcquireOption) error {
	var uncertain []string
	for losses := 0; ; {
		lease, err := c.AcquireWait(ctx, name, opts...)
		if err != nil {
			return err
		}
		err = c.generation(ctx, lease, step, &uncertain)
		if err == nil || !errors.Is(err, ErrLeaseLost) || errors.Is(err, ErrReleased) {
			release, cancel := context.WithTimeout(context.WithoutCancel(ctx), lease.ttl)
			_ = lease.Release(release) // one not released expires after its TTL
			cancel()
			return err
		}
		losses++
		c.log.Warn("lease lost, backing off before acquiring it again", "lease", name, "losses", losses, "err", err)
		if err := sleep(ctx, Backoff(losses, RunMinBackoff, RunMaxBackoff, 0)); err != nil {
			return err
		}
	}
}

// generation runs step for one generation of lease.
func (c *Client) generation(ctx context.Context, lease *Lease, step func(context.Context, *Run) error, uncertain *[]string) error {
	cp, err := lease.Checkpoint(ctx)
	if err != nil {
		return err
	}
	r := &Run{Lease: lease, Checkpoint: cp, Settled: map[string]bool{}}
	for _, b := range *uncertain {
		r.Settled[b] = cp.Committed(b)
		c.log.Info("batch of an earlier generation settled", "lease", lease.Name(), "batch", b, "landed", r.Settled[b])
	}
	*uncertain = nil
	sctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		select {
		case <-lease.Lost():
			cancel(lease.Err())
		case <-sctx.Done():
		}
	}()
	err = step(sctx, r)
	*uncertain = append(*uncertain, r.uncertain...)
	if lost := lease.Err(); err != nil && lost != nil && ctx.Err() == nil {
		return lost // step stopped because the lease was lost
	}
	return err
}
