package gateway_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fencegate/fencegate/client/wire"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/verify"
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
		// ratio was thousands (-race: x4).
		if bound := 50 * raceScale; huge > time.Duration(bound)*small {
			t.Errorf("%s: a record of 60,000 headers cost %v of CPU, over %d times a 100-header record's %v", body.name, huge, bound, small)
		}
	}
	// A repeated name is refused, in linear time too.
	hs := manyHeaders(1, 50)
	hs.Records[0].Headers[49].Name = hs.Records[0].Headers[3].Name
	if rep := r.do(t, "POST", path, hs); rep.status != http.StatusBadRequest || !strings.Contains(string(rep.raw), "appears twice") {
		t.Fatalf("repeated header: %d %s, want 400 naming it", rep.status, rep.raw)
	}
}

// TestFM39_BodiesInFlightShareABudget: request bodies in flight, across
// all clients, share MaxBodyBytesInFlight, taken for the declared length
// before the body is read. With three produces of about 1 MiB held after
// their admission (budget 3.5 MiB), a fourth is answered 429 with
// Retry-After at once and is never written; a renewal still passes; the
// three commit once released. Before, nothing bounded bodies in flight
// but the request caps: 24 bodies of 16 MB took RSS from 332 MB to 1.91 GB.
func TestFM39_BodiesInFlightShareABudget(t *testing.T) {
	t.Parallel()
	b := setup(t)
	arrived, release := make(chan string, 8), make(chan struct{})
	var once sync.Once
	open := func() { once.Do(func() { close(release) }) }
	t.Cleanup(open) // a failing test must not leave produces blocked
	r := b.newReplica(func(c *gateway.Config) {
		c.Hooks.Fn = func(h gateway.Hook, lease string, _ int64) {
			if h == gateway.HookAdmitted {
				arrived <- lease
				<-release
			}
		}
	})
	r.server.Limit(gateway.ServerConfig{MaxBodyBytesInFlight: 3<<20 + 512<<10})
	leases := []string{"shard:391", "shard:392", "shard:393", "shard:394"}
	tokens := map[string]int64{}
	for _, l := range leases {
		tokens[l] = r.mustAcquire(t, l, "w1", time.Minute)
	}
	big := func(lease, batch string) []byte {
		raw, _ := json.Marshal(map[string]any{"owner_id": "w1", "token": tokens[lease], "batch_id": batch, "records": []any{
			map[string]any{"value": map[string]any{"type": "BINARY", "data": make([]byte, 700<<10)}}}}) // ~ 1 MiB of base64
		return raw
	}
	replies := make(chan reply, 3)
	for _, l := range leases[:3] {
		go func() { replies <- r.do(t, "POST", "/v1/leases/"+l+"/records", big(l, "b-1")) }()
	}
	for range 3 {
		select {
		case <-arrived:
		case rep := <-replies:
			t.Fatalf("a large produce within the budget: %d %s", rep.status, rep.raw)
		case <-time.After(30 * time.Second):
			t.Fatal("three large produces were not all admitted")
		}
	}
	fourth := make(chan reply, 1)
	go func() { fourth <- r.do(t, "POST", "/v1/leases/shard:394/records", big("shard:394", "b-4")) }()
	select {
	case rep := <-fourth:
		if rep.status != http.StatusTooManyRequests || rep.code() != "too_many_requests" || rep.header.Get("Retry-After") == "" {
			t.Fatalf("a fourth large body beyond the budget: %d %s, want 429 with Retry-After", rep.status, rep.raw)
		}
	case <-arrived:
		t.Fatal("a fourth large body beyond the budget was admitted")
	}
	renew := r.do(t, "PATCH", "/v1/leases/shard:394", map[string]any{"owner_id": "w1", "token": tokens["shard:394"], "ttl_ms": 60000})
	if renew.status != http.StatusOK {
		t.Fatalf("a renewal while the budget is held: %d %s", renew.status, renew.raw)
	}
	open()
	logs := map[string]*ackLog{}
	for _, l := range leases {
		logs[l] = &ackLog{}
	}
	for range 3 {
		rep := <-replies
		if rep.status != http.StatusOK {
			t.Fatalf("a held produce: %d %s", rep.status, rep.raw)
		}
		var res gateway.ProduceResult
		if err := json.Unmarshal(rep.raw, &res); err != nil {
			t.Fatal(err)
		}
		logs[res.Name].acked = append(logs[res.Name].acked, verify.Batch{Lease: res.Name, Token: res.Token, BatchID: "b-1", Offsets: res.Offsets})
	}
	for _, l := range leases {
		want := 2 // the barrier and the batch
		if l == "shard:394" {
			want = 1 // the barrier only: the refused body was never written
		}
		var n int
		for _, rec := range b.checkInvariants(t, l, logs[l]) {
			if rec.Lease == l {
				n++
			}
		}
		if n != want {
			t.Errorf("%s: %d records, want %d", l, n, want)
		}
	}
}
