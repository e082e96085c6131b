package materializer

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
)

// DefaultDedupWindow is TrustedConfig.DedupWindow's default: the batches
// per lease and partition whose keys the trusted topic remembers, as many
// as a gateway session remembers itself (docs/design.md, "The trusted
// topic").
const DefaultDedupWindow = 1024

// The kinds of state records, the first element of a state key.
const (
	stateFence      = "fence"
	stateMark       = "mark"
	stateCheckpoint = "checkpoint"
	stateBatch      = "batch"
)

// batchKey names one batch of one lease in the dedup window.
type batchKey struct{ owner, batch string }

// span is seqs lo to hi, both included.
type span struct{ Lo, Hi int }

// seenBatch is what the window remembers of a batch: the source offset
// of its first record (the window's order) and the seqs delivered.
type seenBatch struct {
	At   int64  `json:"at"`
	Seqs []span `json:"seqs"`
}

// has reports whether seq was delivered.
func (b *seenBatch) has(seq int) bool {
	for _, s := range b.Seqs {
		if seq >= s.Lo && seq <= s.Hi {
			return true
		}
	}
	return false
}

// add records seq, extending the last span when seq follows it (a batch's
// seqs arrive 0, 1, 2, ...).
func (b *seenBatch) add(seq int) {
	if n := len(b.Seqs); n > 0 && b.Seqs[n-1].Hi+1 == seq {
		b.Seqs[n-1].Hi = seq
		return
	}
	b.Seqs = append(b.Seqs, span{seq, seq})
}

// leaseWindow is one lease's dedup window on one partition: at most size
// batches, the oldest pushed out first.
type leaseWindow struct {
	batches map[batchKey]*seenBatch
	order   []batchKey // by At, oldest first
}

// checkpointState is a lease's latest checkpoint of the generation in
// force, as the ledger's checkpoints row.
type checkpointState struct {
	Token  int64  `json:"token"`
	Owner  string `json:"owner"`
	Batch  string `json:"batch"`
	Offset int64  `json:"offset"`
	Value  []byte `json:"value"`
	// Type is barrier.Stamp.CheckpointType ("" for BINARY, and in the
	// state records written before types were kept).
	Type string `json:"type,omitempty"`
}

// fenceState is a lease's fence on the partition.
type fenceState struct {
	Token      int64  `json:"token"`
	Owner      string `json:"owner"`
	ProducerID int64  `json:"producer_id"`
	Epoch      int16  `json:"epoch"`
	Offset     int64  `json:"offset"`
}

// markState is a pattern's rollout mark on the partition.
type markState struct {
	State   string `json:"state"`
	Version int64  `json:"version"`
}

// partState is the trusted sink's judging state of one input partition:
// the rules (fences and marks), the latest checkpoints and the dedup
// window. It is restored from the state topic and changed only by the
// chunk transactions of the partition's one producer.
type partState struct {
	rules
	window      int
	leases      map[string]*leaseWindow
	checkpoints map[string]checkpointState
	// dirty collects the state records a chunk changed, by key; a nil
	// value is a tombstone.
	dirty map[string][]byte
	// fenceRows are the fences as the state topic has them; changed is
	// what a chunk changed of them and of the checkpoints (the mirror's
	// part).
	fenceRows map[string]fenceState
	changed   mirrored
}

func newPartState(m *Materializer, key partitionKey, window int) *partState {
	return &partState{rules: newRules(m, key), window: window, leases: map[string]*leaseWindow{},
		checkpoints: map[string]checkpointState{}, dirty: map[string][]byte{}, fenceRows: map[string]fenceState{}}
}

// stateKey encodes a state record's key: a JSON array, unambiguous for
// any lease, owner or batch id.
func stateKey(parts ...string) string {
	raw, _ := json.Marshal(parts)
	return string(raw)
}

// set marks a state record changed.
func (s *partState) set(key string, v any) {
	raw, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("materializer: state value %T: %v", v, err)) // the types above always encode
	}
	s.dirty[key] = raw
}

// seen reports whether the dedup window holds the record's key, and
// records it if not, pushing the lease's oldest batch out beyond the
// window.
func (s *partState) seen(lease, owner, batch string, seq int, at int64) bool {
	w := s.leases[lease]
	if w == nil {
		w = &leaseWindow{batches: map[batchKey]*seenBatch{}}
		s.leases[lease] = w
	}
	k := batchKey{owner, batch}
	b := w.batches[k]
	if b != nil && b.has(seq) {
		return true
	}
	if b == nil {
		b = &seenBatch{At: at}
		w.batches[k] = b
		w.order = append(w.order, k)
	}
	b.add(seq)
	s.set(stateKey(stateBatch, lease, owner, batch), b)
	for len(w.order) > s.window {
		old := w.order[0]
		w.order = w.order[1:]
		delete(w.batches, old)
		s.dirty[stateKey(stateBatch, lease, old.owner, old.batch)] = nil
	}
	return false
}

// restore applies one state record read from the state topic (a nil
// value deletes).
func (s *partState) restore(key, value []byte) error {
	var parts []string
	if err := json.Unmarshal(key, &parts); err != nil || len(parts) < 2 {
		return fmt.Errorf("state key %q: not a state key", key)
	}
	switch {
	case parts[0] == stateFence && len(parts) == 2:
		var f fenceState
		if value == nil {
			delete(s.fences, parts[1])
			return nil
		}
		if err := json.Unmarshal(value, &f); err != nil {
			return fmt.Errorf("state %s: %w", key, err)
		}
		s.fences[parts[1]] = f.Token
		s.fenceRows[parts[1]] = f
	case parts[0] == stateMark && len(parts) == 2:
		var k markState
		if err := json.Unmarshal(value, &k); err != nil {
			return fmt.Errorf("state %s: %w", key, err)
		}
		s.marks[parts[1]] = mark{state: k.State, version: k.Version}
	case parts[0] == stateCheckpoint && len(parts) == 2:
		var c checkpointState
		if err := json.Unmarshal(value, &c); err != nil {
			return fmt.Errorf("state %s: %w", key, err)
		}
		s.checkpoints[parts[1]] = c
	case parts[0] == stateBatch && len(parts) == 4:
		return s.restoreBatch(parts[1], batchKey{parts[2], parts[3]}, value)
	default:
		return fmt.Errorf("state key %s: unknown kind", key)
	}
	return nil
}

func (s *partState) restoreBatch(lease string, k batchKey, value []byte) error {
	w := s.leases[lease]
	if w == nil {
		w = &leaseWindow{batches: map[batchKey]*seenBatch{}}
		s.leases[lease] = w
	}
	if value == nil {
		delete(w.batches, k)
		return nil
	}
	var b seenBatch
	if err := json.Unmarshal(value, &b); err != nil {
		return fmt.Errorf("state batch %q/%q/%q: %w", lease, k.owner, k.batch, err)
	}
	w.batches[k] = &b
	return nil
}

// all is the whole state the mirror keeps.
func (s *partState) all() mirrored {
	return mirrored{fences: s.fenceRows, checkpoints: s.checkpoints}
}

// restored orders each lease's window by source offset, once every state
// record is read.
func (s *partState) restored() {
	for _, w := range s.leases {
		w.order = w.order[:0]
		for k := range w.batches {
			w.order = append(w.order, k)
		}
		slices.SortFunc(w.order, func(a, b batchKey) int {
			return cmp.Compare(w.batches[a].At, w.batches[b].At)
		})
	}
}
