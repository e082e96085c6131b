package gateway_test

import (
	"context"
	"log/slog"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/internal/kafkatest"
	"github.com/fencegate/fencegate/leasestore"
	"github.com/fencegate/fencegate/materializer"
	"github.com/fencegate/fencegate/txnmap"
)

// TestFM80_CheckpointReadEndsWithItsGeneration: a checkpoint read still
// waiting for the ledger when its generation ends, and another client's
// generation takes the lease and commits a checkpoint, is answered
// lease_lost: never 200 with the other generation's checkpoint. The read
// is held at HookLedgerBehind (it found the ledger behind and waits), the
// takeover and the ledger's catch-up happen meanwhile.
func TestFM80_CheckpointReadEndsWithItsGeneration(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const lease = "shard:80"
	g := newGate(gateway.HookLedgerBehind, lease)
	defer g.open()
	r := b.newReplica(hooks(g))
	old := r.mustAcquire(t, lease, "w-old", 2*time.Second)
	got := make(chan reply, 1)
	go func() { got <- r.readCheckpoint(t, lease, "w-old", old, "30s") }()
	g.wait(t)
	b.waitExpired(t, lease)
	rep := r.doAs(t, otherToken, "POST", "/v1/leases", map[string]any{"name": lease, "owner_id": "w-new", "ttl_ms": 30000})
	if rep.status != http.StatusCreated {
		t.Fatalf("the other client's acquire: %d %s", rep.status, rep.raw)
	}
	fresh := rep.int("token")
	body := batchBody("w-new", fresh, "b-new", 1)
	body["checkpoint"] = map[string]any{"type": "STRING", "data": "theirs"}
	if rep := r.doAs(t, otherToken, "POST", "/v1/leases/"+lease+"/records", body); rep.status != http.StatusOK {
		t.Fatalf("the other client's batch: %d %s", rep.status, rep.raw)
	}
	b.runMaterializer(t)
	eventually(t, 30*time.Second, func() (bool, string) {
		var tok int64
		err := b.db.Pool.QueryRow(context.Background(), `SELECT coalesce(max(token), 0) FROM checkpoints WHERE lease = $1`, lease).Scan(&tok)
		return err == nil && tok == fresh, "the ledger holds the other generation's checkpoint"
	})
	g.open()
	if rep := <-got; rep.status != http.StatusConflict || rep.code() != "lease_lost" {
		t.Fatalf("a read whose generation ended while it waited: %d %s, want 409 lease_lost", rep.status, rep.raw)
	}
}

// releaseWithin sends the release of (owner, token) to r and gives up
// after d, as a client with a deadline does; ok is false when it gave up.
func releaseWithin(t testing.TB, r *replica, name, owner string, token int64, d time.Duration) (reply, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "DELETE", r.srv.URL+"/v1/leases/"+name+"?owner_id="+owner+"&token="+itoa(token), nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+devToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return reply{}, false
	}
	resp.Body.Close()
	return reply{status: resp.StatusCode}, true
}

// TestFM81_RetriedReleaseWaitsForTheBatchInFlight: a release at the
// holder while a batch is in flight (held before its commit) is given up
// by its client (direct) or by the forwarder's bound (forwarded). The
// release sent again must not answer 204 while the batch is still in
// flight: the row would be released under a session about to commit.
// Once the batch committed (200) and the producer closed, a release
// answers 204 and the holder keeps no session.
func TestFM81_RetriedReleaseWaitsForTheBatchInFlight(t *testing.T) {
	t.Parallel()
	for _, forwarded := range []bool{false, true} {
		name := map[bool]string{false: "direct", true: "forwarded"}[forwarded]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			lease := "shard:81" + map[bool]string{false: "0", true: "1"}[forwarded]
			g := newGate(gateway.HookBeforeCommit, lease)
			defer g.open()
			if forwarded {
				b.forwarding(0)
			}
			holder := b.newReplica(func(c *gateway.Config) { slowBeat(c); hooks(g)(c) })
			at := holder
			if forwarded {
				b.forwarding(300 * time.Millisecond)
				at = b.newReplica(slowBeat)
			}
			token := holder.mustAcquire(t, lease, "w1", 30*time.Second)
			produced := make(chan reply, 1)
			go func() { produced <- holder.produce(t, lease, "w1", token, "b1", 2) }()
			g.wait(t)
			if rep, ok := releaseWithin(t, at, lease, "w1", token, time.Second); ok && rep.status == http.StatusNoContent {
				t.Fatalf("the first release answered 204 with the batch in flight")
			}
			if rep, ok := releaseWithin(t, at, lease, "w1", token, 2*time.Second); ok && rep.status == http.StatusNoContent {
				t.Fatalf("the retried release answered 204 with the batch still in flight")
			}
			g.open()
			if rep := <-produced; rep.status != http.StatusOK {
				t.Fatalf("the batch in flight: %d %s, want 200", rep.status, rep.raw)
			}
			eventually(t, 20*time.Second, func() (bool, string) {
				rep, ok := releaseWithin(t, at, lease, "w1", token, 5*time.Second)
				return ok && rep.status == http.StatusNoContent, "release after the batch settled"
			})
			if n := holder.g.Sessions(); n != 0 {
				t.Fatalf("the holder keeps %d sessions after the release", n)
			}
		})
	}
}

// runMaterializerOn runs a materializer with router on the bundle's
// ledger, limited to parts (nil: all), until the test ends.
func (b *testBundle) runMaterializerOn(t testing.TB, router *txnmap.Router, parts []int32) {
	t.Helper()
	m, err := materializer.New(b.db.Pool, router, materializer.Config{Kafka: b.kafka.Conn, BarrierKey: barrierKey,
		PollTimeout: 20 * time.Millisecond, Partitions: parts,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("materializer: %v", err)
		}
	})
}

// TestFM82_CheckpointReadWaitsForTheOldPartition: shard:17 writes a
// checkpoint on partition 1 under 16 partitions and is released; the
// topic and the route grow to 32 (shard:17 on partition 17) and a new
// generation takes it there. A ledger instance that applies partition 17
// only (split by --partitions, its sibling behind) has the new fence; the
// read must not answer null as final while partition 1 still holds the
// previous generation's checkpoint: ledger_behind, and once partition 1
// is applied, the old checkpoint.
func TestFM82_CheckpointReadWaitsForTheOldPartition(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const lease = "shard:17"
	before := b.newReplica(nil)
	old := before.mustAcquire(t, lease, "w-old", 30*time.Second)
	if rep := before.produceCheckpoint(t, lease, "w-old", old, "b-old", 2, "input=17"); rep.status != http.StatusOK {
		t.Fatalf("produce under 16 partitions: %d %s", rep.status, rep.raw)
	}
	if rep := before.do(t, "DELETE", "/v1/leases/"+lease+"?owner_id=w-old&token="+itoa(old), nil); rep.status != http.StatusNoContent {
		t.Fatalf("release: %d %s", rep.status, rep.raw)
	}
	if err := kafkatest.GrowTopic(b.kafka.Conn, b.kafka.Topic, 2*partitions); err != nil {
		t.Fatal(err)
	}
	grown, err := txnmap.NewRouter(b.kafka.RouterPrefix("test"), []txnmap.Route{{Pattern: "shard:*", Topic: b.kafka.Topic, Partitions: 2 * partitions}})
	if err != nil {
		t.Fatal(err)
	}
	b.router = grown
	history := []leasestore.Placement{{Pattern: "shard:*", Version: 1, Topic: b.kafka.Topic, Partitions: partitions},
		{Pattern: "shard:*", Version: 2, Topic: b.kafka.Topic, Partitions: 2 * partitions}}
	after := b.newReplica(func(c *gateway.Config) { c.Placements = history })
	fresh := after.mustAcquire(t, lease, "w-new", 30*time.Second)
	b.runMaterializerOn(t, grown, []int32{17})
	eventually(t, 30*time.Second, func() (bool, string) {
		var fence int64
		err := b.db.Pool.QueryRow(context.Background(), `SELECT coalesce(max(token), 0) FROM fences WHERE lease = $1 AND barrier_partition = 17`, lease).Scan(&fence)
		return err == nil && fence == fresh, "the instance of partition 17 applied the new barrier"
	})
	if rep := after.readCheckpoint(t, lease, "w-new", fresh, "500ms"); rep.status != http.StatusServiceUnavailable || rep.code() != "ledger_behind" {
		t.Fatalf("read with partition 1 not applied: %d %s, want 503 ledger_behind", rep.status, rep.raw)
	}
	var rest []int32
	for p := range int32(2 * partitions) {
		if p != 17 {
			rest = append(rest, p)
		}
	}
	b.runMaterializerOn(t, grown, rest)
	batch, value, ok := checkpointOf(t, after.readCheckpoint(t, lease, "w-new", fresh, "30s"))
	if !ok || batch != "b-old" || value != "input=17" {
		t.Fatalf("read once partition 1 is applied: %q %q (present %v), want b-old's input=17", batch, value, ok)
	}
}
