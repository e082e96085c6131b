package client

import (
	"errors"
	"fmt"
	"time"
)

// Hook is a value of Config.Hooks: it implements one or more of
// AcquiredHook, RenewedHook, ProducedHook, LostHook and ReleasedHook, and
// is called at those points of every lease's life (New refuses a value
// that implements none). A worker adds metrics or tracing this way, with
// one type that implements the hooks it needs.
//
// Hooks run synchronously on the goroutine doing the work (the caller's,
// or a lease's renewer), outside the SDK's locks: keep them short and do
// not block in them. They may call the Lease's Name, Grant, Deadline and
// Err.
type Hook any

// AcquiredHook is called when Acquire or AcquireWait returns a lease;
// latency is the call's time, retries and waits included.
type AcquiredHook interface {
	OnAcquired(l *Lease, latency time.Duration)
}

// RenewedHook is called after each renewal of a lease, in the background
// or by Lease.Renew: err is nil when the local deadline moved. latency is
// the renewal's time, following a 421 and asking for a new generation
// included.
type RenewedHook interface {
	OnRenewed(l *Lease, latency time.Duration, err error)
}

// ProducedHook is called when Lease.Produce returns. outcome is what the
// call says of the batch: OutcomeCommitted (err is nil), OutcomeUnknown
// (err matches ErrOutcomeUnknown: the batch may be committed) or
// OutcomeRefused (nothing of it is committed). latency is the call's time,
// retries included.
type ProducedHook interface {
	OnProduced(l *Lease, batchID string, outcome Outcome, latency time.Duration, err error)
}

// LostHook is called once when a lease held is lost (Lost closes, err is
// Lease.Err): lease_lost, fenced, or its local deadline passed. A lease
// ended by Release or Close calls ReleasedHook instead.
type LostHook interface {
	OnLost(l *Lease, err error)
}

// ReleasedHook is called when Lease.Release returns (Close releases
// through it), with Release's error.
type ReleasedHook interface {
	OnReleased(l *Lease, err error)
}

// each calls f with every hook of type H.
func each[H any](hooks []Hook, f func(H)) {
	for _, h := range hooks {
		if h, ok := h.(H); ok {
			f(h)
		}
	}
}

// checkHooks refuses a hook that would never be called.
func checkHooks(hooks []Hook) error {
	for i, h := range hooks {
		switch h.(type) {
		case AcquiredHook, RenewedHook, ProducedHook, LostHook, ReleasedHook:
		default:
			return fmt.Errorf("fencegate: Hooks[%d] (%T) implements none of AcquiredHook, RenewedHook, ProducedHook, LostHook, ReleasedHook", i, h)
		}
	}
	return nil
}

// outcomeOf is what Produce's error says of its batch.
func outcomeOf(err error) Outcome {
	switch {
	case err == nil:
		return OutcomeCommitted
	case errors.Is(err, ErrOutcomeUnknown):
		return OutcomeUnknown
	}
	return OutcomeRefused
}
