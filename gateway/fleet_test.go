package gateway_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/gateway"
)

// TestFM88_ReplicaCredentialGoesOnlyToTheFleet: a lease whose holder is
// registered in the replicas table under an address that is not of the
// fleet (another host; plain http:// while the fleet speaks TLS) is
// answered 421 without that address, and the address receives nothing:
// not the request, not the replicas' credential. Before, the forwarder
// sent the credential to whatever URL the table held.
func TestFM88_ReplicaCredentialGoesOnlyToTheFleet(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.forwarding(0)
	sent := make(chan string, 16)
	rogue := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sent <- r.Header.Get("Authorization")
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(rogue.Close)
	plain := b.newReplica(slowBeat)
	tlsFleet := b.newReplica(func(c *gateway.Config) {
		slowBeat(c)
		c.AdvertiseURL = strings.Replace(c.AdvertiseURL, "http://", "https://", 1)
	})
	cases := []struct {
		name, url string
		at        *replica
	}{
		{"a host outside the fleet", strings.Replace(rogue.URL, "127.0.0.1", "localhost", 1), plain},
		{"plain HTTP where the fleet speaks TLS", rogue.URL, tlsFleet},
	}
	for i, tc := range cases {
		lease, holder := "shard:88"+itoa(int64(i)), "rogue-"+itoa(int64(i))
		l, err := b.store.Acquire(context.Background(), lease, "w1", time.Minute, holder, "worker", "")
		if err != nil {
			t.Fatal(err)
		}
		rep := b.untilRegistered(t, holder, tc.url, func() reply { return tc.at.produce(t, lease, "w1", l.Token, "b1", 1) })
		if rep.status != http.StatusMisdirectedRequest || rep.body["holder_url"] != nil || rep.body["holder"] != holder {
			t.Errorf("%s: %d %s, want 421 naming the holder without its address", tc.name, rep.status, rep.raw)
		}
	}
	select {
	case auth := <-sent:
		t.Fatalf("the address outside the fleet received a request (Authorization %q)", auth)
	default:
	}
}

// untilRegistered heartbeats holder at url and sends the request until
// it is answered while the holder is live (a heartbeat staler than three
// intervals makes the lease nobody's: not_holder).
func (b *testBundle) untilRegistered(t *testing.T, holder, url string, send func() reply) reply {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if err := b.store.Heartbeat(context.Background(), holder, url); err != nil {
			t.Fatal(err)
		}
		rep := send()
		if rep.code() != "not_holder" || time.Now().After(deadline) {
			return rep
		}
	}
}

// TestForwardRefusesAReplicaOutsideItsOwnFleet: a replica whose own
// advertise URL is not of its fleet does not start forwarding: it would
// register an address the fleet does not forward to.
func TestForwardRefusesAReplicaOutsideItsOwnFleet(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.newReplica(nil)
	err := r.server.Forward(gateway.Forwarding{Credential: replicaCredential, Fleet: []string{"*.replicas.example:8443"}})
	if err == nil || !strings.Contains(err.Error(), "advertise URL") {
		t.Fatalf("Forward with an advertise URL outside the fleet: %v, want a refusal", err)
	}
}
