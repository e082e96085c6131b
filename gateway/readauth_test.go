package gateway_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"
)

// TestReadsAuthorisedByPattern: the operator views answer a client only
// about leases its patterns allow, like writes: 403 on another lease's
// view (its owner, token and events stay hidden), and the list leaves
// other leases out.
func TestReadsAuthorisedByPattern(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.newReplica(nil)
	r.mustAcquire(t, "shard:12", "w-narrow", 30*time.Second) // inside "shard:1?"
	r.mustAcquire(t, "shard:200", "w-wide", 30*time.Second)  // outside it

	if rep := r.doAs(t, "narrow-token", "GET", "/v1/leases/shard:200", nil); rep.status != http.StatusForbidden || rep.code() != "forbidden" {
		t.Fatalf("narrow client reads shard:200: %d %s", rep.status, rep.raw)
	}
	if rep := r.doAs(t, "narrow-token", "GET", "/v1/leases/shard:12", nil); rep.status != http.StatusOK {
		t.Fatalf("narrow client reads shard:12: %d %s", rep.status, rep.raw)
	}
	names := func(token string) map[string]bool {
		rep := r.doAs(t, token, "GET", "/v1/leases?prefix=shard:", nil)
		if rep.status != http.StatusOK {
			t.Fatalf("list: %d %s", rep.status, rep.raw)
		}
		var body struct {
			Leases []struct{ Name string } `json:"leases"`
		}
		if err := json.Unmarshal(rep.raw, &body); err != nil {
			t.Fatal(err)
		}
		out := map[string]bool{}
		for _, l := range body.Leases {
			out[l.Name] = true
		}
		return out
	}
	if got := names("narrow-token"); !got["shard:12"] || got["shard:200"] || len(got) != 1 {
		t.Fatalf("narrow client lists %v, want only shard:12", got)
	}
	if got := names(devToken); !got["shard:12"] || !got["shard:200"] {
		t.Fatalf("wide client lists %v, want both", got)
	}
}
