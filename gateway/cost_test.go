package gateway_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencegate/fencegate/client/wire"
)

// cpuTime is the CPU time (user + system) this process has used.
func cpuTime(t testing.TB) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// manyHeaders is a batch of one record with n distinct headers.
func manyHeaders(token int64, n int) wire.Batch {
	hs := make([]wire.Header, n)
	for i := range hs {
		hs[i] = wire.Header{Name: fmt.Sprintf("h%05d", i), Value: []byte("v")}
	}
	return wire.Batch{OwnerID: "w1", Token: token, BatchID: "b1", Records: []wire.Record{{Value: []byte("x"), Headers: hs}}}
}

// jsonHeaders is the JSON body of one record with n distinct headers.
func jsonHeaders(token int64, n int) []byte {
	hs := make(map[string]string, n)
	for i := range n {
		hs[fmt.Sprintf("h%05d", i)] = "v"
	}
	raw, _ := json.Marshal(map[string]any{"owner_id": "w1", "token": token, "batch_id": "b1",
		"records": []any{map[string]any{"value": map[string]any{"type": "STRING", "data": "x"}, "headers": hs}}})
	return raw
}

// TestFM39_HeaderFloodRefusedBeforeWork: a record with 60,000 headers
// (296 KB binary, for a lease with no session) is answered 413
// payload_too_large, in either body, for about what a 100-header record
// costs: the header count is a limit checked while decoding, before any
// per-header work. Before, checkRecord compared every name with every
// earlier one first: 5.9 s of CPU for one such body before its 409.
//
// Not parallel: it measures the process's CPU time, which other tests
// running at once would add to.
func TestFM39_HeaderFloodRefusedBeforeWork(t *testing.T) {
	b := setup(t)
	r := b.newReplica(nil)
	const path = "/v1/leases/shard:39/records" // no session: a small record is 409 not_holder
	cost := func(body any, want int) time.Duration {
		t.Helper()
		start := cpuTime(t)
		rep := r.do(t, "POST", path, body)
		took := cpuTime(t) - start
		if rep.status != want {
			t.Fatalf("%d %s, want %d", rep.status, rep.raw, want)
		}
		return took
	}
	for _, body := range []struct {
		name        string
		small, huge any
	}{
		{"binary", manyHeaders(1, 100), manyHeaders(1, 60000)},
		{"json", jsonHeaders(1, 100), jsonHeaders(1, 60000)},
	} {
		// The small record's cost: the mean of several, at least 1ms (the
		// clock's resolution may be a scheduler tick).
		const n = 10
		var small time.Duration
		for range n {
			small += cost(body.small, http.StatusConflict)
		}
		small = max(small/n, time.Millisecond)
		huge := cost(body.huge, http.StatusRequestEntityTooLarge)
		t.Logf("%s: 100 headers %v, 60,000 headers %v (ratio %.1f)", body.name, small, huge, float64(huge)/float64(small))
		// The JSON body of 60,000 headers is 800 KB that the decoder reads
		// through (linear) before it reaches the headers; quadratic, the
		// ratio was thousands.
		if huge > 50*small {
			t.Errorf("%s: a record of 60,000 headers cost %v of CPU, over 50 times a 100-header record's %v", body.name, huge, small)
		}
	}
	// A repeated name is refused, in linear time too.
	hs := manyHeaders(1, 50)
	hs.Records[0].Headers[49].Name = hs.Records[0].Headers[3].Name
	if rep := r.do(t, "POST", path, hs); rep.status != http.StatusBadRequest || !strings.Contains(string(rep.raw), "appears twice") {
		t.Fatalf("repeated header: %d %s, want 400 naming it", rep.status, rep.raw)
	}
}
