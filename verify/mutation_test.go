package verify

import (
	"fmt"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/barrier"
)

// sized is op with the number of records its attempt sent.
func sized(o Op, records int) Op { o.Records = records; return o }

// TestHistoryAnomalyClasses: for each anomaly class the history checker
// claims, a minimal history with exactly that anomaly fails with a
// message naming it, and the near misses (a retry that dedups, a new
// generation's records after its barrier, an aborted batch retried and
// committed, a batch that landed whole without an acknowledgement) pass.
// docs/failure-modes.md, "Checker anomaly classes", lists them.
func TestHistoryAnomalyClasses(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		entries []string
		drop    []int64 // offsets the reader was not given
		ops     []Op
		want    string // substring of a violation, "" for none
	}{
		// An acknowledged batch whose transaction was aborted at the end
		// of the log: the highest offset read is below it, and the old
		// checker judged no offset above that.
		{"lost write at the tail", []string{"B1", "C", "D1:b1", "A"}, nil,
			[]Op{op("b1", 1, AnswerCommitted, 2)}, "lost write"},
		{"acked offset past the log's end", []string{"B1", "C"}, nil,
			[]Op{op("b1", 1, AnswerCommitted, 2)}, "lost write"},
		{"a reader that read nothing", []string{"B1", "C", "D1:b1", "C"}, []int64{0, 2},
			[]Op{op("b1", 1, AnswerCommitted, 2)}, "short read"},
		{"a reader that stopped short", []string{"B1", "C", "D1:b1", "C", "D1:b2", "C"}, []int64{4},
			nil, "did not read to the partition's end"},
		{"ack with no offsets", []string{"B1", "C", "D1:b1", "C"}, nil,
			[]Op{op("b1", 1, AnswerCommitted)}, "with no offsets"},
		// The refused batch's first record is not committed, its second
		// is: keyed on the first record only, it passed.
		{"definite refusal whose second record landed", []string{"B1", "C", "D1:b1:1", "C"}, nil,
			[]Op{op("b1", 1, AnswerRefused)}, "answered a definite refusal"},
		{"batch landed in part without an ack", []string{"B1", "C", "D1:b1:0", "C"}, nil,
			[]Op{sized(op("b1", 1, AnswerUnknown), 2)}, "committed in part"},
		{"batch landed with a gap in its seqs", []string{"B1", "C", "D1:b1:0", "D1:b1:2", "C"}, nil,
			[]Op{op("b1", 1, AnswerUnknown)}, "2 of 3 records"},
		{"near miss: an aborted transaction nobody read", []string{"B1", "C", "D1:b1", "A"}, nil, nil, ""},
		{"duplicate in one generation", []string{"B1", "C", "D1:b1", "C", "D1:b1", "C"}, nil, nil, "committed more than once"},
		{"delayed commit", []string{"B1", "C", "D1:b1", "B2", "C", "C"}, nil, nil, "after the barrier of token 2"},

		{"near miss: a retry that dedups under a new generation", []string{"B1", "C", "D1:b1:0", "D1:b1:1", "C", "B2", "C", "D2:b1:0", "D2:b1:1", "C"}, nil,
			[]Op{sized(op("b1", 1, AnswerUnknown), 2), sized(op("b1", 2, AnswerCommitted, 7, 8), 2)}, ""},
		{"near miss: a new generation's records after its barrier", []string{"B1", "C", "D1:b1", "C", "B2", "C", "D2:b2", "C"}, nil,
			[]Op{op("b1", 1, AnswerCommitted, 2), op("b2", 2, AnswerCommitted, 6)}, ""},
		{"near miss: an aborted batch retried and committed", []string{"B1", "C", "D1:b1:0", "D1:b1:1", "A", "D1:b1:0", "D1:b1:1", "C"}, nil,
			[]Op{sized(op("b1", 1, AnswerRefused), 2), sized(op("b1", 1, AnswerCommitted, 5, 6), 2)}, ""},
		{"near miss: a batch landed whole without an ack", []string{"B1", "C", "D1:b1:0", "D1:b1:1", "C"}, nil,
			[]Op{sized(op("b1", 1, AnswerUnknown), 2)}, ""},
		{"near miss: an empty partition and no answers", nil, nil, nil, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			log, read := historyLog(t, c.entries...)
			read = adjust(read, log, nil, c.drop)
			vs := fmt.Sprint(CheckHistory(log, read, c.ops).Violations())
			switch {
			case c.want == "" && vs != "[]":
				t.Fatalf("violations %s, want none", vs)
			case c.want != "" && !strings.Contains(vs, c.want):
				t.Fatalf("violations %s, want one saying %q", vs, c.want)
			}
		})
	}
	t.Run("aborted read", func(t *testing.T) {
		log, read := historyLog(t, "B1", "C", "D1:b1", "A")
		read = adjust(read, log, []int64{2}, nil)
		if vs := fmt.Sprint(CheckHistory(log, read, nil).Violations()); !strings.Contains(vs, "transaction that did not commit") {
			t.Fatalf("violations %s, want an aborted read", vs)
		}
	})
}

// rec is a data record of lease "l" for NoStaleWrite and NoAckedLoss.
func rec(off, token int64, batch string, seq int) Record {
	return Record{Offset: off, Stamp: barrier.Stamp{Lease: "l", Token: token, Owner: "o", Batch: batch, Seq: seq}}
}

// bar is a barrier of lease "l".
func bar(off, token int64) Record {
	return Record{Offset: off, Stamp: barrier.Stamp{Lease: "l", Token: token, Owner: "o", Barrier: true}}
}

// TestNoAckedLossAnomalyClasses: each class I3 claims fails on a minimal
// partition, and the near misses pass.
func TestNoAckedLossAnomalyClasses(t *testing.T) {
	t.Parallel()
	ack := func(token int64, batch string, offs ...int64) Batch {
		return Batch{Lease: "l", Token: token, BatchID: batch, Offsets: offs}
	}
	cases := []struct {
		name  string
		recs  []Record
		acked []Batch
		want  string
	}{
		{"acked record missing", []Record{bar(0, 1), rec(1, 1, "b1", 0)}, []Batch{ack(1, "b1", 1, 2)}, "seq 1 (token 1) missing"},
		{"another batch at the acked offset", []Record{bar(0, 1), rec(1, 1, "b2", 0)}, []Batch{ack(1, "b1", 1)}, "missing or different"},
		{"acked under another token", []Record{bar(0, 2), rec(1, 2, "b1", 0)}, []Batch{ack(1, "b1", 1)}, "missing or different"},
		{"records out of seq order", []Record{bar(0, 1), rec(1, 1, "b1", 1), rec(2, 1, "b1", 0)}, []Batch{ack(1, "b1", 1, 2)}, "missing or different"},
		{"acks of a generation out of order", []Record{bar(0, 1), rec(1, 1, "b1", 0), rec(2, 1, "b2", 0)}, []Batch{ack(1, "b2", 2), ack(1, "b1", 1)}, "out of order"},
		{"ack with no offsets", []Record{bar(0, 1), rec(1, 1, "b1", 0)}, []Batch{ack(1, "b1")}, "with no offsets"},
		{"another copy of a record between the batch's offsets", []Record{bar(0, 1), rec(1, 1, "b1", 0), rec(2, 1, "b1", 0), rec(3, 1, "b1", 1)},
			[]Batch{ack(1, "b1", 1, 3)}, "another record of the batch between its offsets"},

		{"near miss: two batches side by side", []Record{bar(0, 1), rec(1, 1, "b1", 0), rec(2, 1, "b1", 1), rec(3, 1, "b2", 0)},
			[]Batch{ack(1, "b1", 1, 2), ack(1, "b2", 3)}, ""},
		{"near miss: the batch retried by a new generation after its barrier", []Record{bar(0, 1), rec(1, 1, "b1", 0), rec(2, 1, "b1", 1),
			bar(3, 2), rec(4, 2, "b1", 0), rec(5, 2, "b1", 1)}, []Batch{ack(1, "b1", 1, 2), ack(2, "b1", 4, 5)}, ""},
		{"near miss: an old generation's ack answered after the new one's", []Record{bar(0, 1), rec(1, 1, "b1", 0), bar(2, 2), rec(3, 2, "b2", 0)},
			[]Batch{ack(2, "b2", 3), ack(1, "b1", 1)}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			vs := fmt.Sprint(NoAckedLoss(c.recs, c.acked))
			switch {
			case c.want == "" && vs != "[]":
				t.Fatalf("violations %s, want none", vs)
			case c.want != "" && !strings.Contains(vs, c.want):
				t.Fatalf("violations %s, want one saying %q", vs, c.want)
			}
		})
	}
}

// TestNoStaleWriteAnomalyClasses: each class I2 (offset order) claims
// fails on a minimal partition, and the near misses pass.
func TestNoStaleWriteAnomalyClasses(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		recs []Record
		want bool
	}{
		{"stale data after a newer barrier", []Record{bar(0, 1), bar(1, 2), rec(2, 1, "b", 0)}, true},
		{"data before any barrier", []Record{rec(0, 1, "b", 0)}, true},
		{"data of a token no barrier opened", []Record{bar(0, 1), rec(1, 2, "b", 0)}, true},
		{"data under a late low barrier (FM06)", []Record{bar(0, 2), bar(1, 1), rec(2, 1, "b", 0)}, true},
		{"near miss: a new generation's records after its barrier", []Record{bar(0, 1), rec(1, 1, "b", 0), bar(2, 2), rec(3, 2, "b", 0)}, false},
		{"near miss: a late low barrier, then the current generation's data", []Record{bar(0, 2), bar(1, 1), rec(2, 2, "b", 0)}, false},
		{"near miss: a rollout marker between a generation's records", []Record{bar(0, 1), rec(1, 1, "b", 0), {Offset: 2, Marker: true}, rec(3, 1, "b", 1)}, false},
		{"an unstamped record that is no rollout marker", []Record{bar(0, 1), {Offset: 1}}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := len(NoStaleWrite(c.recs)) > 0; got != c.want {
				t.Fatalf("violations %v, want some: %v", NoStaleWrite(c.recs), c.want)
			}
		})
	}
}

// TestFM94_AReaderThatReadNothingFindsEveryAnswerLost: a read_committed
// reader that was given nothing (misconfigured, or stopped at offset 0)
// leaves no committed answer unchecked: each is a lost write, and the
// committed records it was not given are short reads. Without the
// partition's end the history judged only offsets up to the highest one
// read, none here, and passed.
func TestFM94_AReaderThatReadNothingFindsEveryAnswerLost(t *testing.T) {
	t.Parallel()
	log, _ := historyLog(t, "B1", "C", "D1:b1", "C", "D1:b2", "A")
	h := CheckHistory(log, nil, []Op{op("b1", 1, AnswerCommitted, 2), op("b2", 1, AnswerCommitted, 4)})
	if len(h.LostWrites) != 2 || len(h.ShortReads) != 2 {
		t.Fatalf("lost writes %v, short reads %v; want both answers lost (one at the tail, aborted) and offsets 0 and 2 unread", h.LostWrites, h.ShortReads)
	}
}
