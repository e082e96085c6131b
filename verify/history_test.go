package verify

import (
	"fmt"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/barrier"
)

// historyLog builds a log from entries, one per offset: "B<token>" a
// barrier, "D<token>:<batch>" a batch's only record ("D<token>:<batch>:<seq>"
// its record seq), "C" and "A" a commit
// or abort marker; producer 7, epoch token-1 (lease "l", owner "o"). read
// is what a read_committed reader was given at those offsets.
func historyLog(t *testing.T, entries ...string) (log []LogRecord, read []Record) {
	t.Helper()
	epoch := int16(0)
	for off, e := range entries {
		r := LogRecord{Offset: int64(off), Transactional: true, ProducerID: 7}
		switch e[0] {
		case 'B':
			var token int64
			mustScan(t, e[1:], "%d", &token)
			epoch = int16(token - 1)
			r.Stamp = barrier.Stamp{Lease: "l", Token: token, Owner: "o", Barrier: true}
		case 'D':
			var token int64
			var batch string
			seq := 0
			parts := strings.Split(e[1:], ":")
			mustScan(t, parts[0]+" "+parts[1], "%d %s", &token, &batch)
			if len(parts) > 2 {
				mustScan(t, parts[2], "%d", &seq)
			}
			r.Stamp = barrier.Stamp{Lease: "l", Token: token, Owner: "o", Batch: batch, Seq: seq}
		case 'C', 'A':
			r.Control, r.Commit = true, e[0] == 'C'
		}
		r.ProducerEpoch = epoch
		log = append(log, r)
	}
	for _, tx := range func() []committedTxn { c, _ := transactions(log); return c }() {
		for _, r := range tx.records {
			read = append(read, Record{Offset: r.Offset, Stamp: r.Stamp})
		}
	}
	return log, read
}

func op(batch string, token int64, a Answer, offs ...int64) Op {
	return Op{Lease: "l", Token: token, BatchID: batch, Answer: a, Offsets: offs}
}

// TestCheckHistory: each finding of the history checker on the smallest
// log that shows it, and none on the logs that break nothing.
func TestCheckHistory(t *testing.T) {
	cases := []struct {
		name    string
		entries []string
		extra   []int64 // offsets the reader was also given (aborted reads)
		drop    []int64 // offsets the reader was not given (lost writes)
		ops     []Op
		want    string // substring of a violation, "" for none
		summary string // substring of String()
	}{
		{"clean", []string{"B1", "C", "D1:b1", "C"}, nil, nil, []Op{op("b1", 1, AnswerCommitted, 2)}, "", "1 committed"},
		{"unknown that landed", []string{"B1", "C", "D1:b1", "C"}, nil, nil, []Op{op("b1", 1, AnswerUnknown)}, "", "1 of them landed"},
		{"retried under a new generation", []string{"B1", "C", "D1:b1", "C", "B2", "C", "D2:b1", "C"}, nil, nil,
			[]Op{op("b1", 1, AnswerUnknown), op("b1", 2, AnswerCommitted, 6)}, "", "retried under a new generation 1"},
		{"aborted read", []string{"B1", "C", "D1:b1", "A"}, []int64{2}, nil, nil, "transaction that did not commit", "aborted reads 1"},
		{"lost write", []string{"B1", "C", "D1:b1", "C", "D1:b2", "C"}, nil, []int64{2}, []Op{op("b1", 1, AnswerCommitted, 2)}, "lost write", "lost writes 1"},
		{"definite refusal committed", []string{"B1", "C", "D1:b1", "C"}, nil, nil, []Op{op("b1", 1, AnswerRefused)}, "answered a definite refusal", ""},
		{"a retry refused after an attempt that landed", []string{"B1", "C", "D1:b1", "C"}, nil, nil,
			[]Op{op("b1", 1, AnswerUnknown), op("b1", 1, AnswerRefused)}, "", "1 of them landed"},
		{"duplicate in one generation", []string{"B1", "C", "D1:b1", "C", "D1:b1", "C"}, nil, nil, nil, "committed more than once", "duplicates 1"},
		{"delayed commit", []string{"B1", "C", "D1:b1", "B2", "C", "C"}, nil, nil, nil, "after the barrier of token 2", "delayed commits 1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			log, read := historyLog(t, c.entries...)
			read = adjust(read, log, c.extra, c.drop)
			h := CheckHistory(log, read, c.ops)
			vs := fmt.Sprint(h.Violations())
			switch {
			case c.want == "" && len(h.Violations()) > 0:
				t.Fatalf("violations %s, want none", vs)
			case c.want != "" && !strings.Contains(vs, c.want):
				t.Fatalf("violations %s, want one saying %q", vs, c.want)
			case !strings.Contains(h.String(), c.summary):
				t.Fatalf("summary %q, want it to say %q", h, c.summary)
			}
		})
	}
}

// adjust adds the records of log at extra to read and removes those at
// drop.
func adjust(read []Record, log []LogRecord, extra, drop []int64) []Record {
	var out []Record
	for _, r := range read {
		keep := true
		for _, d := range drop {
			keep = keep && r.Offset != d
		}
		if keep {
			out = append(out, r)
		}
	}
	for _, off := range extra {
		out = append(out, Record{Offset: off, Stamp: log[off].Stamp})
	}
	return out
}
