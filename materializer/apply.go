package materializer

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/barrier"
)

// applyTimeout bounds one chunk's transaction.
const applyTimeout = 30 * time.Second

// applyTx is one apply transaction. It takes three round trips whatever
// the chunk's size: the position compare-and-set and the fence locks, then
// every record's statement in one pipeline, then the commit. Verdicts are
// judged in memory, in offset order, against the locked fences.
type applyTx struct {
	m        *Materializer
	tx       pgx.Tx
	key      partitionKey
	fences   map[string]int64
	advanced map[string]int64 // fences moved by this transaction
	verdicts []judged
	batch    pgx.Batch
	// dataAt[i] is the verdict index of the batch's i-th statement when it
	// is a qApplyData (accepted or duplicate is known only from its result).
	dataAt []int
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
//
// A stop does not cut a chunk in flight: its transaction runs on a context
// that the stop does not cancel (bounded by applyTimeout), so a commit that
// reached the server is also reported (verdict counters, fences) rather
// than left committed but unreported.
func (m *Materializer) apply(ctx context.Context, key partitionKey, expected, newNext int64, recs []*kafka.Message) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), applyTimeout)
	defer cancel()
	var done *applyTx
	start := time.Now()
	err := pgx.BeginFunc(ctx, m.pool, func(tx pgx.Tx) error {
		a := &applyTx{m: m, tx: tx, key: key, fences: map[string]int64{}, advanced: map[string]int64{}}
		if err := a.begin(ctx, expected, newNext, recs); err != nil {
			return err
		}
		for _, r := range recs {
			a.judge(r)
		}
		if err := a.send(ctx); err != nil {
			return err
		}
		done = a
		return nil
	})
	if err != nil {
		return err
	}
	m.met.transaction(ctx, start)
	m.report(ctx, key, done)
	return nil
}

// report counts and logs the verdicts and publishes the fences of a
// committed transaction.
func (m *Materializer) report(ctx context.Context, key partitionKey, a *applyTx) {
	for _, j := range a.verdicts {
		m.count(j.v)
		m.met.verdict(ctx, j.v)
		if j.v != Accepted && j.v != Barrier {
			m.log.Warn("record refused", "verdict", j.v, "fencegate.lease", j.lease, "fencegate.token", j.token,
				"topic", key.topic, "partition", key.partition, "offset", j.offset)
		}
	}
	m.fenceMu.Lock()
	defer m.fenceMu.Unlock()
	for lease, token := range a.advanced {
		m.fences[lease] = token
	}
}

func (m *Materializer) afterStatement() error {
	n := m.stmts.Add(1)
	if h := m.cfg.Hooks.AfterStatement; h != nil {
		return h(n)
	}
	return nil
}

// begin moves the position by compare-and-set (FM14) and locks the fences
// of every lease in the chunk.
func (a *applyTx) begin(ctx context.Context, expected, newNext int64, recs []*kafka.Message) error {
	tag, err := a.tx.Exec(ctx, qAdvancePosition, a.key.topic, a.key.partition, expected, newNext)
	if err != nil {
		return err
	}
	if err := a.m.afterStatement(); err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return errPositionMoved
	}
	var leases []string
	for _, r := range recs {
		if st, err := barrier.ReadStamp(r.Headers); err == nil {
			leases = append(leases, st.Lease)
		}
	}
	if len(leases) == 0 {
		return nil
	}
	rows, err := a.tx.Query(ctx, qLockFences, leases)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var lease string
		var token int64
		if err := rows.Scan(&lease, &token); err != nil {
			return err
		}
		a.fences[lease] = token
	}
	if err := rows.Err(); err != nil {
		return err
	}
	return a.m.afterStatement()
}

// judge decides one record against the running fence and queues its
// statement.
func (a *applyTx) judge(r *kafka.Message) {
	off := int64(r.TopicPartition.Offset)
	st, err := barrier.ReadStamp(r.Headers)
	if err != nil {
		a.reject(r, st, Malformed, err.Error())
		return
	}
	fence := a.fences[st.Lease]
	if st.Barrier {
		a.barrier(r, st, fence)
		return
	}
	switch barrier.Judge(fence, st.Token) {
	case barrier.Stale:
		a.reject(r, st, Stale, fmt.Sprintf("token %d below fence %d", st.Token, fence))
		return
	case barrier.Unfenced:
		a.reject(r, st, Unfenced, fmt.Sprintf("token %d above fence %d without a barrier", st.Token, fence))
		return
	}
	a.dataAt = append(a.dataAt, len(a.verdicts))
	a.verdicts = append(a.verdicts, judged{Accepted, st.Lease, st.Token, off})
	a.batch.Queue(qApplyData, st.Lease, st.Token, st.Batch, st.Seq, a.key.topic, a.key.partition, off,
		r.Key, r.Value, userHeaders(r.Headers), fmt.Sprintf("batch %q seq %d of owner %q already applied", st.Batch, st.Seq, st.Owner), st.Owner)
}

// barrier verifies a barrier and advances the fence, or rejects it.
func (a *applyTx) barrier(r *kafka.Message, st barrier.Stamp, fence int64) {
	g, why := a.m.checkBarrier(a.key, st, r.Value)
	if why == "" && g.Token <= fence {
		why = fmt.Sprintf("token %d not above fence %d", g.Token, fence)
	}
	if why != "" {
		a.reject(r, st, BadBarrier, why)
		return
	}
	a.fences[st.Lease] = g.Token
	a.advanced[st.Lease] = g.Token
	a.queue(judged{Barrier, st.Lease, st.Token, int64(r.TopicPartition.Offset)}, qAdvanceFence,
		g.Lease, g.Token, g.Owner, g.ProducerID, int32(g.Epoch), a.key.partition, int64(r.TopicPartition.Offset))
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

func (a *applyTx) reject(r *kafka.Message, st barrier.Stamp, v Verdict, detail string) {
	off := int64(r.TopicPartition.Offset)
	a.queue(judged{v, st.Lease, st.Token, off}, qReject, nullable(st.Lease), nullableInt(st.Token),
		nullable(st.Batch), nullableSeq(st.Seq), a.key.topic, a.key.partition, off, string(v), detail, nullable(st.Owner))
}

// queue adds a statement whose verdict is known now.
func (a *applyTx) queue(j judged, q string, args ...any) {
	a.dataAt = append(a.dataAt, -1)
	a.verdicts = append(a.verdicts, j)
	a.batch.Queue(q, args...)
}

// send runs the queued statements in one pipeline and reads each result
// in order; a qApplyData result says accepted or duplicate.
func (a *applyTx) send(ctx context.Context) error {
	if a.batch.Len() == 0 {
		return nil
	}
	res := a.tx.SendBatch(ctx, &a.batch)
	for _, vi := range a.dataAt {
		if vi < 0 {
			if _, err := res.Exec(); err != nil {
				res.Close()
				return err
			}
		} else {
			var fresh bool
			if err := res.QueryRow().Scan(&fresh); err != nil {
				res.Close()
				return err
			}
			if !fresh {
				a.verdicts[vi].v = Duplicate
			}
		}
		if err := a.m.afterStatement(); err != nil {
			res.Close()
			return err
		}
	}
	return res.Close()
}

// userHeaders are the record's headers other than fencegate's, as JSON.
func userHeaders(hs []kafka.Header) []byte {
	m := map[string]string{}
	for _, h := range hs {
		if !barrier.Reserved(h.Key) {
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
