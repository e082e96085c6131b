package materializer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/barrier"
)

// applyTx is one apply transaction: the fences it locked and its verdicts.
type applyTx struct {
	m        *Materializer
	tx       pgx.Tx
	key      partitionKey
	fences   map[string]int64
	advanced map[string]int64 // fences moved by this transaction
	verdicts []judged
}

// judged is one record's verdict, reported once the transaction commits.
type judged struct {
	v      Verdict
	lease  string
	token  int64
	offset int64
}

// apply applies recs of one partition in one transaction, moving the
// position from expected to newNext by compare-and-set.
func (m *Materializer) apply(ctx context.Context, key partitionKey, expected, newNext int64, recs []*kafka.Message) error {
	var verdicts []judged
	var fences map[string]int64
	start := time.Now()
	err := pgx.BeginFunc(ctx, m.pool, func(tx pgx.Tx) error {
		a := &applyTx{m: m, tx: tx, key: key, fences: map[string]int64{}, advanced: map[string]int64{}}
		tag, err := tx.Exec(ctx, qAdvancePosition, key.topic, key.partition, expected, newNext)
		if err != nil {
			return err
		}
		if err := m.afterStatement(); err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return errPositionMoved
		}
		for _, r := range recs {
			if err := a.record(ctx, r); err != nil {
				return err
			}
		}
		verdicts, fences = a.verdicts, a.advanced
		return nil
	})
	if err != nil {
		return err
	}
	m.met.transaction(ctx, start)
	for _, j := range verdicts {
		m.count(j.v)
		m.met.verdict(ctx, j.v)
		if j.v != Accepted && j.v != Barrier {
			m.log.Warn("record refused", "verdict", j.v, "fencegate.lease", j.lease, "fencegate.token", j.token,
				"topic", key.topic, "partition", key.partition, "offset", j.offset)
		}
	}
	m.fenceMu.Lock()
	for lease, token := range fences {
		m.fences[lease] = token
	}
	m.fenceMu.Unlock()
	return nil
}

func (m *Materializer) afterStatement() error {
	n := m.stmts.Add(1)
	if h := m.cfg.Hooks.AfterStatement; h != nil {
		return h(n)
	}
	return nil
}

// one runs a statement returning at most one int64 (ok=false: no row).
func (a *applyTx) one(ctx context.Context, q string, args ...any) (v int64, ok bool, err error) {
	err = a.tx.QueryRow(ctx, q, args...).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		err = nil
	} else if err == nil {
		ok = true
	}
	if err == nil {
		err = a.m.afterStatement()
	}
	return v, ok, err
}

func (a *applyTx) write(ctx context.Context, q string, args ...any) error {
	if _, err := a.tx.Exec(ctx, q, args...); err != nil {
		return err
	}
	return a.m.afterStatement()
}

// fence returns the lease's fence (0: none), locked for this transaction.
func (a *applyTx) fence(ctx context.Context, lease string) (int64, error) {
	if f, ok := a.fences[lease]; ok {
		return f, nil
	}
	f, _, err := a.one(ctx, qLockFence, lease)
	if err != nil {
		return 0, err
	}
	a.fences[lease] = f
	return f, nil
}

// record judges one record and writes its outcome.
func (a *applyTx) record(ctx context.Context, r *kafka.Message) error {
	st, err := barrier.ReadStamp(r.Headers)
	if err != nil {
		return a.reject(ctx, r, st, Malformed, err.Error())
	}
	fence, err := a.fence(ctx, st.Lease)
	if err != nil {
		return err
	}
	if st.Barrier {
		return a.barrier(ctx, r, st, fence)
	}
	switch barrier.Judge(fence, st.Token) {
	case barrier.Stale:
		return a.reject(ctx, r, st, Stale, fmt.Sprintf("token %d below fence %d", st.Token, fence))
	case barrier.Unfenced:
		return a.reject(ctx, r, st, Unfenced, fmt.Sprintf("token %d above fence %d without a barrier", st.Token, fence))
	}
	_, fresh, err := a.one(ctx, qApplyKey, st.Lease, st.Batch, st.Seq)
	if err != nil {
		return err
	}
	if !fresh {
		return a.reject(ctx, r, st, Duplicate, fmt.Sprintf("batch %q seq %d already applied", st.Batch, st.Seq))
	}
	a.verdicts = append(a.verdicts, judged{Accepted, st.Lease, st.Token, int64(r.TopicPartition.Offset)})
	return a.write(ctx, qAccept, st.Lease, st.Token, st.Batch, st.Seq, a.key.topic, a.key.partition,
		int64(r.TopicPartition.Offset), r.Key, r.Value, userHeaders(r.Headers))
}

// barrier verifies a barrier and advances the fence, or rejects it.
func (a *applyTx) barrier(ctx context.Context, r *kafka.Message, st barrier.Stamp, fence int64) error {
	g, why := a.m.checkBarrier(a.key, st, r.Value)
	if why == "" && g.Token <= fence {
		why = fmt.Sprintf("token %d not above fence %d", g.Token, fence)
	}
	if why != "" {
		return a.reject(ctx, r, st, BadBarrier, why)
	}
	a.fences[st.Lease] = g.Token
	a.advanced[st.Lease] = g.Token
	a.verdicts = append(a.verdicts, judged{Barrier, st.Lease, st.Token, int64(r.TopicPartition.Offset)})
	return a.write(ctx, qAdvanceFence, g.Lease, g.Token, g.Owner, g.ProducerID, int32(g.Epoch),
		a.key.partition, int64(r.TopicPartition.Offset))
}

// checkBarrier verifies signature, lease binding and placement; it returns
// the grant, or why the barrier is refused.
func (m *Materializer) checkBarrier(key partitionKey, st barrier.Stamp, value []byte) (barrier.Grant, string) {
	g, err := m.signer.Open(value)
	if err != nil {
		return g, err.Error()
	}
	if g.Lease != st.Lease || g.Token != st.Token {
		return g, fmt.Sprintf("signed for lease %q token %d, headers say %q token %d", g.Lease, g.Token, st.Lease, st.Token)
	}
	p, err := m.router.Resolve(g.Lease)
	if err != nil || p.Topic != key.topic || p.Partition != key.partition {
		return g, fmt.Sprintf("lease %q does not live on %s/%d", g.Lease, key.topic, key.partition)
	}
	return g, ""
}

func (a *applyTx) reject(ctx context.Context, r *kafka.Message, st barrier.Stamp, v Verdict, detail string) error {
	a.verdicts = append(a.verdicts, judged{v, st.Lease, st.Token, int64(r.TopicPartition.Offset)})
	return a.write(ctx, qReject, nullable(st.Lease), nullableInt(st.Token), nullable(st.Batch), nullableSeq(st.Seq),
		a.key.topic, a.key.partition, int64(r.TopicPartition.Offset), string(v), detail)
}

// userHeaders are the record's headers other than fencegate's, as JSON.
func userHeaders(hs []kafka.Header) []byte {
	m := map[string]string{}
	for _, h := range hs {
		if len(h.Key) < len(barrier.ReservedPrefix) || h.Key[:len(barrier.ReservedPrefix)] != barrier.ReservedPrefix {
			m[h.Key] = string(h.Value)
		}
	}
	raw, _ := json.Marshal(m)
	return raw
}

func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func nullableInt(n int64) any {
	if n == 0 {
		return nil
	}
	return n
}

func nullableSeq(n int) any {
	if n < 0 {
		return nil
	}
	return n
}
