package materializer

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/fencegate/fencegate/barrier"
)

// rules is the running state one partition's records are judged against,
// in offset order, whichever sink keeps the outcome (the Postgres ledger
// or the trusted topic): each lease's fence on the partition and each
// pattern's rollout mark. Both sinks judge through rule, so a rule lives
// in one place; only the dedup memory is the sink's (docs/design.md,
// "The trusted topic").
type rules struct {
	m      *Materializer
	key    partitionKey
	fences map[string]int64
	marks  map[string]mark // pattern -> rollout state on this partition
}

// ruling is one record's verdict before a sink keeps it. Accepted means
// "of the generation in force": the sink's dedup memory decides whether
// it is new or a Duplicate.
type ruling struct {
	r      *kafka.Message
	st     barrier.Stamp
	v      Verdict
	kept   Verdict // with Kept: the verdict the record would have had
	detail string  // why refused or kept
	grant  barrier.Grant
	marker barrier.Marker
	// headers are the record's own headers as JSON (userHeaders), with
	// Accepted and Kept.
	headers string
}

// offset is the record's offset.
func (u ruling) offset() int64 { return int64(u.r.TopicPartition.Offset) }

// rule judges one record against the running fence and marks, and moves
// them for a barrier or a marker that passes.
func (j *rules) rule(s stamped) ruling {
	r, st := s.r, s.st
	if barrier.IsMarker(r.Headers) {
		return j.marker(r)
	}
	if s.err != nil {
		return j.refuseOrKeep(ruling{r: r, st: st, v: Malformed, detail: s.err.Error()}, j.keepsUnstamped(r))
	}
	fence := j.fences[st.Lease]
	if st.Barrier {
		return j.barrier(r, st, fence)
	}
	if st.Checkpoint {
		return j.checkpoint(r, st, fence)
	}
	switch barrier.Judge(fence, st.Token) {
	case barrier.Stale:
		return j.refuseOrKeep(ruling{r: r, st: st, v: Stale, detail: fmt.Sprintf("token %d below fence %d", st.Token, fence)}, j.keepsLease(st.Lease))
	case barrier.Unfenced:
		return j.refuseOrKeep(ruling{r: r, st: st, v: Unfenced, detail: fmt.Sprintf("token %d above fence %d without a barrier", st.Token, fence)}, j.keepsLease(st.Lease))
	}
	headers, err := userHeaders(r.Headers)
	if err != nil {
		return ruling{r: r, st: st, v: Malformed, detail: err.Error()}
	}
	return ruling{r: r, st: st, v: Accepted, headers: headers}
}

// checkpoint judges a batch's checkpoint record like data, but a stale or
// unfenced one is refused in every rollout state (a checkpoint is fenced
// state: never kept). It takes no part in dedup.
func (j *rules) checkpoint(r *kafka.Message, st barrier.Stamp, fence int64) ruling {
	switch barrier.Judge(fence, st.Token) {
	case barrier.Stale:
		return ruling{r: r, st: st, v: Stale, detail: fmt.Sprintf("checkpoint: token %d below fence %d", st.Token, fence)}
	case barrier.Unfenced:
		return ruling{r: r, st: st, v: Unfenced, detail: fmt.Sprintf("checkpoint: token %d above fence %d without a barrier", st.Token, fence)}
	}
	return ruling{r: r, st: st, v: Checkpoint}
}

// barrier verifies a barrier and advances the fence, or refuses it.
func (j *rules) barrier(r *kafka.Message, st barrier.Stamp, fence int64) ruling {
	g, why := j.m.checkBarrier(j.key, st, r.Value)
	if why == "" && g.Token <= fence {
		why = fmt.Sprintf("token %d not above fence %d", g.Token, fence)
	}
	if why != "" {
		return ruling{r: r, st: st, v: BadBarrier, detail: why}
	}
	j.fences[st.Lease] = g.Token
	return ruling{r: r, st: st, v: Barrier, grant: g}
}

// marker verifies a rollout marker and installs its state on this
// partition, or refuses it as bad_barrier: it must verify, sign this
// partition, name a route of this topic and a state, and carry a version
// above the partition's current one for its pattern.
func (j *rules) marker(r *kafka.Message) ruling {
	m, why := j.m.checkMarker(j.key, r.Value)
	if why == "" && m.Version <= j.marks[m.Pattern].version {
		why = fmt.Sprintf("rollout marker version %d not above %d", m.Version, j.marks[m.Pattern].version)
	}
	if why != "" {
		return ruling{r: r, st: barrier.Stamp{Seq: -1}, v: BadBarrier, detail: why}
	}
	j.marks[m.Pattern] = mark{state: m.State, version: m.Version}
	return ruling{r: r, st: barrier.Stamp{Seq: -1}, v: Marker, marker: m}
}

// refuseOrKeep is u, refused, or kept when keep says so and the ledger
// can keep its headers exactly.
func (j *rules) refuseOrKeep(u ruling, keep bool) ruling {
	if !keep {
		return u
	}
	headers, err := userHeaders(u.r.Headers)
	if err != nil {
		return ruling{r: u.r, st: u.st, v: Malformed, detail: err.Error()}
	}
	return ruling{r: u.r, st: u.st, v: Kept, kept: u.v, detail: u.detail, headers: headers}
}

// keepsLease says whether a refused record of lease is kept: its route's
// pattern is in observe or gated on this partition.
func (j *rules) keepsLease(lease string) bool {
	pattern, ok := j.m.router.PatternOf(lease)
	return ok && j.marks[pattern].keeps()
}

// keepsUnstamped says whether a malformed record is kept: it carries no
// fencegate header at all (a direct client's record, not a broken stamp)
// and a pattern of this partition is in observe or gated. A topic shared
// by several patterns keeps such a record if any of them does: an
// unstamped record names no lease.
func (j *rules) keepsUnstamped(r *kafka.Message) bool {
	if !barrier.Unstamped(r.Headers) {
		return false
	}
	for _, k := range j.marks {
		if k.keeps() {
			return true
		}
	}
	return false
}

func newRules(m *Materializer, key partitionKey) rules {
	return rules{m: m, key: key, fences: map[string]int64{}, marks: map[string]mark{}}
}

// headerNUL says why a record's own headers hold a NUL, which the
// ledger's jsonb refuses (SQLSTATE 22P05, FM30), or "". One rule for
// every place that must refuse it before Postgres would: the ledger
// without values (FM72) and the trusted topic.
func headerNUL(hs []kafka.Header) string {
	for _, h := range hs {
		if !barrier.Reserved(h.Key) && (strings.IndexByte(h.Key, 0) >= 0 || bytes.IndexByte(h.Value, 0) >= 0) {
			return fmt.Sprintf("header %.64q holds a NUL, which the ledger cannot keep", h.Key)
		}
	}
	return ""
}
