package materializer

import (
	"time"

	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/fencegate/fencegate/barrier"
)

// HeaderTrusted is the provenance header of a record in the trusted
// topic (docs/ledger.md, "The trusted topic").
const HeaderTrusted = "fencegate-trusted"

// Provenance is the value of HeaderTrusted, as compact JSON: the stamp the
// record was judged by and its offset in the lease topic. Kept is the
// verdict a kept record would have had (observe or gated), empty for a
// fenced record.
type Provenance struct {
	Lease  string `json:"lease"`
	Token  int64  `json:"token"`
	Owner  string `json:"owner"`
	Batch  string `json:"batch"`
	Seq    int    `json:"seq"`
	Offset int64  `json:"offset"`
	Kept   string `json:"kept,omitempty"`
}

// Receipt is a refused record's receipt in the receipts topic: the
// fields of rejected_records.
type Receipt struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
	Reason    string `json:"reason"`
	Detail    string `json:"detail"`
	Lease     string `json:"lease,omitempty"`
	Token     int64  `json:"token,omitempty"`
	Owner     string `json:"owner,omitempty"`
	Batch     string `json:"batch,omitempty"`
	Seq       *int   `json:"seq,omitempty"`
}

// chunkOut is what one chunk writes: records for the trusted topic and
// receipts, verdicts counted.
type chunkOut struct {
	msgs   []*kafka.Message
	counts map[Verdict]int64
}

// commitChunk judges recs of one partition and commits, in one Kafka
// transaction of the partition's producer, their trusted records, their
// receipts, the state they changed and the input offset past them.
func (t *TrustedSink) commitChunk(ctx context.Context, c *kafka.Consumer, tp *trustedPart, recs []*kafka.Message) error {
	if tp == nil || len(recs) == 0 {
		return nil
	}
	out := t.judgeChunk(tp, recs)
	first := int64(recs[0].TopicPartition.Offset)
	next := int64(recs[len(recs)-1].TopicPartition.Offset) + 1
	if err := t.transact(ctx, c, tp, out.msgs, next); err != nil {
		err = fmt.Errorf("trusted sink: %s/%d offsets %d-%d: %w", tp.key.topic, tp.key.partition, first, next-1, err)
		if !abortable(err) {
			return err
		}
		return t.rewind(ctx, c, tp, first, err)
	}
	if err := t.mirror(ctx, tp.key, tp.state.changed, next); err != nil {
		return fmt.Errorf("trusted sink: %s/%d: mirror: %w", tp.key.topic, tp.key.partition, err)
	}
	for v, n := range out.counts {
		c, _ := t.verdicts.Load(v)
		c.(*atomic.Int64).Add(n)
		t.m.met.trustedVerdicts(ctx, v, n)
	}
	return nil
}

// abortable reports whether err leaves the producer usable once its
// transaction is aborted: a commit refused because the group's
// generation moved under a rebalance (KIP-447's check), a broker error
// that failed the transaction. A fatal error (the producer fenced: a
// zombie) is not.
func abortable(err error) bool {
	var ke kafka.Error
	return errors.As(err, &ke) && ke.TxnRequiresAbort() && !ke.IsFatal()
}

// fatal reports whether err ends a producer for good: fenced by a newer
// producer of its transactional id (another instance took the
// partition: FM55), by the coordinator's epoch bump when it aborted a
// transaction past its timeout (FM118), or wedged in a call (FM119).
// Run then joins the group again.
func fatal(err error) bool {
	var ke kafka.Error
	return errors.Is(err, errWedged) || errors.As(err, &ke) && ke.IsFatal()
}

// retriable reports whether err says a transactional call timed out or
// lost its coordinator and may be called again to resume (librdkafka
// refuses any other transactional call until it completes).
func retriable(err error) bool {
	var ke kafka.Error
	return errors.As(err, &ke) && ke.IsRetriable() && !ke.TxnRequiresAbort() && !ke.IsFatal()
}

// txnRetryPause is the pause between two calls of a transactional call
// answered retriable.
const txnRetryPause = 100 * time.Millisecond

// wedgeGrace is how long past its own timeout a transactional call may
// take before the sink stops waiting on it (FM119).
const wedgeGrace = 10 * time.Second

// errWedged says a transactional call did not return within its timeout
// and wedgeGrace: librdkafka 2.11.1 never times out the group
// coordinator's part of SendOffsetsToTransaction, and waits forever when
// that coordinator's broker was killed and left the cluster's metadata
// (FM119). Run answers it as a fence: it joins the group again with new
// producers, whose InitTransactions fences the wedged one.
var errWedged = errors.New("transactional call wedged past its timeout")

// retry makes a transactional call, each bounded by the transaction
// timeout, and makes it again while its answer is retriable (the
// coordinator killed, frozen or cut off: FM117) until ctx ends. The
// partition has nothing else to do meanwhile, and the broker aborts a
// transaction left open past its timeout. A call that outlives its
// timeout by wedgeGrace is left behind (errWedged).
func (t *TrustedSink) retry(ctx context.Context, tp *trustedPart, what string, call func(context.Context) error) error {
	for told := false; ; told = true {
		err := t.bounded(ctx, tp, what, call)
		if !retriable(err) {
			return err
		}
		if !told {
			t.log.Warn("trusted sink: "+what+" asked again", "topic", tp.key.topic, "partition", tp.key.partition, "err", err)
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(txnRetryPause):
		}
	}
}

// bounded makes one transactional call with the transaction timeout and
// waits for it at most wedgeGrace longer. A call still running then is
// left to finish on its own: the partition's producer is abandoned
// (closed when the call returns, never while it runs: librdkafka must
// not be destroyed under a call) and errWedged returned.
func (t *TrustedSink) bounded(ctx context.Context, tp *trustedPart, what string, call func(context.Context) error) error {
	done := make(chan error, 1)
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), t.cfg.TransactionTimeout)
	go func() {
		defer cancel()
		done <- call(cctx)
	}()
	wedged := time.NewTimer(t.cfg.TransactionTimeout + wedgeGrace)
	defer wedged.Stop()
	select {
	case err := <-done:
		return err
	case <-wedged.C:
	}
	tp.abandoned.Store(true)
	go func() {
		<-done
		tp.p.Close()
	}()
	t.log.Error("trusted sink: "+what+" wedged in librdkafka past its timeout; leaving it and joining the group again",
		"topic", tp.key.topic, "partition", tp.key.partition, "timeout", t.cfg.TransactionTimeout)
	return fmt.Errorf("%s: %w (%s and %s more)", what, errWedged, t.cfg.TransactionTimeout, wedgeGrace)
}

// rewind aborts the partition's transaction and puts the partition back
// where its last commit left it: the state read again from the state
// topic (the aborted writes are not in it) and the consumer at first, the
// offset that commit moved the group to. The chunk is then read and
// judged again.
func (t *TrustedSink) rewind(ctx context.Context, c *kafka.Consumer, tp *trustedPart, first int64, cause error) error {
	t.log.Warn("trusted sink: transaction aborted; the chunk will be judged again", "topic", tp.key.topic,
		"partition", tp.key.partition, "offset", first, "cause", cause)
	if err := t.retry(ctx, tp, "abort", tp.p.AbortTransaction); err != nil {
		// the abort's answer decides what follows (a fence: Run joins
		// the group again, FM118), the cause is told
		return fmt.Errorf("abort: %w (after %v)", err, cause)
	}
	state, err := t.restore(ctx, tp.key)
	if err != nil {
		return err
	}
	tp.state = state
	topic := tp.key.topic
	return c.Seek(kafka.TopicPartition{Topic: &topic, Partition: tp.key.partition, Offset: kafka.Offset(first)}, 0)
}

// judgeChunk rules on each record in offset order against the
// partition's state and returns the messages to write.
func (t *TrustedSink) judgeChunk(tp *trustedPart, recs []*kafka.Message) chunkOut {
	s := tp.state
	s.dirty = map[string][]byte{}
	s.changed = mirrored{fences: map[string]fenceState{}, checkpoints: map[string]checkpointState{}}
	trusted, receipts, stateTopic := t.Topics(tp.key.topic)
	out := chunkOut{msgs: make([]*kafka.Message, 0, len(recs)+8), counts: map[Verdict]int64{}}
	to := func(topic string) kafka.TopicPartition {
		return kafka.TopicPartition{Topic: &topic, Partition: tp.key.partition}
	}
	for _, st := range readStamps(recs) {
		u := s.rule(st)
		if why := nulHeader(u); why != "" {
			// As the ledger's receipt of a record Postgres refused
			// (refuse): none of the record's own fields.
			u.v, u.detail, u.st = Malformed, why, barrier.Stamp{Seq: -1}
		}
		v := u.v
		switch u.v {
		case Accepted:
			if s.seen(u.st.Lease, u.st.Owner, u.st.Batch, u.st.Seq, u.offset()) {
				v = Duplicate
				u.detail = fmt.Sprintf("batch %s seq %d of owner %s already applied", jsonText(u.st.Batch), u.st.Seq, jsonText(u.st.Owner))
				out.msgs = append(out.msgs, receiptMsg(to(receipts), tp.key, u, v))
				break
			}
			out.msgs = append(out.msgs, trustedMsg(to(trusted), u))
		case Kept:
			out.msgs = append(out.msgs, trustedMsg(to(trusted), u))
		case Barrier:
			g := u.grant
			f := fenceState{Token: g.Token, Owner: g.Owner, ProducerID: g.ProducerID, Epoch: g.Epoch, Offset: u.offset()}
			s.fenceRows[g.Lease], s.changed.fences[g.Lease] = f, f
			s.set(stateKey(stateFence, g.Lease), f)
		case Marker:
			s.set(stateKey(stateMark, u.marker.Pattern), markState{State: u.marker.State, Version: u.marker.Version})
		case Checkpoint:
			s.checkpoint(u)
		default:
			out.msgs = append(out.msgs, receiptMsg(to(receipts), tp.key, u, v))
		}
		out.counts[v]++
	}
	for k, v := range s.dirty {
		out.msgs = append(out.msgs, &kafka.Message{TopicPartition: to(stateTopic), Key: []byte(k), Value: v})
	}
	return out
}

// nulHeader says why a record to keep has a header the Postgres ledger
// cannot keep (headerNUL), or "": the trusted topic refuses it too, so
// both sinks keep the same records. The gateway never writes one
// (docs/api.md, "Records").
func nulHeader(u ruling) string {
	if u.v != Accepted && u.v != Kept {
		return ""
	}
	return headerNUL(u.r.Headers)
}

// checkpoint keeps a checkpoint of the generation in force when it is
// newer than the lease's: a larger token, or the same token at a larger
// offset (qUpsertCheckpoint's rule).
func (s *partState) checkpoint(u ruling) {
	old, ok := s.checkpoints[u.st.Lease]
	if ok && !(u.st.Token > old.Token || u.st.Token == old.Token && u.offset() > old.Offset) {
		return
	}
	value := u.r.Value
	if value == nil {
		value = []byte{}
	}
	cp := checkpointState{Token: u.st.Token, Owner: u.st.Owner, Batch: u.st.Batch, Offset: u.offset(), Value: value,
		Type: u.st.CheckpointType}
	s.checkpoints[u.st.Lease], s.changed.checkpoints[u.st.Lease] = cp, cp
	s.set(stateKey(stateCheckpoint, u.st.Lease), cp)
}

// trustedMsg is an accepted or kept record for the trusted topic: its
// key, value and own headers in their order, and its provenance.
func trustedMsg(to kafka.TopicPartition, u ruling) *kafka.Message {
	hs := make([]kafka.Header, 0, len(u.r.Headers))
	for _, h := range u.r.Headers {
		if !barrier.Reserved(h.Key) {
			hs = append(hs, h)
		}
	}
	pv := Provenance{Lease: u.st.Lease, Token: u.st.Token, Owner: u.st.Owner, Batch: u.st.Batch, Seq: u.st.Seq,
		Offset: u.offset(), Kept: string(u.kept)}
	raw, _ := json.Marshal(pv)
	hs = append(hs, kafka.Header{Key: HeaderTrusted, Value: raw})
	return &kafka.Message{TopicPartition: to, Key: u.r.Key, Value: u.r.Value, Headers: hs}
}

// receiptMsg is a refused record's receipt.
func receiptMsg(to kafka.TopicPartition, key partitionKey, u ruling, v Verdict) *kafka.Message {
	rc := Receipt{Topic: key.topic, Partition: key.partition, Offset: u.offset(), Reason: string(v), Detail: u.detail,
		Lease: u.st.Lease, Token: u.st.Token, Owner: u.st.Owner, Batch: u.st.Batch}
	if u.st.Seq >= 0 {
		seq := u.st.Seq
		rc.Seq = &seq
	}
	raw, _ := json.Marshal(rc)
	return &kafka.Message{TopicPartition: to, Value: raw}
}

func jsonText(s string) string {
	raw, _ := json.Marshal(s)
	return string(raw)
}

// transact writes msgs and moves the group's offset of the partition to
// next, in one transaction.
func (t *TrustedSink) transact(ctx context.Context, c *kafka.Consumer, tp *trustedPart, msgs []*kafka.Message, next int64) error {
	if err := tp.p.BeginTransaction(); err != nil {
		return err
	}
	for _, msg := range msgs {
		if err := tp.p.Produce(msg, nil); err != nil {
			return err
		}
	}
	meta, err := c.GetConsumerGroupMetadata()
	if err != nil {
		return err
	}
	topic := tp.key.topic
	offsets := []kafka.TopicPartition{{Topic: &topic, Partition: tp.key.partition, Offset: kafka.Offset(next)}}
	send := func(ctx context.Context) error { return tp.p.SendOffsetsToTransaction(ctx, offsets, meta) }
	if err := t.retry(ctx, tp, "send offsets", send); err != nil {
		return err
	}
	if h := t.cfg.Hooks.BeforeCommit; h != nil {
		if err := h(tp.key.topic, tp.key.partition); err != nil {
			return err
		}
	}
	if err := t.retry(ctx, tp, "commit", tp.p.CommitTransaction); err != nil {
		return err
	}
	tp.next = next
	return nil
}
