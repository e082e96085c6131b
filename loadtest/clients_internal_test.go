package loadtest

import (
	"testing"
	"time"
)

// TestDeferredAcquiresBackOffAsTheSDK: a worker whose acquire was
// deferred (429) waits as the SDK does: at least the Retry-After, and
// after a few deferrals 1-2 s with jitter, so that thousands of waiting
// workers do not come back in the same second.
func TestDeferredAcquiresBackOffAsTheSDK(t *testing.T) {
	t.Parallel()
	if d := sdkBackoff(1, time.Second); d != time.Second {
		t.Fatalf("first retry after a Retry-After of 1s: waits %v", d)
	}
	if d := sdkBackoff(1, 0); d < 25*time.Millisecond || d > 50*time.Millisecond {
		t.Fatalf("first retry without Retry-After: waits %v, want 25-50ms", d)
	}
	seen := map[time.Duration]bool{}
	for range 100 {
		d := sdkBackoff(20, time.Second)
		if d < time.Second || d > 2*time.Second {
			t.Fatalf("20th retry waits %v, want 1-2s", d)
		}
		seen[d] = true
	}
	if len(seen) < 10 {
		t.Fatalf("20th retries wait %d distinct times in 100: no jitter", len(seen))
	}
}
