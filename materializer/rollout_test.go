package materializer_test

import (
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/fencegate/fencegate/barrier"
	"github.com/fencegate/fencegate/internal/pgtest"
	"github.com/fencegate/fencegate/materializer"
)

// markRec is a rollout marker of shard:* with state and version, signed
// by signer for partition p of the test topic.
func (b *testBundle) markRec(signer *barrier.Signer, p int32, state string, version int64) rec {
	b.t.Helper()
	v, err := signer.SealMarker(barrier.Marker{Pattern: "shard:*", State: state, Version: version, Topic: b.topic,
		Partition: p, IssuedAt: time.Unix(0, 0).UTC()})
	if err != nil {
		b.t.Fatal(err)
	}
	return rec{bare: true, headers: barrier.MarkerHeaders(), raw: v}
}

// direct is a record a direct client's old binary writes: no stamp.
func direct(value string) rec { return rec{bare: true, raw: []byte(value)} }

// TestFM21_ObserveKeepsWhatEnforcedRefuses: on one partition, a record
// without a stamp is refused before any marker (no marker: enforced);
// after an observe marker it, a stale and an unfenced record are kept in
// kept_records with those verdicts, while a broken stamp is still
// refused; gated keeps too; after an enforced marker the same records are
// refused. A replayed marker, one copied from another partition and a
// forged one are bad_barrier and change nothing. A rebuild from offset 0
// gives the same ledger, kept records included.
func TestFM21_ObserveKeepsWhatEnforcedRefuses(t *testing.T) {
	t.Parallel()
	b := setup(t)
	forger, _ := barrier.NewSigner([]byte("not the barrier key, forged"))
	last := b.write(1,
		bar("shard:1", 2), data("shard:1", 2, "b", 0),
		direct("before"),                               // refused: enforced
		b.markRec(b.signer, 1, "observe", 1),           // observe from here
		direct("observed"), data("shard:1", 1, "s", 0), // kept: malformed, stale
		data("shard:1", 3, "u", 0),                          // kept: unfenced
		rec{bare: true, headers: brokenStamp()},             // refused: broken stamp
		b.markRec(b.signer, 1, "observe", 1),                // replay: bad_barrier
		b.markRec(b.signer, 2, "enforced", 5),               // copied: bad_barrier
		b.markRec(forger, 1, "enforced", 6),                 // forged: bad_barrier
		b.markRec(b.signer, 1, "gated", 2), direct("gated"), // kept
		b.markRec(b.signer, 1, "enforced", 3),           // enforced from here
		direct("enforced"), data("shard:1", 1, "s2", 0), // refused
	)
	m := b.newMaterializer(nil)
	b.runUntil(m, b.db, 1, last)
	for _, c := range []struct {
		q    string
		want int64
	}{
		{`SELECT count(*) FROM kept_records WHERE verdict = 'malformed'`, 2},
		{`SELECT count(*) FROM kept_records WHERE verdict = 'stale' AND lease = 'shard:1' AND token = 1`, 1},
		{`SELECT count(*) FROM kept_records WHERE verdict = 'unfenced'`, 1},
		{`SELECT count(*) FROM kept_records WHERE encode(value, 'escape') IN ('before', 'enforced')`, 0},
		{`SELECT count(*) FROM rejected_records WHERE reason = 'malformed'`, 3},
		{`SELECT count(*) FROM rejected_records WHERE reason = 'stale'`, 1},
		{`SELECT count(*) FROM rejected_records WHERE reason = 'bad_barrier'`, 3},
		{`SELECT count(*) FROM ledger_records WHERE kept IS NULL`, 1},
		{`SELECT count(*) FROM ledger_records WHERE kept IS NOT NULL`, 4},
		{`SELECT version FROM rollout_marks WHERE partition = 1 AND state = 'enforced'`, 3},
	} {
		if n := count(t, b.db, c.q); n != c.want {
			t.Errorf("%s = %d, want %d", c.q, n, c.want)
		}
	}
	kept := m.KeptCounts()
	if kept[materializer.Malformed] != 2 || kept[materializer.Stale] != 1 || kept[materializer.Unfenced] != 1 {
		t.Errorf("kept counts %v, want malformed 2, stale 1, unfenced 1", kept)
	}
	rebuilt := pgtest.New(t)
	b.runUntil(b.newMaterializerOn(rebuilt, nil), rebuilt, 1, last)
	if a, r := snapshot(t, b.db), snapshot(t, rebuilt); a != r {
		t.Fatalf("a rebuild from offset 0 differs:\n%s\nrebuilt:\n%s", a, r)
	}
}

// brokenStamp is a stamp with a lease and nothing else: a broken writer,
// not a direct client, and refused in every rollout state.
func brokenStamp() []kafka.Header {
	return []kafka.Header{{Key: barrier.HeaderLease, Value: []byte("shard:1")}}
}
