package gateway_test

import (
	"bytes"
	"net/http"
	"testing"
	"time"

	"github.com/fencegate/fencegate/gateway"
)

// TestFM89_ReplicaCredentialOpensOnlyForwardedRoutes: the replicas'
// credential, naming the operator client (admin, act_for *), opens none
// of the routes replicas never forward: acquire, the lease list and
// view, a checkpoint read, both watches and the admin API are 401, and
// nothing is granted. Before, it acted as any client on every route.
func TestFM89_ReplicaCredentialOpensOnlyForwardedRoutes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.forwarding(0)
	r := b.newReplica(slowBeat)
	b.withAdmin(r)
	r.watch(t, b, gateway.WatchConfig{})
	cases := []struct{ method, path, body string }{
		{"POST", "/v1/leases", `{"name":"shard:89","owner_id":"w","ttl_ms":30000}`},
		{"GET", "/v1/leases?prefix=shard:", ""},
		{"GET", "/v1/leases/shard:89", ""},
		{"GET", "/v1/leases/shard:89/checkpoint?owner_id=w&token=1&wait=0s", ""},
		{"GET", "/v1/leases/shard:89/events", ""},
		{"GET", "/v1/events?prefix=shard:", ""},
		{"GET", "/v1/admin/rollouts", ""},
		{"POST", "/v1/admin/rollouts", `{"pattern":"shard:*","state":"observe","reason":"x"}`},
	}
	for _, tc := range cases {
		req, err := http.NewRequest(tc.method, r.srv.URL+tc.path, bytes.NewReader([]byte(tc.body)))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Fencegate-Replica "+string(replicaCredential))
		req.Header.Set("Fencegate-Forwarded-By", "replica-x")
		req.Header.Set("Fencegate-Forwarded-Client", "ops")
		// Status only: a watch stream let through would never end.
		resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s %s with the replica credential: %d, want 401", tc.method, tc.path, resp.StatusCode)
		}
	}
	if n := r.g.Sessions(); n != 0 {
		t.Fatalf("%d sessions granted through the replica credential, want none", n)
	}
}

// TestFM89_ForwardedReleaseRecordsTheReplica: a release forwarded to the
// holder is recorded in lease_events with the replica that forwarded it,
// and the lease view shows it (forwarded_by); a release served where it
// arrived records none.
func TestFM89_ForwardedReleaseRecordsTheReplica(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.forwarding(0)
	holder, other := b.newReplica(slowBeat), b.newReplica(slowBeat)
	for _, tc := range []struct {
		lease string
		at    *replica
		want  string
	}{{"shard:891", other, other.name}, {"shard:892", holder, ""}} {
		token := holder.mustAcquire(t, tc.lease, "w1", 30*time.Second)
		if rep := tc.at.do(t, "DELETE", "/v1/leases/"+tc.lease+"?owner_id=w1&token="+itoa(token), nil); rep.status != http.StatusNoContent {
			t.Fatalf("release of %s: %d %s", tc.lease, rep.status, rep.raw)
		}
		var by *string
		if err := b.db.Pool.QueryRow(b.ctx, `SELECT forwarded_by FROM lease_events WHERE name = $1 AND kind = 'released'`, tc.lease).Scan(&by); err != nil {
			t.Fatal(err)
		}
		if got := deref(by); got != tc.want {
			t.Errorf("%s: released event forwarded_by %q, want %q", tc.lease, got, tc.want)
		}
		rep := holder.do(t, "GET", "/v1/leases/"+tc.lease, nil)
		ev := rep.body["events"].([]any)[0].(map[string]any)
		if got, _ := ev["forwarded_by"].(string); ev["kind"] != "released" || got != tc.want {
			t.Errorf("%s: newest event in the view %v, want released forwarded_by %q", tc.lease, ev, tc.want)
		}
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
