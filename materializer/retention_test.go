package materializer_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/fencegate/fencegate/barrier"
	"github.com/fencegate/fencegate/internal/pgtest"
	"github.com/fencegate/fencegate/internal/telemetry"
	"github.com/fencegate/fencegate/materializer"
)

// dbNow is the ledger's clock, the one accepted_at is on.
func dbNow(t *testing.T, db *pgtest.DB) time.Time {
	t.Helper()
	var now time.Time
	if err := db.Pool.QueryRow(t.Context(), `SELECT clock_timestamp()`).Scan(&now); err != nil {
		t.Fatal(err)
	}
	return now
}

// at is a clock stopped at now.
func at(now time.Time) func() time.Time { return func() time.Time { return now } }

// TestFM71_PruneKeepsTheDedupWindow (FM71): a prune never deletes a dedup key
// younger than the ledger's retention, so a retry applied within the
// window of its key's first acceptance is still filed as a duplicate. A
// batch accepted before the cutoff is pruned, one accepted after it is
// kept, and its retry gets a duplicate receipt and no second row; a
// prune asked for less than the retention is refused and deletes
// nothing.
func TestFM71_PruneKeepsTheDedupWindow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const lease, window = "shard:1", time.Hour
	last := b.write(1, bar(lease, 1), data(lease, 1, "old", 0), data(lease, 1, "old", 1))
	b.runUntil(b.newMaterializer(nil), b.db, 1, last)
	between := dbNow(t, b.db) // after old's rows, before young's
	last = b.write(1, data(lease, 1, "young", 0))
	b.runUntil(b.newMaterializer(nil), b.db, 1, last)
	if err := materializer.SetRetention(b.ctx, b.db.Pool, window); err != nil {
		t.Fatal(err)
	}
	later := at(between.Add(window)) // old is past the window, young inside it
	if _, err := materializer.Prune(b.ctx, b.db.Pool, materializer.PruneConfig{OlderThan: window / 2, Now: later}); !errors.Is(err, materializer.ErrInsideWindow) {
		t.Fatalf("prune of rows older than half the retention: %v, want ErrInsideWindow", err)
	}
	if n := count(t, b.db, `SELECT count(*) FROM accepted_records`); n != 3 {
		t.Fatalf("a refused prune left %d accepted rows, want 3", n)
	}
	rep, err := materializer.Prune(b.ctx, b.db.Pool, materializer.PruneConfig{Now: later})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Accepted != 2 || rep.OlderThan != window {
		t.Fatalf("prune at the recorded retention: %+v, want old's 2 rows deleted, older than %v", rep, window)
	}
	last = b.write(1, data(lease, 1, "young", 0)) // the retry, inside the window
	b.runUntil(b.newMaterializer(nil), b.db, 1, last)
	if n := count(t, b.db, `SELECT count(*) FROM rejected_records WHERE reason = 'duplicate' AND batch_id = 'young'`); n != 1 {
		t.Errorf("young's retry inside the window got %d duplicate receipts, want 1", n)
	}
	if n := count(t, b.db, `SELECT count(*) FROM accepted_records WHERE batch_id = 'young'`); n != 1 {
		t.Errorf("young is in the ledger %d times after its retry, want once", n)
	}
}

// TestRetryOlderThanTheWindowIsAcceptedAgain: what the dedup window
// means past its end. A retry of a pruned key under the generation still
// in force is accepted again, a second row of the same batch (the ledger
// holds one row per key only within the window); a retry whose
// generation has ended is refused as stale whatever its age, since
// fences are never pruned.
func TestRetryOlderThanTheWindowIsAcceptedAgain(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const lease = "shard:1"
	last := b.write(1, bar(lease, 1), data(lease, 1, "b", 0), data(lease, 1, "b", 1))
	b.runUntil(b.newMaterializer(nil), b.db, 1, last)
	rep, err := materializer.Prune(b.ctx, b.db.Pool, materializer.PruneConfig{Now: at(dbNow(t, b.db).Add(materializer.DefaultLedgerRetention))})
	if err != nil || rep.Accepted != 2 {
		t.Fatalf("prune a retention after: %+v %v, want b's 2 rows deleted", rep, err)
	}
	last = b.write(1, data(lease, 1, "b", 0), bar(lease, 2), data(lease, 1, "b", 1))
	m := b.newMaterializer(nil)
	b.runUntil(m, b.db, 1, last)
	for q, want := range map[string]int64{
		`SELECT count(*) FROM accepted_records WHERE batch_id = 'b' AND seq = 0`:                              1,
		`SELECT count(*) FROM rejected_records WHERE batch_id = 'b' AND seq = 1 AND reason = 'stale'`:         1,
		`SELECT count(*) FROM rejected_records WHERE reason = 'duplicate'`:                                    0,
		`SELECT count(*) FROM accepted_records WHERE batch_id = 'b' AND seq = 1`:                              0,
		`SELECT count(*) FROM fences WHERE lease = 'shard:1' AND token = 2`:                                   1,
		`SELECT count(*) FROM consumer_positions WHERE partition = 1 AND next_offset = ` + fmt.Sprint(last+1): 1,
	} {
		if n := count(t, b.db, q); n != want {
			t.Errorf("%s = %d, want %d", q, n, want)
		}
	}
	if c := m.Counts(); c[materializer.Accepted] != 1 || c[materializer.Stale] != 1 || c[materializer.Duplicate] != 0 {
		t.Errorf("verdicts of the retries %v, want accepted 1 (past the window), stale 1 (generation ended)", c)
	}
}

// seedLedger writes rows straight into every table of a fresh ledger:
// on partition 0 of topic t, accepted, rejected and kept rows at the
// offsets and ages given (ages in days before now), and one row of each
// state table.
func seedLedger(t *testing.T, db *pgtest.DB, ages map[int64]int) {
	t.Helper()
	ctx := t.Context()
	for _, q := range []string{
		`INSERT INTO consumer_positions VALUES ('t', 0, 1000)`,
		`INSERT INTO fences (lease, token, owner, producer_id, producer_epoch, barrier_partition, barrier_offset, updated_at)
		 VALUES ('shard:1', 1, 'o', 7, 1, 0, 0, now() - interval '90 days')`,
		`INSERT INTO rollout_marks VALUES ('t', 0, 'shard:*', 'enforced', 1, 0)`,
		`INSERT INTO checkpoints (lease, token, owner_id, batch_id, topic, partition, "offset", value, updated_at)
		 VALUES ('shard:1', 1, 'o', 'b', 't', 0, 0, 'c', now() - interval '90 days')`,
	} {
		if _, err := db.Pool.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	for off, days := range ages {
		age := fmt.Sprintf("%d days", days)
		for _, q := range []string{
			`INSERT INTO accepted_records (lease, owner_id, token, batch_id, seq, topic, partition, "offset", value, accepted_at)
			 VALUES ('shard:1', 'o', 1, 'b', $3, 't', 0, $1, 'v', now() - $2::interval)`,
			`INSERT INTO rejected_records (topic, partition, "offset", reason, rejected_at) VALUES ('t', 0, $1 + 100, 'stale', now() - $2::interval)`,
			`INSERT INTO kept_records (topic, partition, "offset", verdict, kept_at) VALUES ('t', 0, $1 + 200, 'stale', now() - $2::interval)`,
		} {
			args := []any{off, age}
			if strings.Contains(q, "$3") {
				args = append(args, int32(off))
			}
			if _, err := db.Pool.Exec(ctx, q, args...); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
	}
}

// TestPruneRefusesInsideTheWindow: the age Prune is asked for is checked
// against the ledger's recorded retention, the default when none is
// recorded; a ledger kept forever is never pruned; a refused prune
// deletes nothing.
func TestPruneRefusesInsideTheWindow(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name      string
		retention *time.Duration // nil: none recorded
		olderThan time.Duration
		want      error
	}{
		{"below the default", nil, materializer.DefaultLedgerRetention - time.Minute, materializer.ErrInsideWindow},
		{"below the recorded", ptr(48 * time.Hour), 47 * time.Hour, materializer.ErrInsideWindow},
		{"kept forever", ptr(time.Duration(0)), 365 * 24 * time.Hour, materializer.ErrKeptForever},
		{"at the recorded", ptr(48 * time.Hour), 0, nil},
		{"past the default", nil, materializer.DefaultLedgerRetention + time.Hour, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			db := pgtest.New(t)
			seedLedger(t, db, map[int64]int{0: 400, 1: 1})
			if c.retention != nil {
				if err := materializer.SetRetention(t.Context(), db.Pool, *c.retention); err != nil {
					t.Fatal(err)
				}
			}
			rep, err := materializer.Prune(t.Context(), db.Pool, materializer.PruneConfig{OlderThan: c.olderThan})
			if !errors.Is(err, c.want) {
				t.Fatalf("prune: %v, want %v", err, c.want)
			}
			want := int64(1) // the 400-day-old row of each table
			if c.want != nil {
				want = 0
			}
			if rep.Accepted != want || rep.Rejected != want || rep.Kept != want {
				t.Fatalf("prune deleted %+v, want %d of each table", rep, want)
			}
			if n := count(t, db, `SELECT count(*) FROM accepted_records`); n != 2-want {
				t.Fatalf("%d accepted rows left, want %d", n, 2-want)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

// TestPruneNeverTouchesState: fences, consumer positions, rollout marks
// and checkpoints are state, however old: a prune that empties the three
// record tables leaves each of them as it was (and the retention row).
func TestPruneNeverTouchesState(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	seedLedger(t, db, map[int64]int{0: 30, 1: 20, 2: 10})
	state := func() string {
		return fmt.Sprint(
			count(t, db, `SELECT count(*) FROM fences`), count(t, db, `SELECT count(*) FROM consumer_positions WHERE next_offset = 1000`),
			count(t, db, `SELECT count(*) FROM rollout_marks`), count(t, db, `SELECT count(*) FROM checkpoints`))
	}
	before := state()
	if err := materializer.SetRetention(t.Context(), db.Pool, 24*time.Hour); err != nil {
		t.Fatal(err)
	}
	rep, err := materializer.Prune(t.Context(), db.Pool, materializer.PruneConfig{})
	if err != nil || rep.Accepted != 3 || rep.Rejected != 3 || rep.Kept != 3 {
		t.Fatalf("prune: %+v %v, want every record row deleted", rep, err)
	}
	if after := state(); after != before || before != "1 1 1 1" {
		t.Fatalf("state tables after prune: %s, before %s (want 1 1 1 1 both)", after, before)
	}
	if n := count(t, db, `SELECT count(*) FROM ledger_records`); n != 0 {
		t.Fatalf("ledger_records holds %d rows after the prune, want 0", n)
	}
}

// TestPruneIsBatchedAndDryRunDeletesNothing: a prune deletes at most
// Batch rows per statement, oldest offset first, and stops at a
// partition's first row younger than the cutoff, leaving an old row
// after it (a clock that stepped back) rather than scanning the young
// ones; a dry run counts the same rows and deletes none.
func TestPruneIsBatchedAndDryRunDeletesNothing(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ages := map[int64]int{}
	for off := range int64(10) {
		ages[off] = 30
	}
	ages[10], ages[11], ages[12] = 0, 0, 30 // 12: old, after young rows
	seedLedger(t, db, ages)
	cfg := materializer.PruneConfig{OlderThan: 10 * 24 * time.Hour, Batch: 4, DryRun: true}
	dry, err := materializer.Prune(t.Context(), db.Pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if n := count(t, db, `SELECT count(*) FROM accepted_records`); n != 13 || dry.Accepted != 10 {
		t.Fatalf("dry run: %d rows left of 13, would delete %d (want 10)", n, dry.Accepted)
	}
	cfg.DryRun = false
	rep, err := materializer.Prune(t.Context(), db.Pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	// Per table: offsets 0-3, 4-7, then 8-11, which meets 10 and stops.
	if rep.Accepted != 10 || rep.Rejected != 10 || rep.Kept != 10 || rep.Statements != 9 {
		t.Fatalf("prune: %+v, want 10 rows of each table in 3 statements each", rep)
	}
	if n := count(t, db, `SELECT count(*) FROM accepted_records WHERE "offset" IN (10, 11, 12)`); n != 3 {
		t.Fatalf("%d of the rows from the first young one on left, want 3", n)
	}
}

// TestFM72_DropModeKeepsAnExactDigest (FM72): with LedgerValues drop, an
// accepted row keeps its place, stamp and dedup key, and the Digest of
// its key, value and headers in place of them: key, value and headers
// are NULL and ledger_records says dropped. Verdicts are those of keep
// mode, record for record: a header with a NUL, which keep mode cannot
// store (jsonb), is malformed in both, and dedup is the same.
func TestFM72_DropModeKeepsAnExactDigest(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const lease = "shard:1"
	withHeader := data(lease, 1, "b", 0)
	withHeader.headers = []kafka.Header{{Key: "content-type", Value: []byte("text/plain")}}
	withHeader.raw = []byte("payload")
	nul := data(lease, 1, "b", 2)
	nul.headers = []kafka.Header{{Key: "h", Value: []byte("a\x00b")}}
	last := b.write(1, bar(lease, 1), withHeader, data(lease, 1, "b", 1), nul, data(lease, 1, "b", 1))
	drop := func(c *materializer.Config) { c.LedgerValues = materializer.DropValues }
	b.runUntil(b.newMaterializer(drop), b.db, 1, last)
	stamp := barrier.Stamp{Lease: lease, Token: 1, Owner: "o", Batch: "b", Seq: 0}
	want, err := materializer.Digest(&kafka.Message{Value: withHeader.raw, Headers: append(stamp.Headers(), withHeader.headers...)})
	if err != nil {
		t.Fatal(err)
	}
	var got []byte
	var dropped bool
	if err := b.db.Pool.QueryRow(b.ctx, `SELECT digest, dropped FROM ledger_records
		WHERE batch_id = 'b' AND seq = 0 AND key IS NULL AND value IS NULL AND headers IS NULL`).Scan(&got, &dropped); err != nil {
		t.Fatalf("the metadata-only row of b/0: %v", err)
	}
	if !bytes.Equal(got, want) || !dropped {
		t.Fatalf("b/0 keeps digest %x, dropped %v; want %x (Digest of the raw record), dropped", got, dropped, want)
	}
	kept := pgtest.New(t)
	b.runUntil(b.newMaterializerOn(kept, nil), kept, 1, last)
	verdicts := func(db *pgtest.DB) string {
		return fmt.Sprint(
			count(t, db, `SELECT count(*) FROM accepted_records`),
			count(t, db, `SELECT count(*) FROM rejected_records WHERE reason = 'duplicate' AND seq = 1`),
			count(t, db, `SELECT count(*) FROM rejected_records WHERE reason = 'malformed'`))
	}
	if d, k := verdicts(b.db), verdicts(kept); d != k || d != "2 1 1" {
		t.Fatalf("accepted, duplicate, malformed: drop mode %s, keep mode %s; want 2 1 1 in both", d, k)
	}
	if n := count(t, kept, `SELECT count(*) FROM ledger_records WHERE dropped OR digest IS NOT NULL`); n != 0 {
		t.Fatalf("keep mode: %d rows say their values are gone, want 0", n)
	}
}

// TestDigestTellsEveryPartApart: Digest changes with the key, the value
// and the worker's headers, tells a NULL from an empty value, and skips
// fencegate's own headers (a retry under a new token has the same one).
func TestDigestTellsEveryPartApart(t *testing.T) {
	t.Parallel()
	stamp := func(token int64) []kafka.Header {
		return barrier.Stamp{Lease: "shard:1", Token: token, Owner: "o", Batch: "b"}.Headers()
	}
	base := kafka.Message{Key: []byte("k"), Value: []byte("v"), Headers: append(stamp(1), kafka.Header{Key: "h", Value: []byte("1")})}
	variants := map[string]kafka.Message{
		"null key":     {Value: base.Value, Headers: base.Headers},
		"empty key":    {Key: []byte{}, Value: base.Value, Headers: base.Headers},
		"null value":   {Key: base.Key, Headers: base.Headers},
		"empty value":  {Key: base.Key, Value: []byte{}, Headers: base.Headers},
		"header":       {Key: base.Key, Value: base.Value, Headers: append(stamp(1), kafka.Header{Key: "h", Value: []byte("2")})},
		"key as value": {Key: []byte("kv"), Headers: base.Headers},
	}
	seen := map[string]string{}
	d := func(name string, m kafka.Message) string {
		sum, err := materializer.Digest(&m)
		if err != nil {
			t.Fatal(err)
		}
		if other, ok := seen[string(sum)]; ok {
			t.Errorf("%s and %s have the same digest", name, other)
		}
		seen[string(sum)] = name
		return string(sum)
	}
	first := d("base", base)
	for name, m := range variants {
		d(name, m)
	}
	retry := base
	retry.Headers = append(stamp(2), kafka.Header{Key: "h", Value: []byte("1")})
	if sum, _ := materializer.Digest(&retry); string(sum) != first {
		t.Error("a new token changes the digest: it must cover the worker's bytes only")
	}
}

// TestPruneWhileTheMaterializerRuns: prunes in a loop, one row per
// statement, while the materializer applies new batches, fail neither:
// every old row goes, every row applied meanwhile stays, and a retry of
// one of them is still a duplicate.
func TestPruneWhileTheMaterializerRuns(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const lease, window, nOld, nYoung = "shard:1", time.Hour, 1000, 400
	recs := []rec{bar(lease, 1)}
	for i := range nOld {
		recs = append(recs, data(lease, 1, fmt.Sprintf("old-%d", i/100), i%100))
	}
	last := b.write(1, recs...)
	b.runUntil(b.newMaterializer(nil), b.db, 1, last)
	if err := materializer.SetRetention(b.ctx, b.db.Pool, window); err != nil {
		t.Fatal(err)
	}
	cfg := materializer.PruneConfig{Batch: 1, Now: at(dbNow(t, b.db).Add(window))}
	stop, pruned := make(chan struct{}), make(chan error, 1)
	go func() {
		var deleted int64
		for {
			rep, err := materializer.Prune(b.ctx, b.db.Pool, cfg)
			deleted += rep.Accepted
			select {
			case <-stop:
				if err == nil && deleted != nOld {
					err = fmt.Errorf("prunes deleted %d rows in all, want the %d old ones", deleted, nOld)
				}
				pruned <- err
				return
			default:
			}
			if err != nil {
				pruned <- err
				return
			}
		}
	}()
	ctx, cancel := context.WithCancel(b.ctx)
	done := make(chan error, 1)
	m := b.newMaterializer(func(c *materializer.Config) { c.MaxBatch = 20 })
	go func() { done <- m.Run(ctx) }()
	recs = nil
	for i := range nYoung {
		recs = append(recs, data(lease, 1, fmt.Sprintf("young-%d", i/100), i%100))
	}
	last = b.write(1, recs...)
	b.waitPosition(b.db, 1, last+1, done)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("materializer beside the prunes: %v", err)
	}
	close(stop)
	if err := <-pruned; err != nil {
		t.Fatalf("prune beside the materializer: %v", err)
	}
	if n := count(t, b.db, `SELECT count(*) FROM accepted_records WHERE batch_id LIKE 'old-%'`); n != 0 {
		t.Errorf("%d old rows left, want 0", n)
	}
	if n := count(t, b.db, `SELECT count(*) FROM accepted_records WHERE batch_id LIKE 'young-%'`); n != nYoung {
		t.Errorf("%d rows applied beside the prunes, want all %d", n, nYoung)
	}
	last = b.write(1, data(lease, 1, "young-2", 7))
	b.runUntil(b.newMaterializer(nil), b.db, 1, last)
	if n := count(t, b.db, `SELECT count(*) FROM rejected_records WHERE reason = 'duplicate' AND batch_id = 'young-2' AND seq = 7`); n != 1 {
		t.Errorf("a retry of a row applied beside the prunes got %d duplicate receipts, want 1", n)
	}
}

// TestFM73_PruneLoopCountsStuckPrunes: the retention loop counts each
// prune by outcome. A prune stuck behind a lock on accepted_records fails
// within its interval and counts failed (a failure was only logged, and a
// stuck prune stalled the loop for good); once the lock is gone the next
// one counts ok. FencegateLedgerNotPruned watches the ok count.
func TestFM73_PruneLoopCountsStuckPrunes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	last := b.write(1, bar("shard:1", 1), data("shard:1", 1, "a", 0))
	b.runUntil(b.newMaterializer(nil), b.db, 1, last)
	if err := materializer.SetRetention(b.ctx, b.db.Pool, time.Hour); err != nil {
		t.Fatal(err)
	}
	mp, h, err := telemetry.Prometheus(telemetry.Service{Name: telemetry.Materializer})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	lock, err := b.db.Pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lock.Rollback(context.Background()) }()
	if _, err := lock.Exec(b.ctx, `LOCK TABLE accepted_records IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	m := b.newMaterializer(func(c *materializer.Config) { c.MeterProvider = mp })
	ctx, cancel := context.WithCancel(b.ctx)
	done := make(chan struct{})
	go func() { m.PruneEvery(ctx, 300*time.Millisecond); close(done) }()
	defer func() { cancel(); <-done }()
	prunes := func(outcome string) float64 {
		return metricValue(t, h, "fencegate_materializer_prunes_total", map[string]string{"outcome": outcome})
	}
	waitUntil(t, "a failed prune counted while the table is locked", func() bool { return prunes("failed") >= 1 })
	if n := prunes("ok"); n != 0 {
		t.Fatalf("%v prunes ok while accepted_records was locked", n)
	}
	if err := lock.Rollback(b.ctx); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "a prune ok after the lock", func() bool { return prunes("ok") >= 1 })
}

// waitUntil polls cond every 20 ms for up to 60 s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(60 * time.Second)
	for !cond() {
		select {
		case <-deadline:
			t.Fatalf("%s: not within 60s", what)
		case <-tick.C:
		}
	}
}
