package materializer

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/barrier"
)

// TestChunkCopiedStraightIntoTheLedgerUnlessAKeyRepeats: a chunk whose
// data records have distinct keys is copied straight into the ledger; a
// chunk whose COPY meets a key applied before goes back to its savepoint
// and through the stage, which files exactly the known keys as duplicates
// and accepts the rest; a chunk that starts with a known key, or repeats
// a key within itself, goes through the stage without trying; an offset
// already in the ledger under another key is an error on either path, and
// the chunk leaves no trace.
func TestChunkCopiedStraightIntoTheLedgerUnlessAKeyRepeats(t *testing.T) {
	t.Parallel()
	m := newBenchMaterializer(t)
	l := newBenchLedger(t, m, 1)
	ctx := context.Background()
	count := func(q string, args ...any) int64 {
		t.Helper()
		var n int64
		if err := m.pool.QueryRow(ctx, q, args...).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	paths := func(copied, fellBack int64) {
		t.Helper()
		if c, f := m.copiedChunks.Load(), m.copyFallbacks.Load(); c != copied || f != fellBack {
			t.Fatalf("chunks copied straight %d, fallen back to the stage %d; want %d and %d", c, f, copied, fellBack)
		}
	}
	verdicts := func(accepted, duplicate int64) {
		t.Helper()
		if a, d := m.verdictCounter(Accepted).Load(), m.verdictCounter(Duplicate).Load(); a != accepted || d != duplicate {
			t.Fatalf("verdicts: %d accepted, %d duplicate; want %d and %d", a, d, accepted, duplicate)
		}
	}

	// Two gateway batches, every key new: one COPY into the ledger.
	l.apply(t, l.chunk(200, 0))
	paths(1, 0)
	verdicts(200, 0)

	// Redelivered b-0 between two new batches: the COPY fails on b-0's
	// first key, and the stage files b-0's 100 records, and nothing else,
	// as duplicates.
	var stamps []barrier.Stamp
	for _, batch := range []int{2, 0, 3} {
		stamps = append(stamps, l.batch(batch)...)
	}
	firstDup := l.next + 100
	l.apply(t, l.records(stamps))
	paths(1, 1)
	verdicts(400, 100)
	if n := count(`SELECT count(*) FROM rejected_records WHERE reason = 'duplicate' AND "offset" BETWEEN $1 AND $2`, firstDup, firstDup+99); n != 100 {
		t.Fatalf("%d duplicate receipts for b-0's redelivery, want 100", n)
	}
	if n := count(`SELECT count(*) FROM rejected_records`); n != 100 {
		t.Fatalf("%d receipts in all, want 100", n)
	}
	if n := count(`SELECT count(*) FROM applied_keys`); n != 400 {
		t.Fatalf("%d applied keys, want 400", n)
	}

	// A chunk that starts with a known key (b-1 redelivered, then b-6):
	// through the stage, no COPY tried.
	l.apply(t, l.records(append(l.batch(1), l.batch(6)...)))
	paths(1, 1)
	verdicts(500, 200)

	// b-4 seq 0 twice in one chunk: through the stage, no COPY tried.
	l.apply(t, l.records(append(l.batch(4)[:1], l.batch(4)[:2]...)))
	paths(1, 1)
	verdicts(502, 201)

	// b-5's second offset is already in the ledger under another key.
	taken := l.next + 1
	if _, err := m.pool.Exec(ctx, `INSERT INTO accepted_records (lease, owner_id, token, batch_id, seq, topic, partition, "offset")
		VALUES ('shard:x', 'o-x', 1, 'x', 0, $1, $2, $3)`, l.key.topic, l.key.partition, taken); err != nil {
		t.Fatal(err)
	}
	recs := l.records(l.batch(5))
	if err := m.apply(ctx, l.key, l.next, l.next+int64(len(recs)), recs); err == nil {
		t.Fatal("a chunk over an offset already in the ledger was applied")
	}
	paths(1, 2)
	verdicts(502, 201)
	if pos, err := m.position(ctx, l.key); err != nil || pos != l.next {
		t.Fatalf("position after the refused chunk: %d (%v), want %d", pos, err, l.next)
	}
	if n := count(`SELECT count(*) FROM accepted_records WHERE batch_id = 'b-5'`); n != 0 {
		t.Fatalf("%d records of the refused chunk in the ledger", n)
	}
}

// batch is the stamps of gateway batch b-i of l's leases, as chunk makes
// them.
func (l *benchLedger) batch(i int) []barrier.Stamp {
	lease := l.leases[i%len(l.leases)]
	out := make([]barrier.Stamp, benchBatch)
	for seq := range out {
		out[seq] = barrier.Stamp{Lease: lease, Token: 1, Owner: "o-" + lease, Batch: fmt.Sprintf("b-%d", i), Seq: seq}
	}
	return out
}

// records are data records stamped sts at the offsets after the stored
// position.
func (l *benchLedger) records(sts []barrier.Stamp) []*kafka.Message {
	recs := make([]*kafka.Message, len(sts))
	for i, st := range sts {
		recs[i] = l.record(st, l.value, i)
	}
	return recs
}

// TestFM30_RefusedChunkAppliedTwiceStaysExact: a chunk holding records
// the ledger cannot keep (a NUL in a header value, refused before
// Postgres; a batch id too large for the dedup key's index, SQLSTATE
// 54000, refused by Postgres, so the chunk is applied in halves): those
// two get malformed receipts with only their place and the cause, every
// other record the verdict it has in one transaction (a repeat within the
// chunk is still a duplicate, an unfenced record still unfenced). The
// same chunk delivered again at the same offsets is refused by the
// position's compare-and-set and changes nothing; sent again at new
// offsets, its records are duplicates and the refused ones refused again.
func TestFM30_RefusedChunkAppliedTwiceStaysExact(t *testing.T) {
	t.Parallel()
	m := newBenchMaterializer(t)
	l := newBenchLedger(t, m, 1)
	ctx := context.Background()
	lease := l.leases[0]
	st := func(batch string, token int64, seq int) barrier.Stamp {
		return barrier.Stamp{Lease: lease, Token: token, Owner: "o-" + lease, Batch: batch, Seq: seq}
	}
	chunk := func() []*kafka.Message {
		recs := l.records([]barrier.Stamp{st("b", 1, 0), st("b", 1, 1), st("b", 1, 0), st(hugeID(), 1, 0),
			st("b", 2, 3), st("b", 1, 2)})
		for _, i := range []int{1, 4} { // a NUL in a header value: the ledger's jsonb refuses it
			recs[i].Headers = append(recs[i].Headers, kafka.Header{Key: "h", Value: []byte("a\x00b")})
		}
		return recs
	}
	first := l.next
	l.apply(t, chunk())
	want := map[Verdict]int64{Accepted: 2, Duplicate: 1, Malformed: 2, Unfenced: 1}
	checkVerdicts(t, m, want)
	dump := ledgerDump(t, m)
	for _, line := range []string{
		fmt.Sprintf(`rejected %d malformed    header "h" holds a NUL, which the ledger cannot keep`, first+1),
		fmt.Sprintf("rejected %d malformed    the ledger refused the record: SQLSTATE 54000", first+3),
		fmt.Sprintf("rejected %d unfenced %s b 3", first+4, lease),
	} {
		if !strings.Contains(dump, line) {
			t.Fatalf("ledger lacks %q:\n%s", line, dump)
		}
	}

	l.next = first
	recs := chunk()
	if err := m.apply(ctx, l.key, first, first+int64(len(recs)), recs); !errors.Is(err, errPositionMoved) {
		t.Fatalf("the chunk redelivered at its offsets: %v, want %v", err, errPositionMoved)
	}
	if got := ledgerDump(t, m); got != dump {
		t.Fatalf("the redelivery changed the ledger:\n%s\nwas:\n%s", got, dump)
	}
	checkVerdicts(t, m, want)

	l.next = first + int64(len(recs))
	l.apply(t, chunk())
	checkVerdicts(t, m, map[Verdict]int64{Accepted: 2, Duplicate: 4, Malformed: 4, Unfenced: 2})
}

// hugeID is too large for an index row (2704 bytes at most) and does not
// compress.
func hugeID() string {
	var sb strings.Builder
	for i := range 400 {
		fmt.Fprintf(&sb, "%08x", uint32(i)*2654435761)
	}
	return sb.String()
}

func checkVerdicts(t *testing.T, m *Materializer, want map[Verdict]int64) {
	t.Helper()
	for _, v := range []Verdict{Accepted, Duplicate, Malformed, Unfenced, Stale} {
		if got := m.verdictCounter(v).Load(); got != want[v] {
			t.Fatalf("%d records %s, want %d (all: %v)", got, v, want[v], m.Counts())
		}
	}
}

// ledgerDump renders the ledger's rows and receipts, one a line.
func ledgerDump(t *testing.T, m *Materializer) string {
	t.Helper()
	rows, err := m.pool.Query(context.Background(), `
		SELECT format('accepted %s %s %s %s %s %s', "offset", lease, owner_id, batch_id, seq, headers::text) FROM accepted_records
		UNION ALL
		SELECT format('rejected %s %s %s %s %s %s', "offset", reason, lease, left(batch_id, 10), seq, detail) FROM rejected_records
		UNION ALL
		SELECT format('position %s', next_offset) FROM consumer_positions
		ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(lines, "\n")
}
