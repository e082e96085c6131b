package materializer

import (
	"fmt"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/barrier"
)

// The rollout states as markers carry them (leasestore.RolloutState's
// values; the materializer does not import the lease store).
const (
	stateObserve  = "observe"
	stateGated    = "gated"
	stateEnforced = "enforced"
)

// mark is a pattern's rollout state on one partition, as its markers set
// it so far. A pattern with no marker is enforced: the ledger refuses
// what it always refused (FM21).
type mark struct {
	state   string
	version int64
}

// keeps says whether the state lets the ledger keep what it would refuse.
func (k mark) keeps() bool { return k.state == stateObserve || k.state == stateGated }

// readMarks reads qLockMarks' rows into a.marks.
func (a *applyTx) readMarks(res pgx.BatchResults) error {
	rows, err := res.Query()
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var pattern string
		var k mark
		if err := rows.Scan(&pattern, &k.state, &k.version); err != nil {
			return err
		}
		a.marks[pattern] = k
	}
	if err := rows.Err(); err != nil {
		return err
	}
	return a.m.afterStatement()
}

// keepsLease says whether a refused record of lease is kept: its route's
// pattern is in observe or gated on this partition.
func (a *applyTx) keepsLease(lease string) bool {
	pattern, ok := a.m.router.PatternOf(lease)
	return ok && a.marks[pattern].keeps()
}

// keepsUnstamped says whether a malformed record is kept: it carries no
// fencegate header at all (a direct client's record, not a broken stamp)
// and a pattern of this partition is in observe or gated. A topic shared
// by several patterns keeps such a record if any of them does: an
// unstamped record names no lease.
func (a *applyTx) keepsUnstamped(r *kafka.Message) bool {
	if !barrier.Unstamped(r.Headers) {
		return false
	}
	for _, k := range a.marks {
		if k.keeps() {
			return true
		}
	}
	return false
}

// refuseOrKeep rejects a record with verdict v, or keeps it when keep says so
// and the ledger can keep its headers exactly.
func (a *applyTx) refuseOrKeep(r *kafka.Message, st barrier.Stamp, v Verdict, detail string, keep bool) {
	if !keep {
		a.reject(r, st, v, detail)
		return
	}
	headers, err := userHeaders(r.Headers)
	if err != nil {
		a.reject(r, st, Malformed, err.Error())
		return
	}
	off := int64(r.TopicPartition.Offset)
	a.queue(judged{v: Kept, lease: st.Lease, token: st.Token, offset: off, kept: v}, qKeep,
		a.key.topic, a.key.partition, off, string(v), detail, text(st.Lease), nullableInt(st.Token),
		text(st.Owner), text(st.Batch), nullableSeq(st.Seq), r.Key, r.Value, headers)
}

// marker verifies a rollout marker and installs its state on this
// partition, or rejects it as bad_barrier: it must verify, sign this
// partition, name a route of this topic and a state, and carry a version
// above the partition's current one for its pattern.
func (a *applyTx) marker(r *kafka.Message) {
	off := int64(r.TopicPartition.Offset)
	m, why := a.m.checkMarker(a.key, r.Value)
	if why == "" && m.Version <= a.marks[m.Pattern].version {
		why = fmt.Sprintf("rollout marker version %d not above %d", m.Version, a.marks[m.Pattern].version)
	}
	if why != "" {
		a.reject(r, barrier.Stamp{Seq: -1}, BadBarrier, why)
		return
	}
	a.marks[m.Pattern] = mark{state: m.State, version: m.Version}
	a.queue(judged{v: Marker, offset: off}, qAdvanceMark, a.key.topic, a.key.partition, m.Pattern, m.State, m.Version, off)
}

// checkMarker opens a marker and says why it is refused, or "".
func (m *Materializer) checkMarker(key partitionKey, value []byte) (barrier.Marker, string) {
	mk, err := m.signer.OpenMarker(value)
	if err != nil {
		return mk, err.Error()
	}
	if mk.Topic != key.topic || mk.Partition != key.partition {
		return mk, fmt.Sprintf("rollout marker signed for %s/%d, read from %s/%d", mk.Topic, mk.Partition, key.topic, key.partition)
	}
	switch mk.State {
	case stateObserve, stateGated, stateEnforced:
	default:
		return mk, fmt.Sprintf("rollout marker state %q is not observe, gated or enforced", mk.State)
	}
	for _, rt := range m.router.Routes() {
		if rt.Pattern == mk.Pattern && rt.Topic == key.topic {
			return mk, ""
		}
	}
	return mk, fmt.Sprintf("rollout marker pattern %q is no route of topic %s", mk.Pattern, key.topic)
}
