package gateway

import (
	"context"
	"fmt"
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
	Headers []kafka.Header // the worker's own; names are unique and not reserved
}

// ProduceRequest is one batch: one Kafka transaction.
type ProduceRequest struct {
	Name    string
	Owner   string
	Token   int64
	BatchID string
	Records []Record
	// Checkpoint is the batch's checkpoint, written as one more record of
	// its transaction after Records; nil is none.
	Checkpoint []byte
	// CheckpointType is the type the checkpoint was sent as in a JSON
	// body, "STRING" or "JSON"; "" is BINARY (and every binary body's).
	CheckpointType string
	// Caller is the authenticated client; it must be the one the
	// generation is bound to, or act for it.
	Caller *Client
}

// ProduceResult says where the committed records are.
type ProduceResult struct {
	Name          string  `json:"name"`
	Token         int64   `json:"token"`
	Topic         string  `json:"topic"`
	Partition     int32   `json:"partition"`
	Offsets       []int64 `json:"offsets"`
	ProducerEpoch int16   `json:"producer_epoch"`
	// CheckpointOffset is the offset of the batch's checkpoint record,
	// when it carried one; Offsets are the data records' only.
	CheckpointOffset *int64 `json:"checkpoint_offset,omitempty"`
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
	s := g.sessionFor(req.Name, req.Token)
	if s == nil {
		return ProduceResult{}, g.refused(req, 0, 0, g.notHolder(ctx, req.Name))
	}
	trace.SpanFromContext(ctx).SetAttributes(attrEpoch.Int64(int64(s.epoch)))
	if g.draining.Load() {
		// At once, not behind the batch in flight: the worker moves on.
		return g.drained(s, req)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	remembered, err := s.take(req, g.cfg.Now())
	switch {
	case remembered != nil:
		return *remembered, nil
	case err != nil:
		return ProduceResult{}, g.refused(req, s.token, s.epoch, err)
	}
	if err := g.unparked(s); err != nil {
		return ProduceResult{}, err
	}
	g.cfg.Hooks.call(HookAdmitted, s.name, s.token)
	offsets, terr := g.transact(ctx, s, req)
	if terr != nil {
		return ProduceResult{}, terr
	}
	res := ProduceResult{Name: s.name, Token: s.token, Topic: s.place.Topic,
		Partition: s.place.Partition, Offsets: offsets, ProducerEpoch: s.epoch}
	if req.Checkpoint != nil {
		at := offsets[len(req.Records)]
		res.Offsets, res.CheckpointOffset = offsets[:len(req.Records):len(req.Records)], &at
	}
	s.committed.remember(req.BatchID, res)
	return res, nil
}

// drained answers a batch at a draining replica: its original result if
// the generation committed it, else not_holder.
func (g *Gateway) drained(s *session, req ProduceRequest) (ProduceResult, error) {
	res, e := s.prior(req)
	switch {
	case e != nil:
		return ProduceResult{}, g.refused(req, s.token, s.epoch, e)
	case res != nil:
		return *res, nil
	}
	return ProduceResult{}, drainedError(req.Name)
}

// refused logs a write refused before it reached Kafka, once. A routing
// answer (421 misdirected, 409 not_holder) is ordinary after a restart or a
// rollout and says nothing about a former owner: logged as a stale write it
// would bury the one that matters.
func (g *Gateway) refused(req ProduceRequest, current int64, epoch int16, err *Error) *Error {
	if batchOutcome(err) == outcomeMisrouted {
		g.log.Info("write misrouted", "fencegate.lease", req.Name, "fencegate.token", req.Token,
			"owner", req.Owner, "code", err.Code)
		return err
	}
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
	case e.Code == CodeFenced, e.Code == CodeGenerationEnded && e.Cause == string(CodeFenced):
		// A fence seen after the commit was requested is answered
		// generation_ended (the batch may have landed), but it is still
		// a fenced producer's batch: the refusals panel says so.
		return outcomeFencedOut
	case e.Code == CodeLeaseLost:
		return outcomeStaleToken
	case e.Code == CodeNotHolder, e.Code == CodeMisdirected:
		// Routing, not staleness: the stale-write alert must not fire on
		// every rolling restart.
		return outcomeMisrouted
	case e.Code == CodeInvalidRequest, e.Code == CodePayloadTooLarge:
		return outcomeInvalid
	}
	return outcomeAborted
}

// fate is how far a batch's transaction got: it alone decides whether a
// failed batch may be answered with a definite refusal.
type fate int

const (
	// fateDead: no commit was ever requested for the transaction, and it
	// is aborted or can only be aborted (fenced, or left open on a closed
	// producer for the next epoch bump or the transaction timeout to
	// abort). Nothing of the batch is or will be committed.
	fateDead fate = iota
	// fateUnknown: CommitTransaction was called, or an abort did not
	// complete. The batch may have landed (a commit applied whose answer
	// was lost, a retried EndTxn fenced after the first one committed).
	fateUnknown
)

// settle is the one rule of what a failed batch may be told (the answer
// table in docs/api.md). A batch whose fate is unknown is answered
// generation_ended, whatever reason ended its session meanwhile (reaper,
// takeover, release, shutdown, a fence seen on a retried commit): a
// definite refusal of a batch that landed would tell the worker "not
// written" when it was. Only a dead transaction gets the reason itself.
func settle(reason *Error, f fate) *Error {
	if f == fateDead || reason.Code == CodeGenerationEnded {
		return reason
	}
	return &Error{Code: CodeGenerationEnded, outcome: reason.outcome, Members: Members{Cause: string(reason.Code)},
		Detail: "outcome unknown (" + reason.Detail + "); ask for a new generation with your current token and retry the same batch_id"}
}

// transact runs Begin, produce, Commit; s.mu is held.
func (g *Gateway) transact(ctx context.Context, s *session, req ProduceRequest) ([]int64, error) {
	tctx, cancel := context.WithTimeout(ctx, s.remaining(g.cfg.Now()))
	defer cancel()
	if err := s.prod.p.BeginTransaction(); err != nil {
		return nil, g.fail(s, "begin", err, fateDead)
	}
	offsets, err := s.prod.send(tctx, s.place.Topic, s.place.Partition, g.stampAll(s, req))
	if err != nil {
		return nil, g.abortBatch(s, req, "produce", err)
	}
	if e := s.admit(req.Owner, req.Token, g.cfg.Now()); e != nil {
		// The local deadline passed (or the session ended) while the batch
		// was in flight: fail closed and abort rather than commit. This
		// check is an extra; the broker's epoch fence is what decides.
		return nil, g.abortBatch(s, req, "deadline", e)
	}
	g.cfg.Hooks.call(HookBeforeCommit, s.name, s.token)
	if err := g.commit(ctx, s); err != nil {
		return nil, err
	}
	return offsets, nil
}

// commit calls CommitTransaction, retrying what librdkafka calls retriable
// inside the local deadline. Each attempt is bounded by CommitTimeout and
// by the time left before the local deadline, measured now. Any failure
// ends the generation: once a commit was requested, its outcome is unknown
// (an abortable answer too: the session ends rather than risk an epoch
// bump inside it; the open transaction is aborted by the next generation's
// InitTransactions or by the transaction timeout).
func (g *Gateway) commit(ctx context.Context, s *session) error {
	for {
		left := s.remaining(g.cfg.Now())
		cctx, cancel := context.WithTimeout(ctx, min(g.cfg.CommitTimeout, left))
		start := time.Now()
		err := s.prod.p.CommitTransaction(cctx)
		cancel()
		g.cfg.Hooks.call(HookCommitReturned, s.name, s.token)
		if err == nil {
			g.met.commit.Record(ctx, time.Since(start).Seconds())
			return nil
		}
		if classify(err) == outcomeRetriable && s.remaining(g.cfg.Now()) > 0 && ctx.Err() == nil {
			continue
		}
		return g.fail(s, "commit", err, fateUnknown)
	}
}

// abortBatch aborts the open transaction after a failed step, before any
// commit was requested. A clean abort that left the producer's epoch where
// the barrier put it answers the batch definitely (batch_aborted, or why
// the session no longer admits the batch); anything else ends the
// generation.
func (g *Gateway) abortBatch(s *session, req ProduceRequest, step string, cause error) error {
	switch classify(cause) {
	case outcomeFenced, outcomeFatal:
		// A fatal instance never asks to commit: nothing of the batch will be.
		return g.fail(s, step, cause, fateDead)
	case outcomeEpochBump:
		// Aborting would let librdkafka bump the epoch of this instance
		// (KIP-360 recovery): the generation's records would no longer all
		// come from the epoch its barrier names. End it instead.
		return g.fail(s, step, cause, fateDead)
	}
	ctx, cancel := context.WithTimeout(context.Background(), g.cfg.CommitTimeout)
	defer cancel()
	if err := s.prod.p.AbortTransaction(ctx); err != nil {
		return g.fail(s, "abort after "+step, err, abortFate(err))
	}
	if err := g.sameEpoch(ctx, s); err != nil {
		return g.fail(s, "abort after "+step, err, fateDead)
	}
	if e := s.admit(req.Owner, req.Token, g.cfg.Now()); e != nil {
		return e // the batch ran past the local deadline, or the session ended
	}
	return errorf(CodeBatchAborted, "%s failed, transaction aborted, nothing written; retry the same batch_id: %v", step, cause)
}

// abortFate is the fate of a transaction whose abort failed with err
// before any commit was requested. A fence proves the epoch moved on, and
// the bump that moved it aborted the open transaction: nothing can commit
// it. A fatal instance sends nothing more, so it never asks to commit
// either. Any other failure (a timeout above all) leaves the outcome
// unknown.
func abortFate(err error) fate {
	if o := classify(err); o == outcomeFenced || o == outcomeFatal {
		return fateDead
	}
	return fateUnknown
}

// sameEpoch checks, after an abort, that the coordinator still holds the
// producer id and epoch the generation's barrier names: librdkafka may
// recover from some errors by bumping the epoch while it aborts.
func (g *Gateway) sameEpoch(ctx context.Context, s *session) error {
	pid, epoch, err := g.insp.producerIdentity(ctx, s.place.TransactionalID)
	switch {
	case err != nil:
		return err
	case pid != s.producerID || epoch != s.epoch:
		return fmt.Errorf("producer moved from id %d epoch %d to id %d epoch %d inside the generation", s.producerID, s.epoch, pid, epoch)
	}
	return nil
}

// fail ends the session for good after a fenced, fatal, epoch-moving or
// ambiguous error and closes its producer now (s.mu is held). The producer
// is never re-created for this token (FM07). The answer is this batch's,
// settled by its fate, not the reason that ended the session first.
func (g *Gateway) fail(s *session, step string, err error, f fate) *Error {
	reason := g.endReason(s, step, err)
	s.end(reason)
	s.closeProducer()
	return settle(reason, f)
}

// endReason is why a producer error ends the session, logged and counted:
// fenced only for a fence (a later generation exists); a fatal error of
// another cause ends the generation with cause "fatal" (FM37).
func (g *Gateway) endReason(s *session, step string, err error) *Error {
	switch classify(err) {
	case outcomeFenced:
		g.met.fenced.Add(context.Background(), 1)
		g.log.Warn("producer fenced", "fencegate.lease", s.name, "fencegate.token", s.token,
			"messaging.kafka.producer.epoch", s.epoch, "error", err)
		return errorf(CodeFenced, "%s: the producer of token %d was fenced by a later generation of %q: %v", step, s.token, s.name, err)
	case outcomeFatal:
		g.met.fatal.Add(context.Background(), 1)
		g.log.Error("producer failed fatally", "fencegate.lease", s.name, "fencegate.token", s.token,
			"messaging.kafka.producer.epoch", s.epoch, "step", step, "error", err)
		return fatalEnded(step, err, s.token)
	}
	g.log.Warn("generation ended", "fencegate.lease", s.name, "fencegate.token", s.token, "step", step, "error", err)
	return errorf(CodeGenerationEnded, "%s: %v; ask for a new generation with token %d and retry the same batch_id", step, err, s.token)
}

// fatalEnded is the answer to a fatal producer error that is not a fence:
// the generation ended, with cause "fatal".
func fatalEnded(step string, err error, token int64) *Error {
	e := errorf(CodeGenerationEnded, "%s: fatal producer error, not a fence: %v; ask for a new generation with token %d and retry the same batch_id", step, err, token)
	e.Cause = causeFatal
	return e
}

// causeFatal is the cause member of a generation ended by a fatal
// producer error that is not a fence.
const causeFatal = "fatal"

// stampAll builds the batch's records with the fencegate headers: the
// headers of all records in one allocation, the shared values encoded once.
// A checkpoint is the last record, seq one past the data, key null
// (docs/design.md, "Checkpoints"): in the batch's transaction, so it
// commits exactly when the batch does (FM48).
func (g *Gateway) stampAll(s *session, req ProduceRequest) []record {
	out := make([]record, len(req.Records), len(req.Records)+1)
	st := s.stamp()
	st.Batch, st.CheckpointType = req.BatchID, req.CheckpointType
	stamper := st.Stamper()
	n := barrier.DataHeaders + 2
	for _, r := range req.Records {
		n += len(r.Headers) + barrier.DataHeaders
	}
	all := make([]kafka.Header, 0, n)
	for i, r := range req.Records {
		start := len(all)
		all = stamper.Append(append(all, r.Headers...), i)
		out[i] = record{key: r.Key, value: r.Value, headers: all[start:len(all):len(all)]}
	}
	if req.Checkpoint != nil {
		start := len(all)
		all = stamper.AppendCheckpoint(all, len(req.Records))
		out = append(out, record{value: req.Checkpoint, headers: all[start:len(all):len(all)]})
	}
	return out
}

// Renew extends the caller's lease in Postgres, then the local deadline
// (measured from the start of the request, so never later than the
// database's expiry).
func (g *Gateway) Renew(ctx context.Context, caller *Client, name, owner string, token int64, ttl time.Duration) (RenewResult, error) {
	ctx, span := g.tracer.Start(ctx, "fencegate.renew", trace.WithAttributes(attrLease.String(name), attrToken.Int64(token)))
	defer span.End()
	res, err := g.renew(ctx, caller, name, owner, token, ttl)
	g.met.renewals.Add(ctx, 1, metric.WithAttributes(attribute.String("outcome", renewOutcome(err))))
	return res, spanError(span, err)
}

func (g *Gateway) renew(ctx context.Context, caller *Client, name, owner string, token int64, ttl time.Duration) (RenewResult, error) {
	s := g.sessionFor(name, token)
	if s == nil {
		return RenewResult{}, g.notHolder(ctx, name)
	}
	if g.draining.Load() {
		return RenewResult{}, drainedError(name)
	}
	s.renewMu.Lock()
	defer s.renewMu.Unlock()
	start := g.cfg.Now()
	if err := s.admit(owner, token, start); err != nil {
		return RenewResult{}, err
	}
	if err := caller.mayActFor(s.client, name); err != nil {
		return RenewResult{}, err
	}
	// Past the local deadline the renewal cannot keep the session: a
	// store that does not answer (a partition drops its bytes) is 503 by
	// then, not a request held as long as the link stays down (FM63).
	sctx, cancel := context.WithTimeout(ctx, s.remaining(start))
	defer cancel()
	l, err := g.store.Renew(sctx, name, owner, token, ttl, g.gateFor(caller, name))
	if err != nil {
		g.renewFailed(s, toError(err), start.Add(ttl))
		return RenewResult{}, err
	}
	if !s.extend(start.Add(ttl)) {
		return RenewResult{}, s.endedReason()
	}
	return RenewResult{Name: name, Token: token, ExpiresAt: l.ExpiresAt}, nil
}

// renewFailed ends the session of a renewal Postgres refused as lost. A
// renewal whose outcome is unknown (Postgres unreachable, the answer lost)
// may have moved the database's expiry to deadline: the local deadline
// moves there if that is earlier, so it never outlives the database's.
func (g *Gateway) renewFailed(s *session, e *Error, deadline time.Time) {
	switch e.Code {
	case CodeLeaseLost:
		g.mu.Lock()
		g.endLocked(s, e)
		g.mu.Unlock()
	case CodeStoreUnavailable, CodeInternal:
		s.shorten(deadline)
	}
}

// RenewResult is the reply to a renewal.
type RenewResult struct {
	Name      string    `json:"name"`
	Token     int64     `json:"token"`
	ExpiresAt time.Time `json:"expires_at"`
}

// Release ends the caller's lease. Only the replica holding the session
// serves it: the session ends first (no new batch is admitted), the batch
// in flight finishes or aborts, the producer closes, and only then is the
// row released in Postgres, so a released lease is never left with a
// session writing under it. A replica without the session answers 421
// with the holder's address while another live replica holds the lease,
// and never touches Postgres then; it releases the row only once it has
// found that no live replica other than itself holds it (this replica
// restarted, or the holder is gone), and the owner+token predicate
// decides. A lookup that fails or is slow answers 503 and does nothing.
func (g *Gateway) Release(ctx context.Context, caller *Client, name, owner string, token int64) error {
	ctx, span := g.tracer.Start(ctx, "fencegate.release", trace.WithAttributes(attrLease.String(name), attrToken.Int64(token)))
	defer span.End()
	if err := g.mayRelease(ctx, caller, name, owner, token); err != nil {
		return spanError(span, err)
	}
	if _, err := g.store.Release(ctx, name, owner, token); err != nil {
		return spanError(span, err)
	}
	g.log.Info("lease released", "fencegate.lease", name, "fencegate.token", token, "owner", owner)
	return nil
}

// mayRelease does what must come before the row is released: at the
// holder, it ends the session and waits for its producer; elsewhere, it
// proves that no live replica holds the session and that caller may act
// for the generation's client (FM38).
func (g *Gateway) mayRelease(ctx context.Context, caller *Client, name, owner string, token int64) error {
	if s := g.sessionFor(name, token); s != nil && s.generation(owner, token) == nil {
		if e := caller.mayActFor(s.client, name); e != nil {
			return e
		}
		return g.endForRelease(ctx, s)
	}
	if e := g.heldElsewhere(ctx, name); e != nil {
		return e
	}
	l, err := g.store.Get(ctx, name)
	if err != nil || l.Token != token || l.OwnerID != owner {
		return nil // the release's predicate decides
	}
	if e := caller.mayActFor(l.Client, name); e != nil {
		return e
	}
	return nil
}

// endForRelease ends s and waits until its producer is closed (the batch
// in flight, if any, has finished or aborted); only then is s forgotten.
// A release sent again meanwhile (its first request gave up: the client's
// deadline, the forwarder's bound) finds the ended s of its generation and
// waits here too, however often it is retried (FM81).
func (g *Gateway) endForRelease(ctx context.Context, s *session) error {
	closed := g.endNow(s, errorf(CodeLeaseLost, "lease %q released", s.name))
	select {
	case <-closed:
		g.forget(s)
		return nil
	case <-ctx.Done():
		return errorf(CodeKafkaUnavailable, "release of %q: the batch in flight did not finish: %v", s.name, ctx.Err())
	}
}
