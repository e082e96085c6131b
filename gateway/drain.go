package gateway

import (
	"context"
	"sync"
)

// errDraining refuses new acquires on a draining replica: 503 draining,
// nothing was done; the worker asks another replica.
func errDraining() *Error {
	return errorf(CodeDraining, "this replica is draining; send the request to another replica")
}

// drainedError ends the sessions of a draining replica: not_holder, so
// that their owners move each lease to another replica with their current
// token (one handover, no TTL wait).
func drainedError(name string) *Error {
	return errorf(CodeNotHolder, "the replica holding %q is draining; ask another replica for a new generation with your current token", name)
}

// Drain stops this replica gracefully (SIGTERM), before Close:
//
//  1. readiness fails and new acquires, batches and renewals are refused
//     (draining, not_holder): load balancers and workers go elsewhere;
//  2. every session lets its batch in flight finish (commit or abort as
//     usual), then ends with not_holder and closes its producer;
//  3. the replica leaves the registry, so other replicas answer
//     not_holder for its leases at once instead of 421 to this address.
//
// ctx bounds step 2; sessions still busy when it ends are ended at once
// (their batch aborts or, past its commit request, is answered
// generation_ended). The replica deregisters only after its sessions
// ended: a worker that moves a lease earlier would fence a batch that was
// about to finish.
func (g *Gateway) Drain(ctx context.Context) error {
	if g.draining.Swap(true) {
		return nil
	}
	var wg sync.WaitGroup
	for _, s := range g.liveSessions() {
		wg.Add(1)
		go func() { defer wg.Done(); g.drainSession(s) }()
	}
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-ctx.Done():
		g.mu.Lock()
		for _, s := range g.sessions {
			g.endLocked(s, drainedError(s.name))
		}
		g.mu.Unlock()
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.cfg.HeartbeatEvery)
	defer cancel()
	if g.cfg.AdvertiseURL == "" {
		return nil
	}
	return g.store.Deregister(dctx, g.cfg.Replica)
}

// drainSession waits for the batch in flight of s, then ends s and closes
// its producer. New batches are already refused (draining), so none starts
// after the one in flight.
func (g *Gateway) drainSession(s *session) {
	g.closers.Add(1)
	defer g.closers.Done()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.end(drainedError(s.name))
	s.closeProducer()
}
