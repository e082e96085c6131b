package materializer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fencegate/fencegate/barrier"
)

// applyTimeout bounds one chunk's transaction.
const applyTimeout = 30 * time.Second

// applyTx is one apply transaction. It takes four round trips whatever
// the chunk's size: the position compare-and-set with the fence locks,
// the COPY of the data records, the chunk's statements in one pipeline
// (each refusal and barrier in one statement of its own), then the
// commit. Verdicts are judged in memory, in offset order, against the
// locked fences; only whether a data record is a duplicate waits for the
// ledger. A chunk whose data records have distinct dedup keys, the first
// of them new, is copied straight into the ledger under a savepoint
// (qCopySavepoint); any other chunk, and one whose COPY meets a key
// applied before (one round trip more), goes through the session's stage
// and one statement that files the duplicates (qApplyStaged).
type applyTx struct {
	rules
	tx       pgx.Tx
	advanced map[string]int64 // fences moved by this transaction
	verdicts []judged         // in offset order
	batch    pgx.Batch        // statements whose verdict is known now
	staged   *stage
	// direct: the chunk's data records have distinct keys, the first is
	// new to the ledger, and begin opened qCopySavepoint for the COPY
	// straight into the ledger; copied: that COPY went through, and the
	// stage is not used.
	direct, copied bool
}

// judged is one record's verdict, reported once the transaction commits.
type judged struct {
	v      Verdict
	lease  string
	token  int64
	offset int64
	kept   Verdict // with v == Kept: the verdict the record would have had
}

// stamped is a record with its parsed fencegate headers.
type stamped struct {
	r   *kafka.Message
	st  barrier.Stamp
	err error
}

// apply applies recs of one partition in one transaction, moving the
// position from expected to newNext by compare-and-set.
//
// A stop does not cut a chunk in flight: its transaction runs on a context
// that the stop does not cancel (bounded by applyTimeout), so a commit that
// reached the server is also reported (verdict counters, fences) rather
// than left committed but unreported.
//
// A chunk that Postgres refuses for the data of a record (ledgerRefusal)
// is applied in halves, each its own transaction with its own
// compare-and-set, down to the record Postgres refuses, which gets a
// malformed receipt (refuse): the partition goes on, and every other
// record gets the verdict it would have had in one transaction (the
// fences and the dedup keys are the ledger's, committed in offset order).
func (m *Materializer) apply(ctx context.Context, key partitionKey, expected, newNext int64, recs []*kafka.Message) error {
	err := m.applyOnce(ctx, key, expected, newNext, recs)
	cause := ledgerRefusal(err)
	if cause == "" || len(recs) == 0 {
		return err
	}
	if len(recs) == 1 {
		return m.refuse(ctx, key, expected, newNext, recs[0], cause)
	}
	m.log.Warn("the ledger refused a chunk; applying it in halves", "topic", key.topic, "partition", key.partition,
		"from", expected, "to", newNext, "cause", cause)
	mid := len(recs) / 2
	split := int64(recs[mid].TopicPartition.Offset)
	if err := m.apply(ctx, key, expected, split, recs[:mid]); err != nil {
		return err
	}
	return m.apply(ctx, key, split, newNext, recs[mid:])
}

// applyOnce applies recs in one transaction.
func (m *Materializer) applyOnce(ctx context.Context, key partitionKey, expected, newNext int64, recs []*kafka.Message) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), applyTimeout)
	defer cancel()
	in := readStamps(recs)
	var done *applyTx
	start := time.Now()
	err := pgx.BeginFunc(ctx, m.pool, func(tx pgx.Tx) error {
		a := &applyTx{rules: newRules(m, key), tx: tx, advanced: map[string]int64{},
			verdicts: make([]judged, 0, len(in)), staged: newStage(len(in), m.cfg.LedgerValues)}
		if err := a.begin(ctx, expected, newNext, in); err != nil {
			return err
		}
		for _, s := range in {
			a.judge(s)
		}
		if err := a.copyRecords(ctx); err != nil {
			return err
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

// ledgerRefusal returns the cause, fit for a receipt, when err is
// Postgres refusing the data of a record: SQLSTATE class 22, data
// exception (a NUL in jsonb, bytes that are not UTF-8), or 54, program
// limit exceeded (a key too large for its index). Such a record would
// fail every retry and halt the ledger for good. Any other error
// (connection, serialization, the position moved, a crash hook) is no
// record's fault: "" and the caller stops as before.
func ledgerRefusal(err error) string {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || !(strings.HasPrefix(pgErr.Code, "22") || strings.HasPrefix(pgErr.Code, "54")) {
		return ""
	}
	msg := strings.ReplaceAll(strings.ToValidUTF8(pgErr.Message, "?"), "\x00", "")
	if len(msg) > 300 {
		msg = strings.ToValidUTF8(msg[:300], "") + "..."
	}
	return fmt.Sprintf("the ledger refused the record: SQLSTATE %s: %s", pgErr.Code, msg)
}

// refuse files the malformed receipt of the record r that Postgres
// refused, alone in its transaction with the position's compare-and-set:
// topic, partition, offset and the cause, none of the record's own fields
// (one of them is what Postgres refused).
func (m *Materializer) refuse(ctx context.Context, key partitionKey, expected, newNext int64, r *kafka.Message, cause string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), applyTimeout)
	defer cancel()
	off := int64(r.TopicPartition.Offset)
	err := pgx.BeginFunc(ctx, m.pool, func(tx pgx.Tx) error {
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
		if _, err := tx.Exec(ctx, qReject, nil, nil, nil, nil, key.topic, key.partition, off, string(Malformed), cause, nil); err != nil {
			return err
		}
		return m.afterStatement()
	})
	if err != nil {
		return err
	}
	m.report(ctx, key, &applyTx{verdicts: []judged{{v: Malformed, offset: off}}})
	return nil
}

// readStamps parses each record's stamp; a stamp the ledger cannot keep
// (keepableStamp) is as malformed as a missing one.
func readStamps(recs []*kafka.Message) []stamped {
	out := make([]stamped, len(recs))
	for i, r := range recs {
		st, err := barrier.ReadStamp(r.Headers)
		if err == nil {
			err = keepableStamp(st)
		}
		out[i] = stamped{r, st, err}
	}
	return out
}

// dataKeys returns the dedup key of the first record stamped as data,
// and whether no two such records share a key: only then is the COPY
// straight into the ledger worth trying (a repeat would fail it on the
// ledger's unique key, and the chunk would take the staged path after
// all).
func dataKeys(in []stamped) (first dedupKey, distinct bool) {
	seen := make(map[dedupKey]struct{}, len(in))
	for _, s := range in {
		if s.err != nil || s.st.Barrier || s.st.Checkpoint {
			continue
		}
		k := dedupKey{s.st.Lease, s.st.Owner, s.st.Batch, s.st.Seq}
		if _, dup := seen[k]; dup {
			return first, false
		}
		if len(seen) == 0 {
			first = k
		}
		seen[k] = struct{}{}
	}
	return first, len(seen) > 0
}

// leasesOf lists the distinct leases of the stamped records, sorted: the
// fences are locked in one order by every transaction. data says whether
// any record is stamped as data (it may be staged).
func leasesOf(in []stamped) (leases []string, data bool) {
	for _, s := range in {
		if s.err == nil {
			leases = append(leases, s.st.Lease)
			data = data || !s.st.Barrier && !s.st.Checkpoint
		}
	}
	slices.Sort(leases)
	return slices.Compact(leases), data
}

// report counts and logs the verdicts and publishes the fences of a
// committed transaction.
func (m *Materializer) report(ctx context.Context, key partitionKey, a *applyTx) {
	counts, kept := map[Verdict]int64{}, map[Verdict]int64{}
	for _, j := range a.verdicts {
		counts[j.v]++
		if j.v == Kept {
			kept[j.kept]++
		}
		if j.v != Accepted && j.v != Barrier && j.v != Kept && j.v != Marker && j.v != Checkpoint {
			m.log.Warn("record refused", "verdict", j.v, "fencegate.lease", j.lease, "fencegate.token", j.token,
				"topic", key.topic, "partition", key.partition, "offset", j.offset)
		}
	}
	for v, n := range counts {
		m.verdictCounter(v).Add(n)
		m.met.verdicts(ctx, v, n)
	}
	for v, n := range kept {
		m.keptCounter(v).Add(n)
		m.met.keptAs(ctx, v, n)
	}
	m.fenceMu.Lock()
	defer m.fenceMu.Unlock()
	for lease, token := range a.advanced {
		m.fences[lease] = max(m.fences[lease], token)
	}
}

func (m *Materializer) afterStatement() error {
	n := m.stmts.Add(1)
	if h := m.cfg.Hooks.AfterStatement; h != nil {
		return h(n)
	}
	return nil
}

// begin moves the position by compare-and-set (FM14), makes the stage
// when the chunk may have data records, and locks the fences of the
// chunk's leases, all in one round trip. When the chunk's data records
// have distinct keys it also asks whether the first one's key is known
// (a redelivery, most likely of the whole chunk) and, for the COPY
// straight into the ledger that a new key makes worth trying, opens its
// savepoint.
func (a *applyTx) begin(ctx context.Context, expected, newNext int64, in []stamped) error {
	leases, data := leasesOf(in)
	first, distinct := dataKeys(in)
	var b pgx.Batch
	b.Queue(qAdvancePosition, a.key.topic, a.key.partition, expected, newNext)
	b.Queue(qLockMarks, a.key.topic, a.key.partition)
	if data {
		b.Queue(qCreateStage)
	}
	if distinct {
		b.Queue(qKnownKey, first.lease, first.owner, first.batch, first.seq, a.key.partition)
		b.Queue(qCopySavepoint)
	}
	if len(leases) > 0 {
		b.Queue(qLockFences, leases, a.key.partition)
	}
	res := a.tx.SendBatch(ctx, &b)
	defer res.Close()
	tag, err := res.Exec()
	if err != nil {
		return err
	}
	if err := a.m.afterStatement(); err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return errPositionMoved
	}
	if err := a.readMarks(res); err != nil {
		return err
	}
	if data {
		if err := a.exec(res); err != nil {
			return err
		}
	}
	if distinct {
		var known bool
		if err := res.QueryRow().Scan(&known); err != nil {
			return err
		}
		if err := a.m.afterStatement(); err != nil {
			return err
		}
		if err := a.exec(res); err != nil {
			return err
		}
		a.direct = !known
	}
	if len(leases) > 0 {
		if err := a.readFences(res); err != nil {
			return err
		}
		if err := a.m.afterStatement(); err != nil {
			return err
		}
	}
	return res.Close()
}

// exec reads the result of a pipelined statement that returns no rows.
func (a *applyTx) exec(res pgx.BatchResults) error {
	if _, err := res.Exec(); err != nil {
		return err
	}
	return a.m.afterStatement()
}

func (a *applyTx) readFences(res pgx.BatchResults) error {
	rows, err := res.Query()
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
	return rows.Err()
}

// judge rules on one record and queues its statement or its row.
func (a *applyTx) judge(s stamped) {
	u := a.rule(s)
	j := judged{v: u.v, lease: u.st.Lease, token: u.st.Token, offset: u.offset(), kept: u.kept}
	switch u.v {
	case Accepted:
		if why := a.staged.refuses(u.r.Headers); why != "" {
			// As the receipt of a record Postgres refused (refuse), and
			// the trusted sink's: none of the record's own fields.
			a.reject(u.r, barrier.Stamp{Seq: -1}, Malformed, why)
			return
		}
		a.verdicts = append(a.verdicts, j)
		a.staged.add(u.st, u.r, u.headers)
	case Barrier:
		g := u.grant
		a.advanced[g.Lease] = g.Token
		a.queue(j, qAdvanceFence, g.Lease, g.Token, g.Owner, g.ProducerID, int32(g.Epoch), a.key.partition, u.offset())
	case Checkpoint:
		value := u.r.Value
		if value == nil {
			value = []byte{} // an empty checkpoint; Kafka does not tell it from a null value
		}
		a.queue(j, qUpsertCheckpoint, u.st.Lease, u.st.Token, u.st.Owner, u.st.Batch, a.key.topic, a.key.partition, u.offset(), value,
			checkpointType(u.st.CheckpointType))
	case Marker:
		a.queue(judged{v: Marker, offset: u.offset()}, qAdvanceMark, a.key.topic, a.key.partition, u.marker.Pattern, u.marker.State, u.marker.Version, u.offset())
	case Kept:
		st := u.st
		a.queue(j, qKeep, a.key.topic, a.key.partition, u.offset(), string(u.kept), u.detail, text(st.Lease), nullableInt(st.Token),
			text(st.Owner), text(st.Batch), nullableSeq(st.Seq), u.r.Key, u.r.Value, u.headers)
	default:
		a.reject(u.r, u.st, u.v, u.detail)
	}
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
	return g, m.checkPlacement(key, g)
}

func (a *applyTx) reject(r *kafka.Message, st barrier.Stamp, v Verdict, detail string) {
	off := int64(r.TopicPartition.Offset)
	a.queue(judged{v: v, lease: st.Lease, token: st.Token, offset: off}, qReject, text(st.Lease), nullableInt(st.Token),
		text(st.Batch), nullableSeq(st.Seq), a.key.topic, a.key.partition, off, string(v), detail, text(st.Owner))
}

// queue adds a statement whose verdict is known now.
func (a *applyTx) queue(j judged, q string, args ...any) {
	a.verdicts = append(a.verdicts, j)
	a.batch.Queue(q, args...)
}

// copyRecords copies the chunk's data records into the ledger when it
// can (copyLedger), and into the session's stage otherwise.
func (a *applyTx) copyRecords(ctx context.Context) error {
	if len(a.staged.rows) == 0 {
		return nil
	}
	if a.direct {
		done, err := a.copyLedger(ctx)
		if done || err != nil {
			return err
		}
		// A key applied before: back to the savepoint, through the stage.
		if _, err := a.tx.Exec(ctx, qRollbackCopy); err != nil {
			return err
		}
		if err := a.m.afterStatement(); err != nil {
			return err
		}
	}
	a.staged.rewind()
	if _, err := a.tx.CopyFrom(ctx, stageTable, stageColumns, a.staged); err != nil {
		return err
	}
	return a.m.afterStatement()
}

// uniqueViolation is SQLSTATE unique_violation.
const uniqueViolation = "23505"

// copyLedger copies the data records, whose keys are distinct, straight
// into accepted_records, in key order. It reports false, with no error,
// when the ledger refused a row as a unique violation: the caller rolls
// back to the savepoint, and the staged path decides exactly which rows
// are duplicates (and fails on any other conflict).
func (a *applyTx) copyLedger(ctx context.Context) (bool, error) {
	_, err := a.tx.CopyFrom(ctx, ledgerTable, ledgerColumns, newLedgerRows(a.staged, a.key))
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == uniqueViolation {
		a.m.copyFallbacks.Add(1)
		return false, nil
	}
	if err != nil {
		return false, err
	}
	a.copied = true
	a.m.copiedChunks.Add(1)
	return true, a.m.afterStatement()
}

// send runs the queued statements and the staged records' statement in
// one pipeline and reads each result in order; the staged records'
// statement returns the offsets of the duplicates.
func (a *applyTx) send(ctx context.Context) error {
	n := a.batch.Len()
	staged := len(a.staged.rows) > 0 && !a.copied
	if staged {
		a.batch.Queue(qApplyStaged, a.key.topic, a.key.partition)
	}
	if a.batch.Len() == 0 {
		return nil
	}
	res := a.tx.SendBatch(ctx, &a.batch)
	defer res.Close()
	for range n {
		if err := a.exec(res); err != nil {
			return err
		}
	}
	if staged {
		if err := a.readDuplicates(res); err != nil {
			return err
		}
		if err := a.m.afterStatement(); err != nil {
			return err
		}
	}
	return res.Close()
}

// readDuplicates marks the verdicts of the offsets qApplyStaged returns.
func (a *applyTx) readDuplicates(res pgx.BatchResults) error {
	rows, err := res.Query()
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var off int64
		if err := rows.Scan(&off); err != nil {
			return err
		}
		i := sort.Search(len(a.verdicts), func(i int) bool { return a.verdicts[i].offset >= off })
		if i == len(a.verdicts) || a.verdicts[i].offset != off || a.verdicts[i].v != Accepted {
			return fmt.Errorf("ledger returned offset %d, which is no data record of the chunk", off)
		}
		a.verdicts[i].v = Duplicate
	}
	return rows.Err()
}

// text is s for a text column of a receipt: NULL when s is empty, or
// when Postgres could not keep it (the receipt would fail as its record
// did).
func text(s string) any {
	if s == "" || !keepableText(s) {
		return nil
	}
	return s
}

// keepableText reports whether a text column keeps s as it is: Postgres
// text holds UTF-8 without NUL.
func keepableText(s string) bool { return utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 }

// keepableStamp refuses a stamp the ledger cannot keep exactly: lease,
// owner and batch id are text columns, seq an integer one (a larger seq
// would wrap onto another record's dedup key).
func keepableStamp(st barrier.Stamp) error {
	for _, f := range [...]struct{ name, v string }{
		{barrier.HeaderLease, st.Lease}, {barrier.HeaderOwner, st.Owner}, {barrier.HeaderBatch, st.Batch}} {
		if !keepableText(f.v) {
			return fmt.Errorf("%w: %s is not valid UTF-8 without NUL", barrier.ErrUnstamped, f.name)
		}
	}
	if st.Seq > math.MaxInt32 {
		return fmt.Errorf("%w: %s %d exceeds the ledger's integer", barrier.ErrUnstamped, barrier.HeaderSeq, st.Seq)
	}
	return nil
}

func nullableInt(n int64) any {
	if n == 0 {
		return nil
	}
	return n
}

// nullableSeq is a receipt's seq: NULL when absent or beyond the
// integer column (an encoding error would stop the ledger).
func nullableSeq(n int) any {
	if n < 0 || n > math.MaxInt32 {
		return nil
	}
	return n
}

// checkpointType is the value_type column of a checkpoint of stamp type t
// (barrier.Stamp.CheckpointType): BINARY when the stamp names none.
func checkpointType(t string) string { return cmp.Or(t, "BINARY") }
