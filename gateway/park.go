package gateway

import (
	"context"
	"time"
)

// Parking (docs/design.md, "Parking idle sessions"): a session that has
// had no batch for Config.ParkAfter closes its producer and stays, so that
// thousands of idle leases do not cost a librdkafka instance each. Its
// next batch is refused not_holder (nothing written) and the worker asks
// for a new generation: the lease resumes through the handover, under a
// greater token and a new epoch bump. A producer is never re-created for a
// parked token.

// parkLoop parks idle sessions every ReapInterval until Close. It runs
// apart from the reaper: closing producers must delay neither expiry nor
// the registry heartbeat.
func (g *Gateway) parkLoop() {
	defer g.reaped.Done()
	t := time.NewTicker(g.cfg.ReapInterval)
	defer t.Stop()
	for {
		select {
		case <-g.stop:
			return
		case <-t.C:
			g.parkIdle()
		}
	}
}

// parkIdle parks, one at a time, every live session idle for ParkAfter.
func (g *Gateway) parkIdle() {
	for _, s := range g.liveSessions() {
		select {
		case <-g.stop:
			return
		default:
		}
		if g.draining.Load() {
			return
		}
		if idle, ok := g.park(s); ok {
			g.met.parks.Add(context.Background(), 1)
			g.log.Info("session parked", "fencegate.lease", s.name, "fencegate.token", s.token,
				"messaging.kafka.producer.epoch", s.epoch, "idle", idle.Round(time.Millisecond))
		}
	}
}

// park closes the producer of s if s is live, not parked, has no batch in
// flight and has had none for ParkAfter, and reports whether it did and
// how long s was idle. A batch in flight holds s.mu for its whole
// transaction, so TryLock failing means "busy": s is never parked under a
// batch, and no transaction is open when the producer closes (every path
// that could leave one open has ended the session already, see fail).
func (g *Gateway) park(s *session) (time.Duration, bool) {
	if s.parked.Load() || !s.mu.TryLock() {
		return 0, false
	}
	defer s.mu.Unlock()
	idle := g.cfg.Now().Sub(s.lastBatch)
	if s.parked.Load() || s.endedReason() != nil || idle < g.cfg.ParkAfter {
		return idle, false
	}
	s.closeProducer()
	s.parked.Store(true)
	return idle, true
}

// unparked admits a batch to a session that still has its producer and
// restarts the session's idle clock. A parked session answers not_holder:
// definite, no transaction was begun; the worker asks for a new generation
// with its current token and retries the same batch_id under it. s.mu is
// held.
func (g *Gateway) unparked(s *session) *Error {
	if !s.parked.Load() {
		s.lastBatch = g.cfg.Now()
		return nil
	}
	e := errorf(CodeNotHolder, "the session of %q (token %d) was parked after idling and holds no producer; ask for a new generation with your current token and retry the same batch_id",
		s.name, s.token)
	e.outcome = outcomeParked
	return e
}

// resumed counts and logs a handover that replaced a parked session of
// this replica.
func (g *Gateway) resumed(ctx context.Context, old, s *session) {
	if old == nil || !old.parked.Load() {
		return
	}
	g.met.resumes.Add(ctx, 1)
	g.log.Info("parked session resumed", "fencegate.lease", s.name, "old_token", old.token,
		"new_token", s.token, "owner", s.owner, "messaging.kafka.producer.epoch", s.epoch)
}

// Parked returns the number of parked sessions on this replica (included
// in Sessions).
func (g *Gateway) Parked() int { return countParked(g.liveSessions()) }

func countParked(live []*session) int {
	n := 0
	for _, s := range live {
		if s.parked.Load() {
			n++
		}
	}
	return n
}
