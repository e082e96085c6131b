package gateway_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/fencegate/fencegate/gateway"
)

// TestFM46_SessionsCappedPerClientAndInTotal: a client holds at most
// MaxSessionsPerClient sessions on a replica, and the replica at most
// MaxSessions; an acquire beyond either is refused 429 with Retry-After
// before any grant (no lease row), while another client, a new generation
// of a lease the client holds, and an acquire after a release go on.
// Before, one client took 1,200 leases (6,020 threads).
func TestFM46_SessionsCappedPerClientAndInTotal(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.newReplica(func(c *gateway.Config) { c.MaxSessionsPerClient, c.MaxSessions = 2, 3 })
	acquireAs := func(token, name string) reply {
		return r.doAs(t, token, "POST", "/v1/leases", map[string]any{"name": name, "owner_id": "w-" + token, "ttl_ms": 30000})
	}
	refused := func(what string, rep reply, name string) {
		t.Helper()
		if rep.status != http.StatusTooManyRequests || rep.code() != "too_many_requests" || rep.header.Get("Retry-After") == "" {
			t.Fatalf("%s: %d %s, want 429 with Retry-After", what, rep.status, rep.raw)
		}
		if l, err := b.store.Get(b.ctx, name); err == nil {
			t.Fatalf("%s left a lease row: %+v", what, l)
		}
	}
	first := acquireAs(devToken, "shard:461")
	if first.status != http.StatusCreated || acquireAs(devToken, "shard:462").status != http.StatusCreated {
		t.Fatalf("the client's first two acquires: %d %s", first.status, first.raw)
	}
	refused("the client's third session", acquireAs(devToken, "shard:463"), "shard:463")
	if rep := acquireAs(otherToken, "shard:464"); rep.status != http.StatusCreated {
		t.Fatalf("another client's first acquire: %d %s", rep.status, rep.raw)
	}
	refused("a session beyond the replica's total", acquireAs(otherToken, "shard:465"), "shard:465")
	moved := r.do(t, "POST", "/v1/leases", map[string]any{"name": "shard:461", "owner_id": "w-" + devToken, "ttl_ms": 30000, "token": first.int("token")})
	if moved.status != http.StatusCreated {
		t.Fatalf("a new generation of a lease the client holds: %d %s", moved.status, moved.raw)
	}
	release := fmt.Sprintf("/v1/leases/shard:461?owner_id=w-%s&token=%d", devToken, moved.int("token"))
	if rep := r.do(t, "DELETE", release, nil); rep.status != http.StatusNoContent {
		t.Fatalf("release: %d %s", rep.status, rep.raw)
	}
	if rep := acquireAs(devToken, "shard:463"); rep.status != http.StatusCreated {
		t.Fatalf("an acquire after a release: %d %s", rep.status, rep.raw)
	}
}

// TestFM47_OneClientCannotStarveAnothersHandovers: one client holds the
// only handover slot and fills the whole queue; another client's acquire
// takes the place of the flood's newest waiter (refused 429, nothing
// granted) and is served in turn, not after the flood: its token, drawn
// when its grant runs, is below those of at least two of the flood's
// grants. Before, the second client was answered 429 at once (23 of 31
// tries in the review).
func TestFM47_OneClientCannotStarveAnothersHandovers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	g := newGate(gateway.HookGranted, "shard:470")
	r := b.newReplica(func(c *gateway.Config) {
		c.MaxConcurrentHandovers, c.MaxHandoverQueue = 1, 4
		hooks(g)(c)
	})
	t.Cleanup(g.open) // a failure must not leave the held acquires blocking the server's cleanup
	held := make(chan reply, 1)
	go func() { held <- r.acquire(t, "shard:470", "w1", 30*time.Second) }()
	g.wait(t) // the only slot is the first client's
	flood := make(chan reply, 4)
	for i := range 4 {
		go func() { flood <- r.acquire(t, fmt.Sprintf("shard:%d", 471+i), "w1", 30*time.Second) }()
	}
	waitQueued(t, r, 4)
	other := make(chan reply, 1)
	go func() {
		other <- r.doAs(t, otherToken, "POST", "/v1/leases", map[string]any{"name": "shard:479", "owner_id": "o1", "ttl_ms": 30000})
	}()
	var answers []reply
	select {
	case rep := <-flood:
		answers = append(answers, rep)
	case rep := <-other:
		t.Fatalf("the other client's acquire behind a full queue: %d %s, want it to wait its turn", rep.status, rep.raw)
	}
	if answers[0].status != http.StatusTooManyRequests {
		t.Fatalf("the flood's acquire that made room: %d %s, want 429", answers[0].status, answers[0].raw)
	}
	waitQueued(t, r, 4) // three of the flood and the other client's
	g.open()
	if rep := <-held; rep.status != http.StatusCreated {
		t.Fatalf("the held acquire: %d %s", rep.status, rep.raw)
	}
	o := <-other
	if o.status != http.StatusCreated {
		t.Fatalf("the other client's acquire: %d %s, want 201", o.status, o.raw)
	}
	later := 0
	for range 3 {
		rep := <-flood
		if rep.status != http.StatusCreated {
			t.Fatalf("a queued acquire of the flood: %d %s", rep.status, rep.raw)
		}
		if rep.int("token") > o.int("token") {
			later++
		}
	}
	if later < 2 {
		t.Fatalf("%d of the flood's 3 queued grants came after the other client's, want at least 2 (served in turn)", later)
	}
}

func waitQueued(t *testing.T, r *replica, n int) {
	t.Helper()
	eventually(t, 10*time.Second, func() (bool, string) {
		return r.g.HandoversWaiting() == n, fmt.Sprintf("%d acquires waiting, want %d", r.g.HandoversWaiting(), n)
	})
}
