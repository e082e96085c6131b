package materializer_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate/fileconfig"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/leasestore"
	"github.com/fencegate/fencegate/txnmap"
	"github.com/fencegate/fencegate/verify"
)

// worker drives the gateway over HTTP like a real worker.
type worker struct {
	t     *testing.T
	url   string
	owner string
	token int64
}

func (w *worker) call(method, path string, body any) (int, map[string]any) {
	w.t.Helper()
	raw, _ := json.Marshal(body)
	req, _ := http.NewRequest(method, w.url+path, bytes.NewReader(raw))
	req.Header.Set("Authorization", "Bearer t")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		w.t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	dec := json.NewDecoder(resp.Body)
	dec.UseNumber()
	_ = dec.Decode(&out)
	return resp.StatusCode, out
}

func num(v any) int64 { n, _ := v.(json.Number).Int64(); return n }

func (w *worker) acquire(name string, withToken bool) int {
	body := map[string]any{"name": name, "owner_id": w.owner, "ttl_ms": 1500}
	if withToken {
		body["token"] = w.token
	}
	// A 503 (kafka_unavailable: the handover ran out of its budget, half
	// of this short TTL, on a loaded machine) is retried, as a worker
	// following the SDK's reaction table does.
	st, out := w.call("POST", "/v1/leases", body)
	for deadline := time.Now().Add(10 * time.Second); st == http.StatusServiceUnavailable && time.Now().Before(deadline); {
		st, out = w.call("POST", "/v1/leases", body)
	}
	if st == http.StatusCreated {
		w.token = num(out["token"])
	}
	return st
}

func (w *worker) produce(name, batch string, n int) (int, string) {
	recs := make([]any, n)
	for i := range recs {
		recs[i] = map[string]any{"value": map[string]any{"type": "STRING", "data": fmt.Sprintf("%s/%d", batch, i)}}
	}
	st, out := w.call("POST", "/v1/leases/"+name+"/records", map[string]any{"owner_id": w.owner, "token": w.token, "batch_id": batch, "records": recs})
	code, _ := out["code"].(string)
	return st, code
}

// TestEndToEndGatewayToLedger: batches written through the gateway, with
// takeovers after expiry and regenerations that retry the same batch_id,
// all land in the ledger exactly once; a frozen owner's writes are
// refused.
func TestEndToEndGatewayToLedger(t *testing.T) {
	t.Parallel()
	b := setup(t)
	srv := b.gateway()
	acked := map[string]int{} // batch -> records
	w1 := &worker{t: t, url: srv.URL, owner: "w1"}
	w2 := &worker{t: t, url: srv.URL, owner: "w2"}
	if w1.acquire("shard:1", false) != http.StatusCreated {
		t.Fatal("w1 acquire")
	}
	for i := range 3 {
		batch := fmt.Sprintf("w1-%d", i)
		if st, _ := w1.produce("shard:1", batch, 4); st == http.StatusOK {
			acked[batch] = 4
		}
	}
	// w1 regenerates (as after an ambiguous commit) and retries a batch.
	if w1.acquire("shard:1", true) != http.StatusCreated {
		t.Fatal("w1 regenerate")
	}
	if st, _ := w1.produce("shard:1", "w1-2", 4); st != http.StatusOK {
		t.Fatal("retry of w1-2")
	}
	old := w1.token
	// w1 freezes; w2 takes over after expiry.
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(20 * time.Second)
	for w2.acquire("shard:1", false) != http.StatusCreated {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatal("w2 never acquired")
		}
	}
	for i := range 2 {
		batch := fmt.Sprintf("w2-%d", i)
		if st, _ := w2.produce("shard:1", batch, 3); st == http.StatusOK {
			acked[batch] = 3
		}
	}
	w1.token = old
	if st, _ := w1.produce("shard:1", "w1-late", 2); st == http.StatusOK {
		t.Fatal("the frozen owner's write was accepted")
	}
	last := b.last(b.partition("shard:1"))
	b.runUntil(b.newMaterializer(nil), b.db, b.partition("shard:1"), last)
	for batch, n := range acked {
		if got := count(t, b.db, `SELECT count(*) FROM accepted_records WHERE batch_id = $1`, batch); got != int64(n) {
			t.Errorf("batch %s: %d records in the ledger, want %d", batch, got, n)
		}
	}
	if got := count(t, b.db, `SELECT count(*) FROM accepted_records WHERE batch_id = 'w1-late'`); got != 0 {
		t.Fatalf("the frozen owner's batch is in the ledger")
	}
	if dup := count(t, b.db, `SELECT count(*) FROM rejected_records WHERE reason = 'duplicate'`); dup != 4 {
		t.Fatalf("%d duplicate receipts, want 4 (the retried batch)", dup)
	}
}

// gateway starts a real gateway on the bundle's database and broker.
func (b *testBundle) gateway() *httptest.Server {
	srv, _ := b.gatewayWith(gateway.Hooks{})
	return srv
}

// gatewayWith starts a real gateway with hooks (a replica name of its
// own) and returns it with its server.
func (b *testBundle) gatewayWith(hooks gateway.Hooks) (*httptest.Server, *gateway.Gateway) {
	b.t.Helper()
	store, _ := leasestore.New(b.db.Pool, leasestore.Config{ValidateName: txnmap.ValidateName})
	auth, _ := gateway.NewAuthenticator([]fileconfig.Client{{Name: "w", TokenSHA256: gateway.HashToken("t"), Allow: []string{"*"}}})
	b.replicas++
	g, err := gateway.New(store, b.router, gateway.Config{Kafka: gateway.KafkaConfig{Config: b.kafka.Conn}, BarrierKey: key,
		Replica: fmt.Sprintf("replica-%d", b.replicas), Hooks: hooks})
	if err != nil {
		b.t.Fatal(err)
	}
	srv := httptest.NewServer(gateway.NewServer(g, auth))
	b.t.Cleanup(func() { srv.Close(); g.Close() })
	return srv, g
}

// TestFM10_CommitBeforeReplyRetriedOnce: replica A commits a batch and
// dies before it answers (the connection drops while the produce is held
// right after CommitTransaction succeeded). The worker, whose outcome is
// unknown, moves the lease to replica B with its current token and retries
// the same batch_id: the raw log holds the batch twice, the ledger once.
func TestFM10_CommitBeforeReplyRetriedOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	reached, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	srvA, gA := b.gatewayWith(gateway.Hooks{Fn: func(h gateway.Hook, lease string, _ int64) {
		if h == gateway.HookCommitReturned && lease == "shard:10" {
			once.Do(func() { close(reached); <-release })
		}
	}})
	srvB := b.gateway()
	w := &worker{t: t, url: srvA.URL, owner: "w1"}
	if st := w.acquire("shard:10", false); st != http.StatusCreated {
		t.Fatalf("acquire: %d", st)
	}
	lost := make(chan error, 1)
	go func() {
		raw, _ := json.Marshal(map[string]any{"owner_id": "w1", "token": w.token, "batch_id": "b-1",
			"records": []any{map[string]any{"value": map[string]any{"type": "STRING", "data": "x"}}}})
		req, _ := http.NewRequest("POST", srvA.URL+"/v1/leases/shard:10/records", bytes.NewReader(raw))
		req.Header.Set("Authorization", "Bearer t")
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			err = fmt.Errorf("answered %d", resp.StatusCode)
		}
		lost <- err
	}()
	<-reached
	srvA.CloseClientConnections() // replica A dies: its answer never leaves
	close(release)
	gA.Close()
	if err := <-lost; err == nil || strings.HasPrefix(err.Error(), "answered") {
		t.Fatalf("the worker got an answer from the dead replica: %v", err)
	}
	w.url = srvB.URL
	if st := w.acquire("shard:10", true); st != http.StatusCreated {
		t.Fatalf("moving the lease to B with the current token: %d", st)
	}
	if st, code := w.produce("shard:10", "b-1", 1); st != http.StatusOK {
		t.Fatalf("retry of b-1 on B: %d %s", st, code)
	}
	p := b.partition("shard:10")
	b.runUntil(b.newMaterializer(nil), b.db, p, b.last(p))
	inLog := 0
	for _, r := range b.readCommitted(p) {
		if !r.Barrier && r.Batch == "b-1" {
			inLog++
		}
	}
	if inLog != 2 {
		t.Fatalf("the raw log holds b-1 %d times, want 2 (the commit before the lost reply and the retry)", inLog)
	}
	if n := count(t, b.db, `SELECT count(*) FROM accepted_records WHERE lease = 'shard:10' AND batch_id = 'b-1'`); n != 1 {
		t.Fatalf("the ledger holds b-1 %d times, want once", n)
	}
}

// TestFM26_LaterOwnerReusesBatchID: o1 writes b-1 and releases; o2
// acquires and writes its own b-1. Both are acknowledged, so both are in
// the ledger: the dedup key is the owner's, and another owner's batch with
// the same id is a different batch.
func TestFM26_LaterOwnerReusesBatchID(t *testing.T) {
	t.Parallel()
	b := setup(t)
	srv := b.gateway()
	for i, owner := range []string{"o1", "o2"} {
		w := &worker{t: t, url: srv.URL, owner: owner}
		if st := w.acquire("shard:26", false); st != http.StatusCreated {
			t.Fatalf("%s acquire: %d", owner, st)
		}
		if st, code := w.produce("shard:26", "b-1", 3+i); st != http.StatusOK {
			t.Fatalf("%s produce b-1: %d %s", owner, st, code)
		}
		if st, _ := w.call("DELETE", fmt.Sprintf("/v1/leases/shard:26?owner_id=%s&token=%d", owner, w.token), nil); st != http.StatusNoContent {
			t.Fatalf("%s release: %d", owner, st)
		}
	}
	b.runUntil(b.newMaterializer(nil), b.db, b.partition("shard:26"), b.last(b.partition("shard:26")))
	for owner, want := range map[string]int64{"o1": 3, "o2": 4} {
		got := count(t, b.db, `SELECT count(*) FROM accepted_records WHERE lease = 'shard:26' AND owner_id = $1 AND batch_id = 'b-1'`, owner)
		if got != want {
			t.Errorf("%s's b-1: %d records in the ledger, want %d", owner, got, want)
		}
	}
	if dup := count(t, b.db, `SELECT count(*) FROM rejected_records WHERE reason = 'duplicate'`); dup != 0 {
		t.Fatalf("%d records filed as duplicates of another owner's batch", dup)
	}
}

func (b *testBundle) partition(name string) int32 {
	p, err := b.router.Resolve(name)
	if err != nil {
		b.t.Fatal(err)
	}
	return p.Partition
}

// readCommitted reads a partition read_committed.
func (b *testBundle) readCommitted(p int32) []verify.Record {
	b.t.Helper()
	recs, err := verify.ReadPartition(b.kafka.Conn, b.topic, p, 30*time.Second)
	if err != nil {
		b.t.Fatal(err)
	}
	return recs
}
