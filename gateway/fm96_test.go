package gateway_test

import (
	"net/http"
	"testing"
	"time"
)

// TestFM96_NewGenerationWithATTLOutOfBoundsIs400: a request for a new generation
// whose ttl_ms the store refuses (1 ms, below --min-ttl) is 400
// invalid_request, never 503. The store call that checks the caller may
// move the lease (FM38) is bounded by a budget drawn from the TTL: with a
// TTL of 1 ms it timed out before the store judged the TTL, and the answer
// was 503 store_unavailable, a server error for a bad request
// (schemathesis found it). Every time, whatever the race.
func TestFM96_NewGenerationWithATTLOutOfBoundsIs400(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.newReplica(nil)
	token := r.mustAcquire(t, "shard:4301", "w1", 30*time.Second)
	for i := range 20 {
		for _, tok := range []int64{token, token + 1000} {
			rep := r.regenerate(t, "shard:4301", "w1", tok, time.Millisecond)
			if rep.status != http.StatusBadRequest || rep.code() != "invalid_request" {
				t.Fatalf("attempt %d, token %d, ttl_ms 1: %d %s, want 400 invalid_request", i, tok, rep.status, rep.raw)
			}
		}
	}
}
