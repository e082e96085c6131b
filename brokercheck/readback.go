package brokercheck

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/twmb/franz-go/pkg/kgo"
)

// readBack reads the scratch partition twice, as the materializer does
// (read_committed) and as it is (read_uncommitted, control records
// kept), and judges what the fence checks wrote.
func (r *fenceRun) readBack(ctx context.Context) error {
	last := r.lastCommitted()
	if last < 0 {
		return r.fail(checkCommitted, r.topic, "read back", fmt.Errorf("no committed batch was acknowledged"))
	}
	first := r.batches[0].offsets[0]
	committed, err := r.read(ctx, first, kgo.ReadCommitted(), func(rec logRecord) bool { return rec.offset >= last })
	if err != nil {
		return r.fail(checkCommitted, r.topic, "read_committed", err)
	}
	log, err := r.read(ctx, first, kgo.ReadUncommitted(), func(rec logRecord) bool { return rec.offset > last && rec.marker != "" })
	if err != nil {
		return r.fail(checkMarkers, r.topic, "read_uncommitted", err)
	}
	r.judge(committed, log)
	return nil
}

// judge applies the read-back checks to what read_committed returned and
// to what the partition holds.
func (r *fenceRun) judge(committed, log []logRecord) {
	data := dataRecords(committed)
	r.judgeAborted(data)
	r.judgeCommitted(data)
	r.judgeMarkers(log)
}

// logRecord is one record as read back: a data record or a marker.
type logRecord struct {
	offset     int64
	producerID int64
	// marker is "COMMIT" or "ABORT" for a control record ("" for data).
	marker     string
	key, value []byte
	headers    []kgo.RecordHeader
}

func toLogRecord(rec *kgo.Record) logRecord {
	lr := logRecord{offset: rec.Offset, producerID: rec.ProducerID, key: rec.Key, value: rec.Value, headers: rec.Headers}
	if rec.Attrs.IsControl() {
		lr.marker = markerType(rec.Key)
	}
	return lr
}

// lastCommitted is the offset of the last acknowledged record of a
// committed batch (-1: none).
func (r *fenceRun) lastCommitted() int64 {
	last := int64(-1)
	for _, b := range r.batches {
		if b.commit && len(b.offsets) > 0 {
			last = max(last, b.offsets[len(b.offsets)-1])
		}
	}
	return last
}

// read consumes partition 0 of the scratch topic from offset first (the
// run's first record: a --scratch-topic holds earlier runs' too) at level,
// control records kept, until done says the last record needed has come
// (or a step's time has passed).
func (r *fenceRun) read(ctx context.Context, first int64, level kgo.IsolationLevel, done func(logRecord) bool) ([]logRecord, error) {
	var out []logRecord
	err := r.withClient(ctx, func(ctx context.Context, cl *kgo.Client) error {
		for {
			fs := cl.PollFetches(ctx)
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("%d records read, the last one needed not among them: %w", len(out), err)
			}
			if errs := fs.Errors(); len(errs) > 0 {
				return errs[0].Err
			}
			for _, rec := range fs.Records() {
				if rec.Offset < first {
					continue
				}
				lr := toLogRecord(rec)
				out = append(out, lr)
				if done(lr) {
					return nil
				}
			}
		}
	}, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{r.topic: {0: kgo.NewOffset().At(first)}}),
		kgo.FetchIsolationLevel(level), kgo.KeepControlRecords(), kgo.FetchMaxWait(200*time.Millisecond))
	return out, err
}

func dataRecords(recs []logRecord) []logRecord {
	var out []logRecord
	for _, rec := range recs {
		if rec.marker == "" {
			out = append(out, rec)
		}
	}
	return out
}

// labelOf is the batch label a record carries in its first header.
func labelOf(rec logRecord) string {
	for _, h := range rec.headers {
		if h.Key == "fencegate-verify-batch" {
			return string(h.Value)
		}
	}
	return ""
}

// judgeAborted: no record of a transaction that must not commit (the
// older producers' O, O2 and a Z the broker took) is read_committed.
func (r *fenceRun) judgeAborted(committed []logRecord) {
	var seen []string
	for _, rec := range committed {
		if l := labelOf(rec); l == "O" || l == "O2" || l == "Z" {
			seen = append(seen, fmt.Sprintf("%s at offset %d", l, rec.offset))
		}
	}
	open := r.offsetsOf("O", "O2")
	if len(seen) > 0 {
		r.set(checkAborted, Fail, r.topic, "read_committed returns the older producers' records: "+strings.Join(seen, ", "))
		return
	}
	r.set(checkAborted, Pass, r.topic, "the older producers' open transactions ("+open+") are not read_committed")
}

// offsetsOf describes where the batches labelled labels landed.
func (r *fenceRun) offsetsOf(labels ...string) string {
	var parts []string
	for _, b := range r.batches {
		for _, l := range labels {
			if b.label == l && len(b.offsets) > 0 {
				parts = append(parts, fmt.Sprintf("%s at %d-%d", l, b.offsets[0], b.offsets[len(b.offsets)-1]))
			}
		}
	}
	return strings.Join(parts, ", ")
}

// judgeCommitted: read_committed returns exactly the committed batches'
// records, in the order sent, keys, values and headers byte-exact.
func (r *fenceRun) judgeCommitted(committed []logRecord) {
	var want []*batch
	n := 0
	for _, b := range r.batches {
		if b.commit {
			want = append(want, b)
			n += len(b.records)
		}
	}
	i := 0
	for _, b := range want {
		for j, m := range b.records {
			if i >= len(committed) {
				r.set(checkCommitted, Fail, r.topic, fmt.Sprintf("read_committed ends after %d records; %d committed", i, n))
				return
			}
			got := committed[i]
			if why := differs(got, m.Key, m.Value, m.Headers); why != "" || got.offset != b.offsets[j] {
				r.set(checkCommitted, Fail, r.topic, fmt.Sprintf("record %d read_committed (offset %d, %s): %s; want %s record %d at offset %d",
					i, got.offset, labelOf(got), why, b.label, j, b.offsets[j]))
				return
			}
			i++
		}
	}
	if i != len(committed) {
		got := committed[i]
		r.set(checkCommitted, Fail, r.topic, fmt.Sprintf("read_committed returns more than was committed: %s at offset %d", labelOf(got), got.offset))
		return
	}
	r.set(checkCommitted, Pass, r.topic, fmt.Sprintf("%d records of the committed batches (%s) read_committed in order, keys, values and "+
		"headers byte-exact; the aborted batch (%s) absent", n, r.offsetsOf("C0", "C1", "C2"), r.offsetsOf("A1")))
}

// differs says how rec differs from the record sent, "" when it does not.
func differs(rec logRecord, key, value []byte, headers []kafka.Header) string {
	switch {
	case !bytes.Equal(rec.key, key):
		return fmt.Sprintf("key %q", rec.key)
	case !bytes.Equal(rec.value, value):
		return fmt.Sprintf("value %q", rec.value)
	case len(rec.headers) != len(headers):
		return fmt.Sprintf("%d headers", len(rec.headers))
	}
	for i, h := range headers {
		if rec.headers[i].Key != h.Key || !bytes.Equal(rec.headers[i].Value, h.Value) {
			return fmt.Sprintf("header %d %q=%q", i, rec.headers[i].Key, rec.headers[i].Value)
		}
	}
	return ""
}

// Control record types (the key's second int16).
const (
	markerAbort  = 0
	markerCommit = 1
)

// judgeMarkers: each batch's records are followed, in the partition, by a
// marker of the producer that wrote them: COMMIT for a committed batch,
// ABORT for the others.
func (r *fenceRun) judgeMarkers(log []logRecord) {
	byOffset := map[int64]logRecord{}
	for _, rec := range log {
		byOffset[rec.offset] = rec
	}
	var found []string
	for _, b := range r.batches {
		if len(b.offsets) == 0 {
			continue
		}
		lastRec, ok := byOffset[b.offsets[len(b.offsets)-1]]
		if !ok {
			r.set(checkMarkers, Fail, r.topic, fmt.Sprintf("%s's record at offset %d is not in the log", b.label, b.offsets[len(b.offsets)-1]))
			return
		}
		kind, at := nextMarker(log, lastRec)
		want := "ABORT"
		if b.commit {
			want = "COMMIT"
		}
		if kind != want {
			r.set(checkMarkers, Fail, r.topic, fmt.Sprintf("%s (producer id %d, offsets %d-%d) is followed by %s, want %s",
				b.label, lastRec.producerID, b.offsets[0], lastRec.offset, kind, want))
			return
		}
		found = append(found, fmt.Sprintf("%s %s@%d", b.label, kind, at))
	}
	r.set(checkMarkers, Pass, r.topic, "each transaction ends with its producer's marker: "+strings.Join(found, ", "))
}

// nextMarker returns the type and offset of the first control record
// after rec of rec's producer ("none" when there is none).
func nextMarker(log []logRecord, rec logRecord) (string, int64) {
	for _, m := range log {
		if m.offset > rec.offset && m.marker != "" && m.producerID == rec.producerID {
			return m.marker, m.offset
		}
	}
	return "none", -1
}

// markerType reads a control record's key: version, then type.
func markerType(key []byte) string {
	if len(key) < 4 {
		return "a malformed marker"
	}
	switch int16(key[2])<<8 | int16(key[3]) {
	case markerAbort:
		return "ABORT"
	case markerCommit:
		return "COMMIT"
	}
	return "an unknown marker"
}
