package materializer

import (
	"encoding/json"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/fencegate/fencegate/barrier"
)

// stage holds the chunk's data records of the generation in force, in
// offset order, for COPY into the session's stage table (qCreateStage);
// it is the pgx.CopyFromSource of that COPY.
type stage struct {
	rows []stagedRow
	seen map[dedupKey]struct{}
	at   int   // the row Values returns, once Next moved to it
	vals []any // reused for every row
}

type stagedRow struct {
	st  barrier.Stamp
	off int64
	r   *kafka.Message
	// first is false for a record whose dedup key an earlier record of
	// the chunk has: qApplyStaged files it as a duplicate.
	first bool
}

// dedupKey is what makes a data record a duplicate of another (FM26).
type dedupKey struct {
	lease, owner, batch string
	seq                 int
}

func newStage(n int) *stage {
	return &stage{rows: make([]stagedRow, 0, n), seen: make(map[dedupKey]struct{}, n), at: -1,
		vals: make([]any, len(stageColumns))}
}

// add stages the data record r stamped st.
func (s *stage) add(st barrier.Stamp, r *kafka.Message) {
	k := dedupKey{st.Lease, st.Owner, st.Batch, st.Seq}
	_, dup := s.seen[k]
	s.seen[k] = struct{}{}
	s.rows = append(s.rows, stagedRow{st, int64(r.TopicPartition.Offset), r, !dup})
}

func (s *stage) Next() bool {
	s.at++
	return s.at < len(s.rows)
}

// Values are the row's columns in stageColumns' order.
func (s *stage) Values() ([]any, error) {
	row := &s.rows[s.at]
	v := s.vals
	v[0], v[1], v[2], v[3] = row.off, row.st.Token, int32(row.st.Seq), row.first
	v[4], v[5], v[6], v[7] = row.st.Lease, row.st.Owner, row.st.Batch, userHeaders(row.r.Headers)
	v[8], v[9] = row.r.Key, row.r.Value
	return v, nil
}

func (s *stage) Err() error { return nil }

// userHeaders are the record's headers other than fencegate's, as JSON.
func userHeaders(hs []kafka.Header) string {
	var m map[string]string
	for _, h := range hs {
		if barrier.Reserved(h.Key) {
			continue
		}
		if m == nil {
			m = map[string]string{}
		}
		m[h.Key] = string(h.Value)
	}
	if m == nil {
		return "{}"
	}
	raw, _ := json.Marshal(m)
	return string(raw)
}
