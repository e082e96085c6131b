package verify

import (
	"fmt"
	"sort"
	"strings"
)

// Answer is what one produce attempt was told, in the three kinds of the
// answer table (docs/api.md).
type Answer int

// The kinds of answer.
const (
	// AnswerUnknown: the batch may or may not be committed.
	AnswerUnknown Answer = iota
	// AnswerCommitted: 200, at Op.Offsets.
	AnswerCommitted
	// AnswerRefused: a definite refusal; nothing of the batch is or will
	// be committed.
	AnswerRefused
)

// Op is one produce attempt of a worker and its answer: the history's
// input, one per attempt, retries included.
type Op struct {
	Lease   string
	Token   int64
	BatchID string
	Answer  Answer
	// Offsets are the batch's offsets when it was answered committed.
	Offsets []int64
	// Records is how many records the attempt sent (0: not known; the
	// batch's seqs must then run from 0 to the highest one committed).
	Records int
}

// History is what CheckHistory found on one partition, in the spirit of
// Jepsen's Kafka workload: every answer and every read checked against
// the partition's whole log.
type History struct {
	Ops, Committed, Refused, Unknown int
	// UnknownLanded counts unknown outcomes whose batch is committed
	// under the token it was sent with (they were commits).
	UnknownLanded int
	// AbortedReads are offsets a read_committed reader was given whose
	// transaction did not commit (aborted, or never ended).
	AbortedReads []int64
	// LostWrites are batches answered committed that are not, every
	// record, at their offsets among the records read. The reader reads
	// to the partition's end (ShortReads holds it to that), so an offset
	// past the last record read is a loss too, not an unchecked answer.
	LostWrites []Op
	// EmptyAcks are answers committed that name no offsets: nothing says
	// where the batch is, so nothing could check it.
	EmptyAcks []Op
	// ShortReads are the offsets of committed records (the log's markers
	// say so) that the read_committed reader was not given: it stopped
	// short of the partition's end, or the records were lost to it. A
	// reader that read nothing would otherwise leave every answer
	// unchecked.
	ShortReads []int64
	// PartialBatches are batches (lease, token, batch) committed in part:
	// some of the records an attempt sent are committed and others are
	// not. A batch is one transaction: it lands whole or not at all,
	// acknowledged or not.
	PartialBatches []string
	// RefusedCommitted are batches answered with a definite refusal any
	// record of which (not only the first) is committed under the token
	// they were sent with, when no other attempt of that batch and token
	// was answered committed or unknown (a retry refused after an attempt
	// that may have landed says nothing of that attempt: the refusal is
	// of the retry).
	RefusedCommitted []Op
	// Duplicates are data records (lease, token, batch, seq) committed
	// more than once: one generation committed one batch twice.
	Duplicates []string
	// Retried counts records (lease, owner, batch, seq) committed under
	// more than one token: a batch retried by a new generation after an
	// unknown outcome. Allowed; the ledger keeps each once.
	Retried int
	// DelayedCommits are the commit-order violations (CommitOrder): a
	// transaction whose commit landed after a later generation's
	// barrier, and the other I2 breaches only the markers show.
	DelayedCommits []Violation
}

// CheckHistory checks the answers ops against log (ReadLog: every record
// and marker) and read (ReadPartition: what a read_committed reader was
// given). read must reach the end of log: take both once the writes have
// ended, read before log, or every committed record read missed is a
// short read.
func CheckHistory(log []LogRecord, read []Record, ops []Op) History {
	h := History{Ops: len(ops), DelayedCommits: CommitOrder(log)}
	committed, _ := transactions(log)
	inTxn := map[int64]bool{}
	landed := map[string]int{}        // lease/token/batch/seq -> times committed
	seqs := map[string]map[int]bool{} // lease/token/batch -> its seqs committed
	tokens := map[string]map[int64]bool{}
	for _, t := range committed {
		for _, r := range t.records {
			inTxn[r.Offset] = true
			if r.Barrier || r.Checkpoint || r.Lease == "" {
				continue
			}
			landed[recordKey(r.Lease, r.Token, r.Batch, r.Seq)]++
			bk := batchKey(r.Lease, r.Token, r.Batch)
			if seqs[bk] == nil {
				seqs[bk] = map[int]bool{}
			}
			seqs[bk][r.Seq] = true
			k := fmt.Sprintf("%s/%s/%s/%d", r.Lease, r.Owner, r.Batch, r.Seq)
			if tokens[k] == nil {
				tokens[k] = map[int64]bool{}
			}
			tokens[k][r.Token] = true
		}
	}
	h.AbortedReads = abortedReads(read, inTxn)
	h.ShortReads = shortReads(committed, read)
	h.Duplicates = duplicates(landed)
	for _, ts := range tokens {
		if len(ts) > 1 {
			h.Retried++
		}
	}
	h.PartialBatches = partial(seqs, sent(ops))
	h.judge(ops, read, seqs)
	return h
}

// judge counts the answers and checks each against what landed: seqs are
// the seqs committed of each batch (lease/token/batch), every one of them
// judged, not only the first.
func (h *History) judge(ops []Op, read []Record, seqs map[string]map[int]bool) {
	byOffset := make(map[int64]Record, len(read))
	for _, r := range read {
		byOffset[r.Offset] = r
	}
	mayHave := map[string]bool{} // a batch and token one of whose attempts may have landed
	for _, op := range ops {
		if op.Answer != AnswerRefused {
			mayHave[batchKey(op.Lease, op.Token, op.BatchID)] = true
		}
	}
	for _, op := range ops {
		key := batchKey(op.Lease, op.Token, op.BatchID)
		in := len(seqs[key]) > 0
		switch op.Answer {
		case AnswerCommitted:
			h.Committed++
			switch {
			case len(op.Offsets) == 0:
				h.EmptyAcks = append(h.EmptyAcks, op)
			case lost(op, byOffset):
				h.LostWrites = append(h.LostWrites, op)
			}
		case AnswerRefused:
			h.Refused++
			if in && !mayHave[key] {
				h.RefusedCommitted = append(h.RefusedCommitted, op)
			}
		default:
			h.Unknown++
			if in {
				h.UnknownLanded++
			}
		}
	}
}

// lost reports whether a batch answered committed is missing from the
// records read at any of its offsets.
func lost(op Op, byOffset map[int64]Record) bool {
	for seq, off := range op.Offsets {
		r, ok := byOffset[off]
		if !ok || r.Barrier || r.Lease != op.Lease || r.Token != op.Token || r.Batch != op.BatchID || r.Seq != seq {
			return true
		}
	}
	return false
}

func recordKey(lease string, token int64, batch string, seq int) string {
	return fmt.Sprintf("%s/%d/%s/%d", lease, token, batch, seq)
}

// sent is, per batch (lease/token/batch), the most records an attempt of
// it sent (absent: not known).
func sent(ops []Op) map[string]int {
	out := map[string]int{}
	for _, op := range ops {
		if op.Records > 0 {
			k := batchKey(op.Lease, op.Token, op.BatchID)
			out[k] = max(out[k], op.Records)
		}
	}
	return out
}

// partial are the batches committed in part, sorted: fewer seqs than
// the attempts sent (or, not known, than the highest seq committed
// implies), or a seq beyond them.
func partial(seqs map[string]map[int]bool, sent map[string]int) []string {
	var out []string
	for k, got := range seqs {
		want := sent[k]
		top := -1
		for seq := range got {
			top = max(top, seq)
		}
		if want == 0 {
			want = top + 1
		}
		if len(got) != want || top >= want {
			out = append(out, fmt.Sprintf("%s: %d of %d records committed", k, len(got), want))
		}
	}
	sort.Strings(out)
	return out
}

// shortReads are the offsets of committed records (not markers) that the
// read_committed reader was not given, in offset order.
func shortReads(committed []committedTxn, read []Record) []int64 {
	given := make(map[int64]bool, len(read))
	for _, r := range read {
		given[r.Offset] = true
	}
	var out []int64
	for _, t := range committed {
		for _, r := range t.records {
			if !given[r.Offset] {
				out = append(out, r.Offset)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// abortedReads are the offsets read whose transaction did not commit.
func abortedReads(read []Record, inTxn map[int64]bool) []int64 {
	var out []int64
	for _, r := range read {
		if !inTxn[r.Offset] {
			out = append(out, r.Offset)
		}
	}
	return out
}

// duplicates are the records committed more than once, sorted.
func duplicates(landed map[string]int) []string {
	var out []string
	for k, n := range landed {
		if n > 1 {
			out = append(out, fmt.Sprintf("%s x%d", k, n))
		}
	}
	sort.Strings(out)
	return out
}

// Violations are the findings that break the answer contract or an
// invariant: aborted reads, short reads, lost writes, acknowledgements
// without offsets, definite refusals committed, batches committed in
// part, duplicates under one token, delayed commits. Retries and unknown
// outcomes that landed are not violations.
func (h History) Violations() []Violation {
	var out []Violation
	for _, off := range h.AbortedReads {
		out = append(out, Violation{"history", off, "read_committed returned a record of a transaction that did not commit"})
	}
	if n := len(h.ShortReads); n > 0 {
		out = append(out, Violation{"history", h.ShortReads[0], fmt.Sprintf("short read: the reader was not given %d committed records (the first at offset %d): it did not read to the partition's end", n, h.ShortReads[0])})
	}
	for _, op := range h.LostWrites {
		out = append(out, Violation{"history", first(op.Offsets), fmt.Sprintf("lost write: %s batch %s (token %d) answered committed, not in the log", op.Lease, op.BatchID, op.Token)})
	}
	for _, op := range h.EmptyAcks {
		out = append(out, Violation{"history", -1, fmt.Sprintf("%s batch %s (token %d) answered committed with no offsets", op.Lease, op.BatchID, op.Token)})
	}
	for _, p := range h.PartialBatches {
		out = append(out, Violation{"history", -1, "batch committed in part: " + p})
	}
	for _, op := range h.RefusedCommitted {
		out = append(out, Violation{"history", -1, fmt.Sprintf("%s batch %s (token %d) answered a definite refusal and is committed", op.Lease, op.BatchID, op.Token)})
	}
	for _, d := range h.Duplicates {
		out = append(out, Violation{"history", -1, "committed more than once by one generation: " + d})
	}
	return append(out, h.DelayedCommits...)
}

func first(offs []int64) int64 {
	if len(offs) == 0 {
		return -1
	}
	return offs[0]
}

// String is the history's one-line summary.
func (h History) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d answers (%d committed, %d refused, %d unknown, %d of them landed); ", h.Ops, h.Committed, h.Refused, h.Unknown, h.UnknownLanded)
	fmt.Fprintf(&b, "aborted reads %d, short reads %d, lost writes %d, acks without offsets %d, definite refusals committed %d, batches committed in part %d, duplicates %d, delayed commits %d; retried under a new generation %d",
		len(h.AbortedReads), len(h.ShortReads), len(h.LostWrites), len(h.EmptyAcks), len(h.RefusedCommitted), len(h.PartialBatches),
		len(h.Duplicates), len(h.DelayedCommits), h.Retried)
	return b.String()
}
