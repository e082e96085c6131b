package gateway_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/client"
	"github.com/fencegate/fencegate/gateway"
)

// replicaCredential is the forwarding tests' shared credential.
var replicaCredential = []byte("test replica credential 0123456789abcdef")

// forwarding sets the bundle's replicas to forward with answerIn as the
// answer bound (0: the default).
func (b *testBundle) forwarding(answerIn time.Duration) {
	b.forward = &gateway.Forwarding{Credential: replicaCredential, AnswerTimeout: answerIn}
}

// TestFM50_ForwardedToTheHolder: a replica without the lease's session
// passes produce, renew and release to the holder, and the client gets
// the holder's answers: 200 with offsets, 200, 204. Without forwarding
// each would be 421 (TestRegistryMisdirectsToHolder).
func TestFM50_ForwardedToTheHolder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.forwarding(0)
	holder, other := b.newReplica(slowBeat), b.newReplica(slowBeat)
	token := holder.mustAcquire(t, "shard:50", "w1", 30*time.Second)
	log := &ackLog{}
	b.mustProduce(t, other, log, "shard:50", "w1", token, "b1", 3)
	rep := other.do(t, "PATCH", "/v1/leases/shard:50", map[string]any{"owner_id": "w1", "token": token, "ttl_ms": 30000})
	if rep.status != http.StatusOK || rep.int("token") != token {
		t.Fatalf("renew through the other replica: %d %s", rep.status, rep.raw)
	}
	if other.g.Sessions() != 0 {
		t.Fatalf("the forwarding replica holds %d sessions: it must not take the lease", other.g.Sessions())
	}
	b.checkInvariants(t, "shard:50", log)
	rep = other.do(t, "DELETE", "/v1/leases/shard:50?owner_id=w1&token="+itoa(token), nil)
	if rep.status != http.StatusNoContent {
		t.Fatalf("release through the other replica: %d %s", rep.status, rep.raw)
	}
	if holder.g.Sessions() != 0 {
		t.Fatalf("the holder still has %d sessions after the forwarded release", holder.g.Sessions())
	}
}

// TestFM50_OneHop: a request that arrived forwarded is answered where it
// arrived, never forwarded again. The replica asked holds nothing, so it
// answers 421 toward the holder; forwarded on, the holder would have
// committed the batch (200).
func TestFM50_OneHop(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.forwarding(0)
	holder, other := b.newReplica(slowBeat), b.newReplica(slowBeat)
	token := holder.mustAcquire(t, "shard:51", "w1", 30*time.Second)
	rep := forwardedProduce(t, other, string(replicaCredential), "worker", "shard:51", token)
	if rep.status != http.StatusMisdirectedRequest || rep.body["holder_url"] != holder.srv.URL {
		t.Fatalf("a forwarded request at a replica without the session: %d %s, want 421 toward the holder", rep.status, rep.raw)
	}
}

// TestFM50_ForwardedIdentityNeedsTheCredential: only a replica holding the
// credential may name the client of a request. A client adding the
// headers with its own token, a wrong credential, and a replica without
// forwarding are all refused 401; nothing is written.
func TestFM50_ForwardedIdentityNeedsTheCredential(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.forwarding(0)
	holder := b.newReplica(slowBeat)
	b.forward = nil
	plain := b.newReplica(slowBeat)
	token := holder.mustAcquire(t, "shard:52", "w1", 30*time.Second)
	cases := []struct {
		name, auth string
		at         *replica
	}{
		{"a client's own token with the forwarded headers", "Bearer " + devToken, holder},
		{"a wrong credential", "Fencegate-Replica not-the-credential-0123456789abcdef", holder},
		{"the right credential at a replica without forwarding", "Fencegate-Replica " + string(replicaCredential), plain},
	}
	for _, tc := range cases {
		rep := forwardedAs(t, tc.at, tc.auth, "worker", "shard:52", token)
		if rep.status != http.StatusUnauthorized || rep.code() != "unauthorized" {
			t.Errorf("%s: %d %s, want 401", tc.name, rep.status, rep.raw)
		}
	}
	if got := len(b.read(t, "shard:52")); got != 1 {
		t.Fatalf("%d records on the lease's partition, want the barrier only", got)
	}
	rep := forwardedProduce(t, holder, string(replicaCredential), "nobody", "shard:52", token)
	if rep.status != http.StatusUnauthorized {
		t.Fatalf("a forwarded request naming an unknown client: %d %s, want 401", rep.status, rep.raw)
	}
}

// TestFM50_UnreachableHolderIsMisdirected: a holder that heartbeats but
// cannot be reached was sent nothing, so the answer stays definite: 421
// with its address, as without forwarding.
func TestFM50_UnreachableHolderIsMisdirected(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.forwarding(0)
	holder, other := b.newReplica(slowBeat), b.newReplica(slowBeat)
	token := holder.mustAcquire(t, "shard:53", "w1", 30*time.Second)
	url := holder.srv.URL
	holder.srv.Close() // the listener is gone; the gateway still heartbeats
	rep := other.produce(t, "shard:53", "w1", token, "b1", 1)
	if rep.status != http.StatusMisdirectedRequest || rep.body["holder_url"] != url {
		t.Fatalf("produce toward an unreachable holder: %d %s, want 421 with holder_url %s", rep.status, rep.raw, url)
	}
	if got := client.ProduceOutcome(rep.status, rep.code()); got != client.OutcomeRefused {
		t.Fatalf("the answer table reads %d %s as %s, want a definite refusal", rep.status, rep.code(), got)
	}
}

// TestFM50_UnansweredForwardIsOutcomeUnknown: a forwarded batch the holder
// admits and does not answer within the bound is answered 502
// forward_failed, which the answer table reads as outcome unknown; the
// holder then commits it, and the retry of the same batch_id gets the
// original offsets. A definite refusal here would be a lie: the batch is
// in the topic.
func TestFM50_UnansweredForwardIsOutcomeUnknown(t *testing.T) {
	t.Parallel()
	b := setup(t)
	g := newGate(gateway.HookBeforeCommit, "shard:54")
	defer g.open()
	b.forwarding(0)
	holder := b.newReplica(func(c *gateway.Config) { slowBeat(c); hooks(g)(c) })
	b.forwarding(300 * time.Millisecond)
	other := b.newReplica(slowBeat)
	token := holder.mustAcquire(t, "shard:54", "w1", 30*time.Second)
	rep := other.produce(t, "shard:54", "w1", token, "b1", 2)
	if rep.status != http.StatusBadGateway || rep.code() != "forward_failed" {
		t.Fatalf("a batch the holder did not answer: %d %s, want 502 forward_failed", rep.status, rep.raw)
	}
	if got := client.ProduceOutcome(rep.status, rep.code()); got != client.OutcomeUnknown {
		t.Fatalf("the answer table reads 502 forward_failed as %s, want outcome unknown", got)
	}
	g.wait(t)
	g.open()
	log := &ackLog{}
	eventually(t, 20*time.Second, func() (bool, string) {
		rep = other.produce(t, "shard:54", "w1", token, "b1", 2)
		return rep.status == http.StatusOK, string(rep.raw)
	})
	b.mustProduceReplied(t, log, "shard:54", token, "b1", rep)
	b.checkInvariants(t, "shard:54", log)
}

// TestFM50_ForwardStreamsTheBody: the forwarder does not read the body it
// forwards: a batch above its own request limit, within the holder's,
// passes through it and commits.
func TestFM50_ForwardStreamsTheBody(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.forwarding(0)
	holder := b.newReplica(slowBeat)
	other := b.newReplica(func(c *gateway.Config) { slowBeat(c); c.Limits.MaxRequestBytes = 4 << 10 })
	token := holder.mustAcquire(t, "shard:55", "w1", 30*time.Second)
	body := batchBody("w1", token, "big", 1)
	body["records"] = []map[string]any{{"value": map[string]any{"type": "STRING", "data": strings.Repeat("x", 64<<10)}}}
	log := &ackLog{}
	b.mustProduceReplied(t, log, "shard:55", token, "big", other.do(t, "POST", "/v1/leases/shard:55/records", body))
	b.checkInvariants(t, "shard:55", log)
}

// TestFM50_ForwardedPastAnOlderLocalSession: a replica that still holds an
// older generation of the lease (the owner moved it away with its token)
// forwards the current generation's batch to the new holder instead of
// judging it by the old session.
func TestFM50_ForwardedPastAnOlderLocalSession(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.forwarding(0)
	old, holder := b.newReplica(slowBeat), b.newReplica(slowBeat)
	first := old.mustAcquire(t, "shard:56", "w1", 30*time.Second)
	rep := holder.regenerate(t, "shard:56", "w1", first, 30*time.Second)
	if rep.status != http.StatusCreated {
		t.Fatalf("moving the lease: %d %s", rep.status, rep.raw)
	}
	token := rep.int("token")
	log := &ackLog{}
	b.mustProduce(t, old, log, "shard:56", "w1", token, "b1", 2)
	b.checkInvariants(t, "shard:56", log)
}

// forwardedProduce sends a one-record batch as a replica forwarding it
// for client would.
func forwardedProduce(t *testing.T, at *replica, credential, client, name string, token int64) reply {
	t.Helper()
	return forwardedAs(t, at, "Fencegate-Replica "+credential, client, name, token)
}

func forwardedAs(t *testing.T, at *replica, auth, client, name string, token int64) reply {
	t.Helper()
	raw, err := json.Marshal(batchBody("w1", token, "fwd", 1))
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest("POST", at.srv.URL+"/v1/leases/"+name+"/records", bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", auth)
	req.Header.Set("Fencegate-Forwarded-By", "replica-x")
	req.Header.Set("Fencegate-Forwarded-Client", client)
	return send(t, req)
}
