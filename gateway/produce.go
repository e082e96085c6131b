package gateway

import (
	"context"
	"strconv"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/fencegate/fencegate/barrier"
)

// Record is one record of a batch, decoded.
type Record struct {
	Key     []byte
	Value   []byte
	Headers map[string]string
}

// ProduceRequest is one batch: one Kafka transaction.
type ProduceRequest struct {
	Name    string
	Owner   string
	Token   int64
	BatchID string
	Records []Record
}

// ProduceResult says where the committed records are.
type ProduceResult struct {
	Name          string  `json:"name"`
	Token         int64   `json:"token"`
	Topic         string  `json:"topic"`
	Partition     int32   `json:"partition"`
	Offsets       []int64 `json:"offsets"`
	ProducerEpoch int16   `json:"producer_epoch"`
}

// Produce writes one batch as one transaction of the session's producer.
// It never calls Postgres. A fenced or fatal producer error ends the
// session for good (no re-creation, no other producer); an abortable error
// aborts the batch; an unknown outcome (timeout) ends the generation, and
// the worker asks for a new one and retries the same batch_id.
func (g *Gateway) Produce(ctx context.Context, req ProduceRequest) (ProduceResult, error) {
	ctx, span := g.tracer.Start(ctx, "fencegate.produce", trace.WithAttributes(
		attrLease.String(req.Name), attrToken.Int64(req.Token)))
	defer span.End()
	res, err := g.produce(ctx, req)
	g.met.batch(ctx, batchOutcome(err), len(req.Records))
	return res, spanError(span, err)
}

func (g *Gateway) produce(ctx context.Context, req ProduceRequest) (ProduceResult, error) {
	s := g.session(req.Name)
	if s == nil {
		return ProduceResult{}, g.refused(req, 0, 0, g.notHolder(ctx, req.Name))
	}
	trace.SpanFromContext(ctx).SetAttributes(attrEpoch.Int64(int64(s.epoch)))
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.admit(req.Owner, req.Token, g.cfg.Now()); err != nil {
		return ProduceResult{}, g.refused(req, s.token, s.epoch, err)
	}
	g.cfg.Hooks.call(HookAdmitted, s.name, s.token)
	offsets, err := g.transact(ctx, s, req)
	if err != nil {
		return ProduceResult{}, err
	}
	return ProduceResult{Name: s.name, Token: s.token, Topic: s.place.Topic,
		Partition: s.place.Partition, Offsets: offsets, ProducerEpoch: s.epoch}, nil
}

// refused logs a write refused before it reached Kafka, once.
func (g *Gateway) refused(req ProduceRequest, current int64, epoch int16, err *Error) *Error {
	g.log.Warn("stale write refused", "fencegate.lease", req.Name, "fencegate.token", req.Token,
		"current_token", current, "messaging.kafka.producer.epoch", epoch, "owner", req.Owner, "code", err.Code)
	return err
}

// batchOutcome names the outcome of a produce call for metrics.
func batchOutcome(err error) string {
	if err == nil {
		return outcomeCommitted
	}
	e := toError(err)
	switch {
	case e.outcome != "":
		return e.outcome
	case e.Code == CodeFenced:
		return outcomeFencedOut
	case e.Code == CodeLeaseLost, e.Code == CodeNotHolder, e.Code == CodeMisdirected:
		return outcomeStaleToken
	case e.Code == CodeInvalidRequest, e.Code == CodePayloadTooLarge:
		return outcomeInvalid
	}
	return outcomeAborted
}

// transact runs Begin, produce, Commit; s.mu is held.
func (g *Gateway) transact(ctx context.Context, s *session, req ProduceRequest) ([]int64, error) {
	tctx, cancel := context.WithTimeout(ctx, s.remaining(g.cfg.Now()))
	defer cancel()
	if err := s.prod.p.BeginTransaction(); err != nil {
		return nil, g.fail(s, "begin", err)
	}
	offsets, err := s.prod.send(tctx, s.place.Topic, s.place.Partition, g.stampAll(s, req))
	if err != nil {
		aerr := g.abortBatch(s, "produce", err)
		if e := s.admit(req.Owner, req.Token, g.cfg.Now()); e != nil && toError(aerr).Code == CodeBatchAborted {
			return nil, e // the batch ran past the local deadline
		}
		return nil, aerr
	}
	if err := s.admit(req.Owner, req.Token, g.cfg.Now()); err != nil {
		// The local deadline passed (or the session ended) while the batch
		// was in flight: fail closed and abort rather than commit. This
		// check is an extra; the broker's epoch fence is what decides.
		_ = g.abortBatch(s, "deadline", err)
		return nil, err
	}
	g.cfg.Hooks.call(HookBeforeCommit, s.name, s.token)
	if err := g.commit(ctx, s); err != nil {
		return nil, err
	}
	return offsets, nil
}

// commit calls CommitTransaction, retrying what librdkafka calls retriable
// inside the local deadline. Each attempt is bounded by CommitTimeout and
// by the time left before the local deadline, measured now.
func (g *Gateway) commit(ctx context.Context, s *session) error {
	for {
		left := s.remaining(g.cfg.Now())
		cctx, cancel := context.WithTimeout(ctx, min(g.cfg.CommitTimeout, left))
		start := time.Now()
		err := s.prod.p.CommitTransaction(cctx)
		cancel()
		if err == nil {
			g.met.commit.Record(ctx, time.Since(start).Seconds())
			return nil
		}
		if classify(err) == outcomeRetriable && s.remaining(g.cfg.Now()) > 0 && ctx.Err() == nil {
			continue
		}
		if classify(err) == outcomeAbortable {
			return g.abortBatch(s, "commit", err)
		}
		return g.fail(s, "commit", err)
	}
}

// abortBatch aborts the open transaction after a failed step. A clean
// abort answers the batch as failed with nothing written; an abort that
// fails or times out leaves the outcome unknown and ends the generation.
func (g *Gateway) abortBatch(s *session, step string, cause error) error {
	if classify(cause) == outcomeFenced {
		return g.fail(s, step, cause)
	}
	ctx, cancel := context.WithTimeout(context.Background(), g.cfg.CommitTimeout)
	defer cancel()
	if err := s.prod.p.AbortTransaction(ctx); err != nil {
		return g.fail(s, "abort after "+step, err)
	}
	if e, ok := cause.(*Error); ok {
		return e
	}
	return errorf(CodeBatchAborted, "%s failed, transaction aborted, nothing written; retry the same batch_id: %v", step, cause)
}

// fail ends the session for good after a fenced, fatal or ambiguous error
// and closes its producer now (s.mu is held). The producer is never
// re-created for this token (FM07).
func (g *Gateway) fail(s *session, step string, err error) error {
	var reason *Error
	if classify(err) == outcomeFenced {
		g.met.fenced.Add(context.Background(), 1)
		reason = errorf(CodeFenced, "%s: the producer of token %d was fenced by a later generation of %q: %v", step, s.token, s.name, err)
		g.log.Warn("producer fenced", "fencegate.lease", s.name, "fencegate.token", s.token,
			"messaging.kafka.producer.epoch", s.epoch, "error", err)
	} else {
		reason = errorf(CodeGenerationEnded, "%s: outcome unknown (%v); ask for a new generation with token %d and retry the same batch_id", step, err, s.token)
		g.log.Warn("generation ended on unknown outcome", "fencegate.lease", s.name, "fencegate.token", s.token, "error", err)
	}
	s.end(reason)
	s.closeProducer()
	return s.endedReason()
}

// stampAll builds the batch's records with the fencegate headers.
func (g *Gateway) stampAll(s *session, req ProduceRequest) []record {
	out := make([]record, len(req.Records))
	for i, r := range req.Records {
		hs := make([]kafka.Header, 0, len(r.Headers)+5)
		for k, v := range r.Headers {
			hs = append(hs, kafka.Header{Key: k, Value: []byte(v)})
		}
		out[i] = record{key: r.Key, value: r.Value, headers: append(hs, stamp(s, req.BatchID, i)...)}
	}
	return out
}

// stamp returns the fencegate headers of record seq of batch (barriers use
// an empty batch).
func stamp(s *session, batch string, seq int) []kafka.Header {
	hs := []kafka.Header{
		{Key: barrier.HeaderLease, Value: []byte(s.name)},
		{Key: barrier.HeaderToken, Value: []byte(strconv.FormatInt(s.token, 10))},
		{Key: barrier.HeaderOwner, Value: []byte(s.owner)},
	}
	if batch != "" {
		hs = append(hs, kafka.Header{Key: barrier.HeaderBatch, Value: []byte(batch)},
			kafka.Header{Key: barrier.HeaderSeq, Value: []byte(strconv.Itoa(seq))})
	}
	return hs
}

// Renew extends the caller's lease in Postgres, then the local deadline
// (measured from the start of the request, so never later than the
// database's expiry).
func (g *Gateway) Renew(ctx context.Context, name, owner string, token int64, ttl time.Duration) (RenewResult, error) {
	ctx, span := g.tracer.Start(ctx, "fencegate.renew", trace.WithAttributes(attrLease.String(name), attrToken.Int64(token)))
	defer span.End()
	res, err := g.renew(ctx, name, owner, token, ttl)
	outcome := "ok"
	if err != nil {
		outcome = "lost"
		if toError(err).Code == CodeStoreUnavailable {
			outcome = "unavailable"
		}
	}
	g.met.renewals.Add(ctx, 1, metric.WithAttributes(attribute.String("outcome", outcome)))
	return res, spanError(span, err)
}

func (g *Gateway) renew(ctx context.Context, name, owner string, token int64, ttl time.Duration) (RenewResult, error) {
	start := g.cfg.Now()
	s := g.session(name)
	if s == nil {
		return RenewResult{}, g.notHolder(ctx, name)
	}
	if err := s.admit(owner, token, start); err != nil {
		return RenewResult{}, err
	}
	l, err := g.store.Renew(ctx, name, owner, token, ttl)
	if err != nil {
		if e := toError(err); e.Code == CodeLeaseLost {
			g.mu.Lock()
			g.endLocked(s, e)
			g.mu.Unlock()
		}
		return RenewResult{}, err
	}
	if !s.extend(start.Add(ttl)) {
		return RenewResult{}, s.endedReason()
	}
	return RenewResult{Name: name, Token: token, ExpiresAt: l.ExpiresAt}, nil
}

// RenewResult is the reply to a renewal.
type RenewResult struct {
	Name      string    `json:"name"`
	Token     int64     `json:"token"`
	ExpiresAt time.Time `json:"expires_at"`
}

// Release ends the caller's lease in Postgres and closes the session's
// producer (after any transaction in flight finished).
func (g *Gateway) Release(ctx context.Context, name, owner string, token int64) error {
	ctx, span := g.tracer.Start(ctx, "fencegate.release", trace.WithAttributes(attrLease.String(name), attrToken.Int64(token)))
	defer span.End()
	if _, err := g.store.Release(ctx, name, owner, token); err != nil {
		return spanError(span, err)
	}
	g.log.Info("lease released", "fencegate.lease", name, "fencegate.token", token, "owner", owner)
	if s := g.session(name); s != nil && s.token == token {
		g.remove(s, errorf(CodeLeaseLost, "lease %q released", name))
	}
	return nil
}
