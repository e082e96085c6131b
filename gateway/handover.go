package gateway

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/fencegate/fencegate/barrier"
	"github.com/fencegate/fencegate/leasestore"
	"github.com/fencegate/fencegate/txnmap"
)

// AcquireRequest asks for a lease, or with Token set, for a new generation
// of a lease the caller holds.
type AcquireRequest struct {
	Name  string
	Owner string
	TTL   time.Duration
	Token int64 // 0: plain acquire
	// Caller is the authenticated client; the generation is bound to it.
	Caller *Client
}

// Grant is an acknowledged generation.
type Grant struct {
	Name            string    `json:"name"`
	OwnerID         string    `json:"owner_id"`
	Token           int64     `json:"token"`
	ExpiresAt       time.Time `json:"expires_at"`
	TTLMS           int64     `json:"ttl_ms"`
	Topic           string    `json:"topic"`
	Partition       int32     `json:"partition"`
	TransactionalID string    `json:"transactional_id"`
	ProducerID      int64     `json:"producer_id"`
	ProducerEpoch   int16     `json:"producer_epoch"`
}

// Acquire runs the handover (docs/design.md, "Handover"):
//
//  1. Postgres grant (token N, pending, holder = this replica);
//  2. drop any older local session of the lease;
//  3. new producer with the lease's transactional.id, InitTransactions under
//     a deadline inside the TTL (bumps the epoch, fences every older
//     producer of the id on any replica);
//  4. signed barrier committed in its own transaction;
//  5. Activate, predicated on N still being the current pending grant;
//  6. only then the Grant is returned (and the session installed).
//
// Any failure closes the producer, abandons the grant and returns an
// error: the caller does not own the lease (I4, I5).
func (g *Gateway) Acquire(ctx context.Context, req AcquireRequest) (Grant, error) {
	ctx, span := g.tracer.Start(ctx, "fencegate.acquire", trace.WithAttributes(attrLease.String(req.Name)))
	defer span.End()
	began := time.Now()
	if g.draining.Load() {
		return Grant{}, spanError(span, errDraining())
	}
	place, err := g.router.Resolve(req.Name)
	if err != nil {
		return Grant{}, spanError(span, err)
	}
	if err := g.roomFor(req.Caller, req.Name); err != nil {
		return Grant{}, spanError(span, err)
	}
	client := req.Caller.name()
	if err := g.takeSlot(ctx, client); err != nil {
		return Grant{}, spanError(span, err)
	}
	defer g.freeSlot()
	start := g.cfg.Now() // the local deadline runs from the grant, not from the wait
	// Judged before the budget below, which is drawn from the TTL: a TTL
	// out of bounds (1 ms) is a 400, not a store call timed out (503).
	if err := g.store.CheckGrant(req.Name, req.Owner, req.TTL); err != nil {
		return Grant{}, spanError(span, err)
	}
	var lease leasestore.Lease
	err = g.stage(ctx, stagePGGrant, func(ctx context.Context) (err error) {
		// Bounded by the handover's budget: a store that does not answer
		// fails the acquire closed in time instead of holding its
		// handover slot for as long as the link is down (FM63).
		ctx, cancel := context.WithTimeout(ctx, g.handoverBudget(req.TTL))
		defer cancel()
		lease, err = g.grant(ctx, req)
		return err
	})
	if err != nil {
		return Grant{}, spanError(span, err)
	}
	span.SetAttributes(attrToken.Int64(lease.Token))
	g.cfg.Hooks.call(HookGranted, req.Name, lease.Token)
	old := g.dropOlder(req.Name, lease.Token)
	s, err := g.handover(ctx, start, place, lease)
	if err != nil {
		g.abandon(lease)
		return Grant{}, spanError(span, err)
	}
	span.SetAttributes(attrEpoch.Int64(int64(s.epoch)))
	g.met.stage(ctx, stageTotal, began)
	g.logHandover(lease, s)
	g.resumed(ctx, old, s)
	return g.grantOf(s, lease), nil
}

func (g *Gateway) logHandover(lease leasestore.Lease, s *session) {
	if lease.PrevToken == 0 {
		g.log.Info("lease acquired", "fencegate.lease", s.name, "fencegate.token", s.token,
			"owner", s.owner, "messaging.kafka.producer.epoch", s.epoch)
		return
	}
	g.log.Info("lease handed over", "fencegate.lease", s.name, "old_token", lease.PrevToken,
		"new_token", s.token, "old_owner", lease.PrevOwner, "owner", s.owner, "messaging.kafka.producer.epoch", s.epoch)
}

// stage runs one handover stage in its own span and records its duration.
func (g *Gateway) stage(ctx context.Context, name string, fn func(context.Context) error) error {
	ctx, span := g.tracer.Start(ctx, name)
	defer span.End()
	start := time.Now()
	err := fn(ctx)
	g.met.stage(ctx, name, start)
	return spanError(span, err)
}

func spanError(span trace.Span, err error) error {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	return err
}

func (g *Gateway) grant(ctx context.Context, req AcquireRequest) (leasestore.Lease, error) {
	client, gate := req.Caller.name(), g.gateFor(req.Caller, req.Name)
	if req.Token == 0 {
		return g.store.Acquire(ctx, req.Name, req.Owner, req.TTL, g.cfg.Replica, client, gate)
	}
	if err := g.mayMove(ctx, req); err != nil {
		return leasestore.Lease{}, err
	}
	return g.store.Regenerate(ctx, req.Name, req.Owner, req.Token, req.TTL, g.cfg.Replica, client, gate)
}

// mayMove refuses a new generation of token asked by a client that may
// not act for the client token was granted to (FM38). The client of a
// token never changes, and the regeneration's predicate names the token,
// so reading it first leaves no gap.
func (g *Gateway) mayMove(ctx context.Context, req AcquireRequest) error {
	l, err := g.store.Get(ctx, req.Name)
	switch {
	case errors.Is(err, leasestore.ErrNotFound):
		return nil // the regeneration's predicate refuses it as lost
	case err != nil:
		return err
	case l.Token != req.Token || l.OwnerID != req.Owner:
		return nil
	}
	if e := req.Caller.mayActFor(l.Client, req.Name); e != nil {
		return e
	}
	return nil
}

// takeSlot waits for one of the MaxConcurrentHandovers slots, before the
// grant: a handover that waits spends none of its TTL waiting, so a cold
// start of many leases queues rather than fails. At most MaxHandoverQueue
// acquires wait, shared fairly between clients (handoverSlots); the wait
// is bounded by the request and by MaxHandover. Beyond either the acquire
// is refused 429, before any grant.
func (g *Gateway) takeSlot(ctx context.Context, client string) error {
	wctx, cancel := context.WithTimeout(ctx, g.cfg.MaxHandover)
	defer cancel()
	if err := g.slots.take(wctx, client); err != nil {
		g.quotas.refused(client, "handovers")
		return err
	}
	return nil
}

// HandoversWaiting is the number of acquires waiting for a handover slot.
func (g *Gateway) HandoversWaiting() int { return g.slots.waiting() }

func (g *Gateway) freeSlot() { g.slots.release() }

// handover runs steps 3 to 5 for grant lease and installs the session.
func (g *Gateway) handover(ctx context.Context, start time.Time, place txnmap.Placement, lease leasestore.Lease) (*session, error) {
	hctx, cancel := context.WithTimeout(ctx, g.handoverBudget(lease.TTL)-g.cfg.Now().Sub(start))
	defer cancel()
	prod, err := newProducer(g.cfg.Kafka, place.TransactionalID)
	if err != nil {
		return nil, err
	}
	s := &session{name: lease.Name, owner: lease.OwnerID, token: lease.Token, client: lease.Client,
		place: place, prod: prod, deadline: start.Add(lease.TTL)}
	err = g.bump(hctx, s)
	if err == nil {
		g.cfg.Hooks.call(HookInitialized, s.name, s.token)
		err = g.stage(hctx, stageBarrier, func(ctx context.Context) error { return g.writeBarrier(ctx, s) })
	}
	if err == nil {
		g.cfg.Hooks.call(HookBeforeActivate, lease.Name, lease.Token)
		err = g.stage(hctx, stageActivate, func(ctx context.Context) error {
			_, err := g.store.Activate(ctx, lease.Name, lease.Token, s.producerID, s.epoch)
			return err
		})
	}
	// The idle clock starts when the session is installed, not when the
	// request began: a slow resume must not park before its batch arrives.
	s.lastBatch = g.cfg.Now()
	if err == nil && !g.install(s) {
		err = errorf(CodeLeaseLost, "a later generation of %q is installed on this replica", lease.Name)
	}
	if err != nil {
		prod.close()
		return nil, g.explainHandover(place, err)
	}
	return s, nil
}

// bump runs InitTransactions: the epoch bump that fences every earlier
// producer of the transactional.id. Its three broker calls are separate
// stages, so a slow handover says which one was slow.
func (g *Gateway) bump(ctx context.Context, s *session) error {
	err := g.stage(ctx, stageConnect, func(ctx context.Context) error { return s.prod.warm(ctx, s.place.Topic) })
	if err != nil {
		return err
	}
	g.cfg.Hooks.call(HookConnected, s.name, s.token)
	// Never past the budget, nor for a caller that is gone: called with a
	// context already done, InitTransactions gets a timeout of "no wait",
	// returns at once and bumps the epoch in the background anyway,
	// fencing whichever generation took the lease meanwhile (FM53: a
	// replica resumed after a stop past its handover budget).
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w: handover budget spent before the epoch bump: %w", ErrKafkaUnavailable, err)
	}
	err = g.stage(ctx, stageInit, func(ctx context.Context) error {
		if err := s.prod.p.InitTransactions(ctx); err != nil {
			return kafkaError("init transactions", err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	g.met.bumps.Add(ctx, 1)
	return g.stage(ctx, stageIdentify, func(ctx context.Context) (err error) {
		s.producerID, s.epoch, err = g.insp.producerIdentity(ctx, s.place.TransactionalID)
		return err
	})
}

// writeBarrier commits the signed generation barrier in its own
// transaction. The barrier signs the placement it is written under, by
// which the materializer judges it after the route's partitions change.
func (g *Gateway) writeBarrier(ctx context.Context, s *session) error {
	value, err := g.signer.Seal(barrier.Grant{Lease: s.name, Token: s.token, Owner: s.owner,
		TransactionalID: s.place.TransactionalID, ProducerID: s.producerID, Epoch: s.epoch, IssuedAt: time.Now().UTC(),
		Topic: s.place.Topic, Partition: s.place.Partition, Partitions: s.place.Partitions})
	if err != nil {
		return err
	}
	st := s.stamp()
	st.Barrier = true
	rec := record{key: []byte(s.name), value: value, headers: st.Headers()}
	if err := s.prod.p.BeginTransaction(); err != nil {
		return kafkaError("begin barrier transaction", err)
	}
	if err := g.commitBarrier(ctx, s, rec); err != nil {
		s.prod.abortOpen()
		return err
	}
	return nil
}

// commitBarrier sends the barrier into the open transaction and commits
// it; on failure the caller aborts the transaction.
func (g *Gateway) commitBarrier(ctx context.Context, s *session, rec record) error {
	if _, err := s.prod.send(ctx, s.place.Topic, s.place.Partition, []record{rec}); err != nil {
		return kafkaError("produce barrier", err)
	}
	g.cfg.Hooks.call(HookBarrierSent, s.name, s.token)
	if err := ctx.Err(); err != nil {
		// The budget is spent: the grant will be abandoned, so abort
		// rather than commit (an expired context would make librdkafka
		// start the commit without waiting for it).
		return kafkaError("commit barrier", err)
	}
	if err := s.prod.p.CommitTransaction(ctx); err != nil {
		return kafkaError("commit barrier", err)
	}
	return nil
}

// handoverBudget is how long steps 3 to 5 may take: a share of the TTL, so
// that a slow handover fails closed well before the grant expires.
func (g *Gateway) handoverBudget(ttl time.Duration) time.Duration {
	b := time.Duration(float64(ttl) * g.cfg.HandoverBudget)
	return min(b, g.cfg.MaxHandover)
}

// abandon marks a failed grant dead so that nobody waits for its TTL. It
// is best effort: a grant left pending is never acknowledged and expires.
func (g *Gateway) abandon(lease leasestore.Lease) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := g.store.Abandon(ctx, lease.Name, lease.Token); err != nil {
		g.log.Warn("abandon failed handover", "fencegate.lease", lease.Name, "fencegate.token", lease.Token, "error", err)
	}
}

func (g *Gateway) grantOf(s *session, lease leasestore.Lease) Grant {
	return Grant{Name: s.name, OwnerID: s.owner, Token: s.token, ExpiresAt: lease.ExpiresAt,
		TTLMS: lease.TTL.Milliseconds(), Topic: s.place.Topic, Partition: s.place.Partition,
		TransactionalID: s.place.TransactionalID, ProducerID: s.producerID, ProducerEpoch: s.epoch}
}

// kafkaError turns a librdkafka error of a handover step into a gateway
// error: every failure of a handover means "you do not own the lease".
func kafkaError(step string, err error) error {
	if errors.Is(err, context.DeadlineExceeded) || classify(err) != outcomeFenced {
		return errorf(CodeKafkaUnavailable, "%s: %v", step, err)
	}
	return errorf(CodeLeaseLost, "%s: fenced by a later generation: %v", step, err)
}
