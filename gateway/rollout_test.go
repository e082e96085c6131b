package gateway_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/fencegate/fencegate/barrier"
	"github.com/fencegate/fencegate/rollout"
)

// withAdmin serves the admin API on r for the bundle's config.
func (b *testBundle) withAdmin(r *replica) {
	b.t.Helper()
	signer, err := barrier.NewSigner(barrierKey)
	if err != nil {
		b.t.Fatal(err)
	}
	if err := r.server.Admin(&rollout.Rollouts{Store: b.store, Router: b.router, Signer: signer, Kafka: b.kafka.Conn,
		DirectClients: b.auth.DirectClients()}, testClients); err != nil {
		b.t.Fatal(err)
	}
}

// step asks the admin API to move shard:* to state.
func (r *replica) step(t testing.TB, state string, force bool, reason string) reply {
	t.Helper()
	return r.doAs(t, opsToken, http.MethodPost, "/v1/admin/rollouts",
		map[string]any{"pattern": "shard:*", "state": state, "force": force, "reason": reason})
}

// writeDirect writes n records as an old binary does: its own producer,
// no stamp, straight to the lease's partition.
func (b *testBundle) writeDirect(t testing.TB, lease, value string, n int) {
	t.Helper()
	cm, err := b.kafka.Conn.ConfigMap()
	if err != nil {
		t.Fatal(err)
	}
	cm["go.logs.channel.enable"] = false
	p, err := kafka.NewProducer(&cm)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	topic, part := b.kafka.Topic, b.partitionOf(lease)
	dch := make(chan kafka.Event, n)
	for range n {
		if err := p.Produce(&kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: part}, Value: []byte(value)}, dch); err != nil {
			t.Fatal(err)
		}
	}
	for range n {
		if m := (<-dch).(*kafka.Message); m.TopicPartition.Error != nil {
			t.Fatal(m.TopicPartition.Error)
		}
	}
}

// TestFM21_RolloutWalksObserveGateEnforce: a direct client (an old
// binary: lease API only, its own producer) and a fenced one share
// shard:*. With no state recorded the direct client is refused (403
// direct_client_gated naming the pattern): an upgrade loosens nothing.
// Under observe it is granted, and the ledger keeps its unstamped
// records, marked; under gated its renewal and new acquires are refused
// and status names its lease until it lapses; enforce is refused while
// it is live (409) and taken once it lapsed; afterwards its writes are
// refused with receipts. The fenced client's acknowledged batches are in
// the ledger exactly once throughout.
func TestFM21_RolloutWalksObserveGateEnforce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.newReplica(nil)
	b.withAdmin(r)
	const old, fenced = "shard:5", "shard:21" // one partition: 5 of 16
	// Long enough for the gated steps below to see the direct lease live
	// on a loaded machine (it is renewed just before the gate); the test
	// waits for it to lapse once, before enforce.
	ttl := 6 * time.Second
	if rep := r.doAs(t, devToken, "GET", "/v1/admin/rollouts", nil); rep.status != http.StatusForbidden {
		t.Fatalf("admin API for a client without admin: %d %s, want 403", rep.status, rep.raw)
	}
	if rep := r.doAs(t, directToken, "POST", "/v1/leases", map[string]any{"name": old, "owner_id": "old-1", "ttl_ms": ttl.Milliseconds()}); rep.status != http.StatusForbidden || rep.code() != "direct_client_gated" || rep.body["pattern"] != "shard:*" {
		t.Fatalf("direct acquire with no state recorded: %d %s, want 403 direct_client_gated naming shard:*", rep.status, rep.raw)
	}
	if rep := r.step(t, "observe", false, "moving indexers"); rep.status != http.StatusOK || rep.body["state"] != "observe" {
		t.Fatalf("observe: %d %s", rep.status, rep.raw)
	}
	rep := r.doAs(t, directToken, "POST", "/v1/leases", map[string]any{"name": old, "owner_id": "old-1", "ttl_ms": ttl.Milliseconds()})
	if rep.status != http.StatusCreated {
		t.Fatalf("direct acquire in observe: %d %s", rep.status, rep.raw)
	}
	oldToken := rep.int("token")
	b.writeDirect(t, old, "observed", 3)
	tok := r.mustAcquire(t, fenced, "new-1", time.Minute)
	if p := r.produce(t, fenced, "new-1", tok, "b-1", 2); p.status != http.StatusOK {
		t.Fatalf("fenced produce: %d %s", p.status, p.raw)
	}

	if rep := r.doAs(t, directToken, "PATCH", "/v1/leases/"+old, map[string]any{"owner_id": "old-1", "token": oldToken, "ttl_ms": ttl.Milliseconds()}); rep.status != http.StatusOK {
		t.Fatalf("direct renew in observe: %d %s", rep.status, rep.raw)
	}
	if rep := r.step(t, "gated", false, ""); rep.status != http.StatusOK || len(rep.body["direct_leases"].([]any)) != 1 || rep.body["last_lapse"] == nil {
		t.Fatalf("gate: %d %s, want the direct lease listed with its lapse", rep.status, rep.raw)
	}
	renew := r.doAs(t, directToken, "PATCH", "/v1/leases/"+old, map[string]any{"owner_id": "old-1", "token": oldToken, "ttl_ms": ttl.Milliseconds()})
	if renew.status != http.StatusForbidden || renew.code() != "direct_client_gated" {
		t.Fatalf("direct renew in gated: %d %s, want 403 direct_client_gated", renew.status, renew.raw)
	}
	if rep := r.doAs(t, directToken, "POST", "/v1/leases", map[string]any{"name": "shard:37", "owner_id": "old-2", "ttl_ms": 1000}); rep.status != http.StatusForbidden {
		t.Fatalf("direct acquire in gated: %d %s", rep.status, rep.raw)
	}
	b.writeDirect(t, old, "gated", 2) // the old binary still writes until its lease lapses
	if rep := r.step(t, "enforced", false, ""); rep.status != http.StatusConflict || rep.code() != "rollout_step_refused" {
		t.Fatalf("enforce with a direct lease live: %d %s, want 409 rollout_step_refused", rep.status, rep.raw)
	}
	b.waitExpired(t, old)
	if rep := r.step(t, "enforced", false, ""); rep.status != http.StatusOK || len(rep.body["acl_plan"].([]any)) != 1 {
		t.Fatalf("enforce after the lapse: %d %s, want 200 with the ACL plan", rep.status, rep.raw)
	}
	b.writeDirect(t, old, "enforced", 2) // the frozen old binary wakes and writes
	if p := r.produce(t, fenced, "new-1", tok, "b-2", 2); p.status != http.StatusOK {
		t.Fatalf("fenced produce after enforce: %d %s", p.status, p.raw)
	}

	b.materialize(t, old, b.read(t, old))
	for q, want := range map[string]int64{
		`SELECT count(*) FROM kept_records WHERE verdict = 'malformed' AND encode(value, 'escape') IN ('observed', 'gated')`: 5,
		`SELECT count(*) FROM kept_records WHERE encode(value, 'escape') = 'enforced'`:                                       0,
		`SELECT count(*) FROM rejected_records WHERE reason = 'malformed'`:                                                   2,
		`SELECT count(*) FROM accepted_records WHERE lease = 'shard:21'`:                                                     4,
		`SELECT count(DISTINCT (batch_id, seq)) FROM accepted_records WHERE lease = 'shard:21'`:                              4,
		`SELECT count(*) FROM rollout_events WHERE pattern = 'shard:*' AND actor = 'ops'`:                                    3,
	} {
		if n := b.count(t, q); n != want {
			t.Errorf("%s = %d, want %d", q, n, want)
		}
	}
}
