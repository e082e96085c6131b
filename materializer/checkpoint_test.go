package materializer_test

import (
	"fmt"
	"testing"

	"github.com/fencegate/fencegate/internal/pgtest"
	"github.com/fencegate/fencegate/materializer"
)

// cp is a batch's checkpoint record of lease under token, value v.
func cp(lease string, token int64, batch string, seq int, v string) rec {
	return rec{lease: lease, token: token, batch: batch, seq: seq, checkpoint: true, raw: []byte(v)}
}

// checkpointRow renders the lease's checkpoint row ("" when none).
func checkpointRow(t *testing.T, b *testBundle, db *pgtest.DB, lease string) string {
	t.Helper()
	rows, err := db.Pool.Query(b.ctx, `SELECT token, batch_id, "offset", encode(value, 'escape') FROM checkpoints WHERE lease = $1`, lease)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := ""
	for rows.Next() {
		var token, off int64
		var batch, value string
		if err := rows.Scan(&token, &batch, &off, &value); err != nil {
			t.Fatal(err)
		}
		out = fmt.Sprintf("%d/%s/%d/%s", token, batch, off, value)
	}
	return out
}

// TestCheckpointJudgedLikeData: a checkpoint record of the generation in
// force moves the lease's row (verdict checkpoint; never a row of
// accepted_records); one written under an old token after a newer
// barrier is refused as stale with a receipt, one above the fence without
// a barrier as unfenced, and neither moves the row. A later generation's
// moves it again; a rebuild from offset 0 gives the same row.
func TestCheckpointJudgedLikeData(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const lease = "shard:1"
	b.write(1, bar(lease, 1), data(lease, 1, "b1", 0), cp(lease, 1, "b1", 1, "c1"))
	first := b.last(1)
	last := b.write(1, bar(lease, 2),
		cp(lease, 1, "late", 0, "stale"), // the old owner's raw producer, after the new barrier
		cp(lease, 5, "u", 0, "unfenced"))
	m := b.newMaterializer(nil)
	b.runUntil(m, b.db, 1, last)
	if got, want := checkpointRow(t, b, b.db, lease), fmt.Sprintf("1/b1/%d/c1", first); got != want {
		t.Fatalf("checkpoint row %q, want %q (refused checkpoints must not move it)", got, want)
	}
	for q, want := range map[string]int64{
		`SELECT count(*) FROM rejected_records WHERE reason = 'stale' AND batch_id = 'late' AND token = 1`: 1,
		`SELECT count(*) FROM rejected_records WHERE reason = 'unfenced' AND batch_id = 'u' AND token = 5`: 1,
		`SELECT count(*) FROM accepted_records WHERE lease = 'shard:1'`:                                    1,
		`SELECT count(*) FROM rejected_records WHERE reason = 'duplicate'`:                                 0,
		`SELECT count(*) FROM rejected_records WHERE detail LIKE 'checkpoint: token 1 below fence 2%'`:     1,
		`SELECT count(*) FROM rejected_records WHERE detail LIKE 'checkpoint: token 5 above fence 2%'`:     1,
	} {
		if n := count(t, b.db, q); n != want {
			t.Errorf("%s = %d, want %d", q, n, want)
		}
	}
	if c := m.Counts(); c[materializer.Checkpoint] != 1 || c[materializer.Stale] != 1 || c[materializer.Unfenced] != 1 {
		t.Errorf("verdicts %v, want checkpoint 1, stale 1, unfenced 1", c)
	}
	last = b.write(1, data(lease, 2, "b2", 0), cp(lease, 2, "b2", 1, "c2"), cp(lease, 2, "b3", 0, "c3"))
	b.runUntil(b.newMaterializer(nil), b.db, 1, last)
	if got, want := checkpointRow(t, b, b.db, lease), fmt.Sprintf("2/b3/%d/c3", last); got != want {
		t.Fatalf("checkpoint row %q, want %q (the generation in force's latest)", got, want)
	}
	rebuilt := pgtest.New(t)
	b.runUntil(b.newMaterializerOn(rebuilt, nil), rebuilt, 1, last)
	if a, r := snapshot(t, b.db), snapshot(t, rebuilt); a != r {
		t.Fatalf("a rebuild from offset 0 differs:\n%s\nrebuilt:\n%s", a, r)
	}
}

// TestCheckpointNeverKept: in observe, where the ledger keeps a stale
// data record, a stale checkpoint is still refused: a checkpoint is
// fenced state.
func TestCheckpointNeverKept(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const lease = "shard:1"
	last := b.write(1, b.markRec(b.signer, 1, "observe", 1), bar(lease, 2),
		data(lease, 1, "s", 0), cp(lease, 1, "s", 1, "stale"))
	b.runUntil(b.newMaterializer(nil), b.db, 1, last)
	for q, want := range map[string]int64{
		`SELECT count(*) FROM kept_records WHERE verdict = 'stale'`:                 1,
		`SELECT count(*) FROM rejected_records WHERE reason = 'stale' AND seq = 1`:  1,
		`SELECT count(*) FROM checkpoints`:                                          0,
		`SELECT count(*) FROM kept_records WHERE encode(value, 'escape') = 'stale'`: 0,
	} {
		if n := count(t, b.db, q); n != want {
			t.Errorf("%s = %d, want %d", q, n, want)
		}
	}
}
