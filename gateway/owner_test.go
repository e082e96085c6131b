package gateway_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"
)

// TestFM38_OwnerBoundToItsCredential: a lease's owner id is bound to the
// credential that acquired it. Another client allowed the same leases
// reads the lease without its token, and produce, renew, release and a
// new generation with that owner id and token are refused 403 forbidden,
// with nothing written and the row unchanged. An operator client whose
// act_for names it may read the token and release.
func TestFM38_OwnerBoundToItsCredential(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.newReplica(nil)
	lease := "shard:38"
	token := r.mustAcquire(t, lease, "w1", 30*time.Second)
	if rep := r.doAs(t, otherToken, "GET", "/v1/leases/"+lease, nil); rep.status != http.StatusOK || rep.body["token"] != nil {
		t.Fatalf("GET by another client: %d %s, want 200 without the token", rep.status, rep.raw)
	}
	for _, who := range []string{devToken, opsToken} {
		if rep := r.doAs(t, who, "GET", "/v1/leases/"+lease, nil); rep.int("token") != token {
			t.Fatalf("GET by the owning credential or an operator: %d %s, want token %d", rep.status, rep.raw, token)
		}
	}
	forbidden := func(what string, rep reply) {
		t.Helper()
		if rep.status != http.StatusForbidden || rep.code() != "forbidden" {
			t.Fatalf("%s as w1 from another client: %d %s, want 403 forbidden", what, rep.status, rep.raw)
		}
	}
	forbidden("produce", r.doAs(t, otherToken, "POST", "/v1/leases/"+lease+"/records", batchBody("w1", token, "stolen", 1)))
	forbidden("renew", r.doAs(t, otherToken, "PATCH", "/v1/leases/"+lease, map[string]any{"owner_id": "w1", "token": token, "ttl_ms": 30000}))
	release := fmt.Sprintf("/v1/leases/%s?owner_id=w1&token=%d", lease, token)
	forbidden("release", r.doAs(t, otherToken, "DELETE", release, nil))
	forbidden("new generation", r.doAs(t, otherToken, "POST", "/v1/leases",
		map[string]any{"name": lease, "owner_id": "w1", "ttl_ms": 30000, "token": token}))
	if l, err := b.store.Get(b.ctx, lease); err != nil || l.Token != token || l.State != "active" {
		t.Fatalf("the lease row after the refused calls: %+v %v", l, err)
	}
	if n := batchRecords(b.read(t, lease), "stolen"); n != 0 {
		t.Fatalf("%d records of the other client written", n)
	}
	log := &ackLog{}
	b.mustProduce(t, r, log, lease, "w1", token, "own", 1)
	if rep := r.doAs(t, opsToken, "DELETE", release, nil); rep.status != http.StatusNoContent {
		t.Fatalf("release by an operator that acts for every client: %d %s", rep.status, rep.raw)
	}
}
