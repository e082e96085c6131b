package gateway_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/fencegate/fencegate/barrier"
	"github.com/fencegate/fencegate/client/wire"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/materializer"
	"github.com/fencegate/fencegate/verify"
)

// produceCheckpoint produces a batch of n records carrying checkpoint cp.
func (r *replica) produceCheckpoint(t testing.TB, name, owner string, token int64, batch string, n int, cp string) reply {
	t.Helper()
	body := batchBody(owner, token, batch, n)
	body["checkpoint"] = map[string]any{"type": "STRING", "data": cp}
	return r.do(t, "POST", "/v1/leases/"+name+"/records", body)
}

// readCheckpoint is the checkpoint read of the generation (owner, token).
func (r *replica) readCheckpoint(t testing.TB, name, owner string, token int64, wait string) reply {
	t.Helper()
	return r.do(t, "GET", fmt.Sprintf("/v1/leases/%s/checkpoint?owner_id=%s&token=%d&wait=%s", name, owner, token, wait), nil)
}

// checkpointOf decodes a 200 checkpoint read: the checkpoint's batch id
// and value, ok false for null.
func checkpointOf(t testing.TB, rep reply) (batch, value string, ok bool) {
	t.Helper()
	if rep.status != http.StatusOK {
		t.Fatalf("checkpoint read: %d %s", rep.status, rep.raw)
	}
	cp, _ := rep.body["checkpoint"].(map[string]any)
	if cp == nil {
		return "", "", false
	}
	v, _ := cp["value"].(map[string]any)
	if v["type"] != "STRING" {
		t.Fatalf("checkpoint value %v: want the STRING it was written as", v)
	}
	return fmt.Sprint(cp["batch_id"]), fmt.Sprint(v["data"]), true
}

// TestFM97_CheckpointKeepsItsType: what goes in comes out. A checkpoint
// written as {"type": "JSON"} or {"type": "STRING"} in the JSON body is
// read back in that type, the JSON as the same document; BINARY and every
// checkpoint of the binary body come back BINARY, byte for byte. Before
// the type was kept, every checkpoint read back as BINARY base64 and each
// client had to guess what it had written.
func TestFM97_CheckpointKeepsItsType(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.newReplica(nil)
	b.runMaterializer(t)
	for i, tc := range []struct {
		name, kind string
		data       any
		want       string // the answer's value, as JSON
	}{
		{"json object", "JSON", map[string]any{"next": 3, "cursor": "c-9"}, `{"type":"JSON","data":{"cursor":"c-9","next":3}}`},
		{"json number", "JSON", 42, `{"type":"JSON","data":42}`},
		{"json string", "JSON", "s", `{"type":"JSON","data":"s"}`},
		{"string", "STRING", "input=7", `{"type":"STRING","data":"input=7"}`},
		{"empty string", "STRING", "", `{"type":"STRING","data":""}`},
		{"binary", "BINARY", base64.StdEncoding.EncodeToString([]byte{0, 0xff}), `{"type":"BINARY","data":"AP8="}`},
		{"binary body", "", nil, `{"type":"BINARY","data":"eyJuZXh0IjozfQ=="}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lease := fmt.Sprintf("shard:49%02d", i)
			token := r.mustAcquire(t, lease, "w1", 30*time.Second)
			var rep reply
			if tc.kind == "" {
				rep = r.do(t, "POST", "/v1/leases/"+lease+"/records", wire.Batch{OwnerID: "w1", Token: token, BatchID: "b-1",
					Records: []wire.Record{{Value: []byte("v")}}, Checkpoint: []byte(`{"next":3}`)})
			} else {
				body := batchBody("w1", token, "b-1", 1)
				body["checkpoint"] = map[string]any{"type": tc.kind, "data": tc.data}
				rep = r.do(t, "POST", "/v1/leases/"+lease+"/records", body)
			}
			if rep.status != http.StatusOK {
				t.Fatalf("produce: %d %s", rep.status, rep.raw)
			}
			// Read under the next generation: final for this one's batches.
			next := r.regenerate(t, lease, "w1", token, 30*time.Second)
			if next.status != http.StatusCreated {
				t.Fatalf("new generation: %d %s", next.status, next.raw)
			}
			read := r.readCheckpoint(t, lease, "w1", next.int("token"), "30s")
			cp, _ := read.body["checkpoint"].(map[string]any)
			if read.status != http.StatusOK || cp == nil {
				t.Fatalf("read: %d %s, want the checkpoint", read.status, read.raw)
			}
			var want any
			if err := json.Unmarshal([]byte(tc.want), &want); err != nil {
				t.Fatal(err)
			}
			got, _ := json.Marshal(cp["value"])
			if w, _ := json.Marshal(want); string(got) != string(w) {
				t.Fatalf("read back %s, want %s", got, w)
			}
		})
	}
}

// runMaterializer runs a materializer on the bundle's ledger until the
// test ends.
func (b *testBundle) runMaterializer(t testing.TB) {
	t.Helper()
	m, err := materializer.New(b.db.Pool, b.router, materializer.Config{Kafka: b.kafka.Conn, BarrierKey: barrierKey,
		PollTimeout: 20 * time.Millisecond,
		Logger:      slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
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

// checkpointRecords are the committed checkpoint records of a lease.
func checkpointRecords(recs []verify.Record, lease string) []verify.Record {
	var out []verify.Record
	for _, r := range recs {
		if r.Checkpoint && r.Lease == lease {
			out = append(out, r)
		}
	}
	return out
}

// TestFM48_CheckpointCommitsWithItsBatch: a batch's checkpoint is one more
// record of the batch's own transaction, so it is committed exactly when
// the batch is. A batch aborted by the broker (a permanent produce error)
// leaves no checkpoint in the committed log, and the next owner's read
// names the last committed batch's checkpoint, not the aborted one's.
func TestFM48_CheckpointCommitsWithItsBatch(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.newReplica(nil)
	const lease = "shard:48"
	token := r.mustAcquire(t, lease, "w1", 30*time.Second)
	rep := r.produceCheckpoint(t, lease, "w1", token, "b-1", 2, "input=2")
	if rep.status != http.StatusOK {
		t.Fatalf("produce with a checkpoint: %d %s", rep.status, rep.raw)
	}
	offs, _ := rep.body["offsets"].([]any)
	if len(offs) != 2 || rep.int("checkpoint_offset") <= 0 {
		t.Fatalf("answer %s: want the 2 data offsets and checkpoint_offset", rep.raw)
	}
	b.failNextProduce(kerr.MessageTooLarge.Code)
	if rep := r.produceCheckpoint(t, lease, "w1", token, "b-2", 3, "input=5"); rep.status != http.StatusServiceUnavailable || rep.code() != "batch_aborted" {
		t.Fatalf("produce with a permanent broker error: %d %s, want batch_aborted", rep.status, rep.raw)
	}
	recs := b.read(t, lease)
	cps := checkpointRecords(recs, lease)
	if len(cps) != 1 {
		t.Fatalf("%d committed checkpoint records, want 1 (the aborted batch's is not committed): %+v", len(cps), cps)
	}
	cp := cps[0]
	if string(cp.Value) != "input=2" || cp.Batch != "b-1" || cp.Seq != 2 || cp.Token != token || cp.Key != nil ||
		cp.Offset != rep.int("checkpoint_offset") {
		t.Fatalf("checkpoint record %+v: want value input=2 of b-1, seq 2, token %d, null key, at offset %d", cp, token, rep.int("checkpoint_offset"))
	}
	for _, rec := range recs {
		if rec.Batch == "b-2" {
			t.Fatalf("a record of the aborted batch is committed: %+v", rec)
		}
	}
	b.runMaterializer(t)
	next := r.regenerate(t, lease, "w1", token, 30*time.Second)
	if next.status != http.StatusCreated {
		t.Fatalf("new generation: %d %s", next.status, next.raw)
	}
	batch, value, ok := checkpointOf(t, r.readCheckpoint(t, lease, "w1", next.int("token"), "30s"))
	if !ok || batch != "b-1" || value != "input=2" {
		t.Fatalf("checkpoint after the aborted batch: %q %q (present %v), want b-1's input=2", batch, value, ok)
	}
}

// TestCheckpointAfterTakeover: after the lease expired and another owner
// took it, the new owner's read is exactly the checkpoint of the old
// owner's last committed batch that carried one; the old owner's read is
// refused (lease_lost), and a lease whose batches never carried one reads
// null.
func TestCheckpointAfterTakeover(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.newReplica(nil)
	other := b.newReplica(nil) // any replica answers: it reads Postgres
	b.runMaterializer(t)
	const lease = "shard:4801"
	old := r.mustAcquire(t, lease, "w-old", 2*time.Second)
	for i, cp := range []string{"input=10", "input=20"} {
		if rep := r.produceCheckpoint(t, lease, "w-old", old, fmt.Sprintf("b-%d", i), 2, cp); rep.status != http.StatusOK {
			t.Fatalf("produce b-%d: %d %s", i, rep.status, rep.raw)
		}
	}
	if rep := r.produce(t, lease, "w-old", old, "b-none", 2); rep.status != http.StatusOK {
		t.Fatalf("produce without a checkpoint: %d %s", rep.status, rep.raw)
	}
	b.waitExpired(t, lease)
	fresh := other.mustAcquire(t, lease, "w-new", 30*time.Second)
	rep := other.readCheckpoint(t, lease, "w-new", fresh, "30s")
	batch, value, ok := checkpointOf(t, rep)
	cp := rep.body["checkpoint"].(map[string]any)
	if !ok || batch != "b-1" || value != "input=20" || cp["owner_id"] != "w-old" || fmt.Sprint(cp["token"]) != fmt.Sprint(old) {
		t.Fatalf("new owner's read %s: want b-1's input=20 of w-old token %d", rep.raw, old)
	}
	if rep.int("token") != fresh {
		t.Fatalf("read %s: token is not the caller's %d", rep.raw, fresh)
	}
	if rep := r.readCheckpoint(t, lease, "w-old", old, "0s"); rep.status != http.StatusConflict || rep.code() != "lease_lost" {
		t.Fatalf("old owner's read: %d %s, want lease_lost", rep.status, rep.raw)
	}
	const bare = "shard:4802"
	tok := r.mustAcquire(t, bare, "w1", 30*time.Second)
	if rep := r.produce(t, bare, "w1", tok, "b-1", 1); rep.status != http.StatusOK {
		t.Fatalf("produce: %d %s", rep.status, rep.raw)
	}
	rep = r.readCheckpoint(t, bare, "w1", tok, "30s")
	if _, _, ok := checkpointOf(t, rep); ok {
		t.Fatalf("read of a lease without checkpoints: %s, want null", rep.raw)
	}
	if _, present := rep.body["checkpoint"]; !present {
		t.Fatalf("read %s: checkpoint must be present, null", rep.raw)
	}
}

// TestFM48_AmbiguousBatchAndItsCheckpointLandTogether: a commit held at the
// broker past the client timeout is answered generation_ended (outcome
// unknown). The regenerated owner's read says whether it landed: its
// checkpoint is there exactly when its data is. Once the held EndTxn is
// let through before the new generation (it commits), once the new
// generation's epoch bump comes first (it aborts). A checkpoint written
// apart from its batch (FM48) would be read while the batch is absent.
func TestFM48_AmbiguousBatchAndItsCheckpointLandTogether(t *testing.T) {
	t.Parallel()
	for _, landed := range []bool{true, false} {
		t.Run(fmt.Sprintf("landed=%v", landed), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			r := b.newReplica(func(c *gateway.Config) { c.CommitTimeout = time.Second })
			b.runMaterializer(t)
			const lease = "shard:4803"
			token := r.mustAcquire(t, lease, "w1", 30*time.Second)
			if rep := r.produceCheckpoint(t, lease, "w1", token, "first", 2, "input=2"); rep.status != http.StatusOK {
				t.Fatalf("first: %d %s", rep.status, rep.raw)
			}
			entered, release := b.holdEndTxn()
			rep := r.produceCheckpoint(t, lease, "w1", token, "ambiguous", 3, "input=5")
			<-entered
			if rep.status != http.StatusConflict || rep.code() != "generation_ended" {
				t.Fatalf("commit past the client timeout: %d %s, want generation_ended", rep.status, rep.raw)
			}
			if landed {
				close(release)
				eventually(t, 30*time.Second, func() (bool, string) {
					n := len(checkpointRecords(b.read(t, lease), lease))
					return n == 2, fmt.Sprintf("%d committed checkpoint records, want 2", n)
				})
			}
			next := r.regenerate(t, lease, "w1", token, 30*time.Second)
			if !landed {
				close(release) // the late EndTxn meets the new epoch
			}
			if next.status != http.StatusCreated {
				t.Fatalf("new generation: %d %s", next.status, next.raw)
			}
			batch, value, ok := checkpointOf(t, r.readCheckpoint(t, lease, "w1", next.int("token"), "30s"))
			var data int64
			if err := b.db.Pool.QueryRow(context.Background(),
				`SELECT count(*) FROM accepted_records WHERE lease = $1 AND batch_id = 'ambiguous'`, lease).Scan(&data); err != nil {
				t.Fatal(err)
			}
			want := map[bool]string{true: "ambiguous/input=5/3", false: "first/input=2/0"}[landed]
			if got := fmt.Sprintf("%s/%s/%d", batch, value, data); !ok || got != want {
				t.Fatalf("read %q (present %v) with %d records of the ambiguous batch in the ledger; want %s", batch+"/"+value, ok, data, want)
			}
		})
	}
}

// TestCheckpointLedgerBehind: with no materializer running the ledger
// never applies the caller's barrier: the read waits its bound, then
// answers 503 ledger_behind with Retry-After and the ledger's token.
func TestCheckpointLedgerBehind(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.newReplica(nil)
	token := r.mustAcquire(t, "shard:4804", "w1", 30*time.Second)
	start := time.Now()
	rep := r.readCheckpoint(t, "shard:4804", "w1", token, "300ms")
	if took := time.Since(start); took < 300*time.Millisecond {
		t.Fatalf("ledger_behind after %s, before the 300ms bound", took)
	}
	if rep.status != http.StatusServiceUnavailable || rep.code() != "ledger_behind" || rep.header.Get("Retry-After") != "1" {
		t.Fatalf("read with the ledger behind: %d %s (Retry-After %q), want 503 ledger_behind, Retry-After 1",
			rep.status, rep.raw, rep.header.Get("Retry-After"))
	}
	if v, present := rep.body["ledger_token"]; !present || fmt.Sprint(v) != "0" {
		t.Fatalf("ledger_behind %s: want ledger_token 0", rep.raw)
	}
	if rep := r.readCheckpoint(t, "shard:4804", "w1", token, "-1s"); rep.status != http.StatusBadRequest {
		t.Fatalf("a negative wait: %d %s, want 400", rep.status, rep.raw)
	}
}

// TestCheckpointHeaderIsReserved: a worker may not set the checkpoint
// flag on a record of its own.
func TestCheckpointHeaderIsReserved(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.newReplica(nil)
	token := r.mustAcquire(t, "shard:4805", "w1", 30*time.Second)
	body := batchBody("w1", token, "b-1", 1)
	body["records"].([]map[string]any)[0]["headers"] = map[string]string{barrier.HeaderCheckpoint: "1"}
	if rep := r.do(t, "POST", "/v1/leases/shard:4805/records", body); rep.status != http.StatusBadRequest {
		t.Fatalf("a worker's %s header: %d %s, want 400", barrier.HeaderCheckpoint, rep.status, rep.raw)
	}
}
