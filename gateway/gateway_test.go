package gateway_test

import (
	"bytes"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/fencegate/fencegate/gateway"
)

func TestAcquireProduceReadBack(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.newReplica(nil)
	rep := r.acquire(t, "shard:8841", "w1", 10*time.Second)
	if rep.status != http.StatusCreated {
		t.Fatalf("acquire: %d %s", rep.status, rep.raw)
	}
	for _, f := range []string{"name", "owner_id", "token", "expires_at", "ttl_ms", "topic", "partition",
		"transactional_id", "producer_id", "producer_epoch"} {
		if _, ok := rep.body[f]; !ok {
			t.Errorf("acquire reply lacks %q: %s", f, rep.raw)
		}
	}
	if rep.body["transactional_id"] != b.txnID("shard:8841") || rep.int("partition") != 8841%partitions {
		t.Fatalf("placement in reply: %s", rep.raw)
	}
	token := rep.int("token")
	log := &ackLog{}
	for i := range 3 {
		b.mustProduce(t, r, log, "shard:8841", "w1", token, "batch-"+string(rune('a'+i)), 5)
	}
	recs := b.checkInvariants(t, "shard:8841", log)
	if len(recs) != 16 || !recs[0].Barrier || recs[0].Token != token {
		t.Fatalf("partition holds %d records (first %+v), want barrier + 15", len(recs), recs[0])
	}
	if !bytes.Equal(recs[1].Value, []byte("batch-a/0")) || string(recs[1].Key) != "k0" {
		t.Fatalf("first data record = %+v", recs[1])
	}
	l, err := b.store.Get(b.ctx, "shard:8841")
	if err != nil || l.State != "active" || l.ProducerID != rep.int("producer_id") || int64(l.ProducerEpoch) != rep.int("producer_epoch") {
		t.Fatalf("lease row %+v %v does not match the reply %s", l, err, rep.raw)
	}
}

func TestRenewAndRelease(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.newReplica(nil)
	token := r.mustAcquire(t, "shard:2", "w1", 5*time.Second)
	rep := r.do(t, "PATCH", "/v1/leases/shard:2", map[string]any{"owner_id": "w1", "token": token, "ttl_ms": 60000})
	if rep.status != http.StatusOK || rep.int("token") != token || rep.body["expires_at"] == nil {
		t.Fatalf("renew: %d %s", rep.status, rep.raw)
	}
	rep = r.do(t, "DELETE", "/v1/leases/shard:2?owner_id=w1&token="+itoa(token), nil)
	if rep.status != http.StatusNoContent {
		t.Fatalf("release: %d %s", rep.status, rep.raw)
	}
	if rep := r.produce(t, "shard:2", "w1", token, "after-release", 1); rep.status != http.StatusConflict {
		t.Fatalf("produce after release: %d %s", rep.status, rep.raw)
	}
	r.g.Idle()
	if n := r.g.Sessions(); n != 0 {
		t.Fatalf("%d sessions after release", n)
	}
	next := r.mustAcquire(t, "shard:2", "w2", 5*time.Second)
	if next <= token {
		t.Fatalf("token after release %d, want > %d", next, token)
	}
}

func TestFM03_ProduceAfterLocalDeadlineRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.newReplica(func(c *gateway.Config) { c.ReapInterval = time.Hour })
	token := r.mustAcquire(t, "shard:3", "w1", 5*time.Second)
	log := &ackLog{}
	b.mustProduce(t, r, log, "shard:3", "w1", token, "before", 1)
	r.clock.advance(5 * time.Second) // the local deadline passes; Postgres still says active
	rep := r.produce(t, "shard:3", "w1", token, "after", 1)
	if rep.status != http.StatusConflict || rep.code() != "lease_lost" {
		t.Fatalf("produce after the local deadline: %d %s", rep.status, rep.raw)
	}
	rep = r.do(t, "PATCH", "/v1/leases/shard:3", map[string]any{"owner_id": "w1", "token": token, "ttl_ms": 60000})
	if rep.status != http.StatusConflict {
		t.Fatalf("renew after the local deadline: %d %s", rep.status, rep.raw)
	}
	recs := b.checkInvariants(t, "shard:3", log)
	if len(recs) != 2 {
		t.Fatalf("partition holds %d records, want barrier + 1", len(recs))
	}
}

func itoa(n int64) string { return strconvItoa(n) }

// TestRegistryMisdirectsToHolder: a replica without the lease's session
// answers 421 with the holder's address while the holder heartbeats; once
// the holder is gone it answers not_holder and the owner moves the lease
// here with its current token (one handover, no TTL wait). Heartbeats
// every 2 s: at 200 ms a loaded machine delayed one past the 600 ms
// freshness window and the live holder looked gone (not_holder).
func TestRegistryMisdirectsToHolder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a := b.newReplica(slowBeat)
	other := b.newReplica(slowBeat)
	token := a.mustAcquire(t, "shard:30", "w1", 30*time.Second)
	rep := other.produce(t, "shard:30", "w1", token, "b1", 1)
	if rep.status != http.StatusMisdirectedRequest || rep.code() != "misdirected" || rep.body["holder_url"] != a.srv.URL {
		t.Fatalf("produce on the other replica: %d %s, want 421 with holder_url %s", rep.status, rep.raw, a.srv.URL)
	}
	rep = other.do(t, "PATCH", "/v1/leases/shard:30", map[string]any{"owner_id": "w1", "token": token, "ttl_ms": 30000})
	if rep.status != http.StatusMisdirectedRequest {
		t.Fatalf("renew on the other replica: %d %s", rep.status, rep.raw)
	}
	a.srv.Close()
	a.g.Close() // the holder dies: no more heartbeats
	eventually(t, 20*time.Second, func() (bool, string) {
		rep = other.produce(t, "shard:30", "w1", token, "b1", 1)
		return rep.code() == "not_holder", fmt.Sprintf("%d %s", rep.status, rep.raw)
	})
	rep = other.regenerate(t, "shard:30", "w1", token, 30*time.Second)
	if rep.status != http.StatusCreated || rep.int("token") <= token {
		t.Fatalf("moving the lease: %d %s", rep.status, rep.raw)
	}
	log := &ackLog{}
	b.mustProduce(t, other, log, "shard:30", "w1", rep.int("token"), "b1", 1)
	b.checkInvariants(t, "shard:30", log)
}
