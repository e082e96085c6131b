package sdktest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate/client"
	"github.com/fencegate/fencegate/gateway"
)

func recs(n int, tag string) []client.Record {
	out := make([]client.Record, n)
	for i := range out {
		out[i] = client.Record{Key: []byte(fmt.Sprintf("k%d", i)), Value: []byte(fmt.Sprintf("%s/%d", tag, i)),
			Headers: map[string]string{"app": "sdktest"}}
	}
	return out
}

// produce produces through the SDK and logs the acknowledged batch.
func produce(t testing.TB, l *client.Lease, a *acked, batch string, n int) client.Result {
	t.Helper()
	res, err := l.Produce(bg, batch, recs(n, batch))
	if err != nil {
		t.Fatalf("produce %s: %v", batch, err)
	}
	if len(res.Offsets) != n {
		t.Fatalf("produce %s: %d offsets, want %d", batch, len(res.Offsets), n)
	}
	a.add(l.Name(), batch, res)
	return res
}

// batchRecords counts the committed data records of batch under token.
func batchRecords(t testing.TB, b *bundle, lease, batch string, a *acked) map[int64]int {
	t.Helper()
	by := map[int64]int{}
	for _, r := range b.check(t, lease, a) {
		if !r.Barrier && r.Batch == batch {
			by[r.Token]++
		}
	}
	return by
}

// TestSDKLeaseOutlivesItsTTLByRenewing: background renewal keeps a lease
// well past its TTL; after Release the lease refuses to produce and says
// why.
func TestSDKLeaseOutlivesItsTTLByRenewing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.newReplica(nil)
	// TTL 3 s: at 1 s a renewal on a loaded machine (the suite beside
	// other work) outlasted the 750 ms left and the lease lapsed, and at
	// 2 s, once, the 1.5 s left (a make test beside other compiles).
	c := newClient(t, r.url, "w1", func(c *client.Config) { c.TTL, c.RenewEvery = 3*time.Second, 500*time.Millisecond })
	l, err := c.Acquire(bg, "shard:1")
	if err != nil {
		t.Fatal(err)
	}
	a := &acked{}
	past := time.Now().Add(7 * time.Second) // over two TTLs
	for n := 0; time.Now().Before(past); n++ {
		produce(t, l, a, fmt.Sprintf("b-%d", n), 1)
	}
	notLost(t, l)
	if err := l.Release(bg); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Produce(bg, "after", recs(1, "after")); !errors.Is(err, client.ErrLeaseLost) || !errors.Is(err, client.ErrReleased) {
		t.Fatalf("produce after release: %v, want ErrLeaseLost caused by ErrReleased", err)
	}
	b.check(t, "shard:1", a)
}

// gatedTransport holds renewals (PATCH) while closed: a worker whose
// renewals cannot get through, as if it were frozen.
type gatedTransport struct {
	mu   sync.Mutex
	gate chan struct{}
}

func (g *gatedTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	g.mu.Lock()
	gate := g.gate
	g.mu.Unlock()
	if gate != nil && r.Method == http.MethodPatch {
		<-gate
	}
	return http.DefaultTransport.RoundTrip(r)
}

func (g *gatedTransport) hold()    { g.mu.Lock(); g.gate = make(chan struct{}); g.mu.Unlock() }
func (g *gatedTransport) release() { g.mu.Lock(); close(g.gate); g.gate = nil; g.mu.Unlock() }

// TestSDKFrozenRenewalsLoseTheLease: a worker whose renewals do not get
// through stops writing at its local deadline (fail closed) and says why
// (ErrDeadlinePassed), while a waiting acquire takes the lease over.
func TestSDKFrozenRenewalsLoseTheLease(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.newReplica(nil)
	gt := &gatedTransport{}
	frozen := newClient(t, r.url, "w-old", func(c *client.Config) {
		c.TTL, c.RenewEvery, c.HTTP = time.Second, 200*time.Millisecond, &http.Client{Transport: gt}
	})
	other := newClient(t, r.url, "w-new", func(c *client.Config) { c.TTL = 10 * time.Second })
	l, err := frozen.Acquire(bg, "shard:2")
	if err != nil {
		t.Fatal(err)
	}
	gt.hold()
	ctx, cancel := context.WithTimeout(bg, 20*time.Second)
	defer cancel()
	taken, err := other.AcquireWait(ctx, "shard:2")
	if err != nil {
		t.Fatalf("waiting acquire: %v", err)
	}
	if _, err := l.Produce(bg, "late", recs(1, "late")); !errors.Is(err, client.ErrLeaseLost) || !errors.Is(err, client.ErrDeadlinePassed) {
		t.Fatalf("the frozen worker wrote after the takeover: %v", err)
	}
	gt.release()
	select {
	case <-l.Lost():
	case <-time.After(10 * time.Second):
		t.Fatal("Lost() never closed")
	}
	if !errors.Is(l.Err(), client.ErrDeadlinePassed) {
		t.Fatalf("Err() = %v, want ErrDeadlinePassed", l.Err())
	}
	a := &acked{}
	produce(t, taken, a, "new", 1)
	if err := taken.Release(bg); err != nil {
		t.Fatal(err)
	}
	b.check(t, "shard:2", a)
}

// TestSDKRetriesAmbiguousCommitUnderNewGeneration: the broker holds a
// commit (EndTxn) past the gateway's commit timeout, so the gateway
// answers generation_ended (outcome unknown). Produce asks for a new
// generation with the current token and retries the same batch id under
// it, and returns the retry's offsets; the lease is not lost, and the late
// EndTxn cannot touch the new generation.
func TestSDKRetriesAmbiguousCommitUnderNewGeneration(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.newReplica(func(c *gateway.Config) { c.CommitTimeout = time.Second })
	obs := &observed{}
	c := newClient(t, r.url, "w1", func(c *client.Config) { c.TTL, c.HTTP = 30*time.Second, &http.Client{Transport: obs} })
	l, err := c.Acquire(bg, "shard:22")
	if err != nil {
		t.Fatal(err)
	}
	first := l.Grant().Token
	a := &acked{}
	produce(t, l, a, "first", 2)
	entered, release := b.holdEndTxn()
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	res := produce(t, l, a, "ambiguous", 3)
	<-entered
	if obs.saw("POST generation_ended") != 1 {
		t.Fatalf("answers seen: %v; want one generation_ended", obs.all())
	}
	if res.Token <= first || l.Grant().Token != res.Token {
		t.Fatalf("the retry committed under token %d (lease at %d), want a new generation after %d", res.Token, l.Grant().Token, first)
	}
	close(release) // the delayed EndTxn reaches the coordinator now
	produce(t, l, a, "later", 3)
	notLost(t, l)
	if err := l.Release(bg); err != nil {
		t.Fatal(err)
	}
	by := batchRecords(t, b, "shard:22", "ambiguous", a)
	if by[res.Token] != 3 {
		t.Fatalf("batch ambiguous by token: %v, want 3 records under %d", by, res.Token)
	}
	t.Logf("answers: %v; batch ambiguous committed by token: %v", obs.all(), by)
}

// TestSDKFollowsMisdirectedToTheHolder: behind a load balancer that sends
// the worker's acquire to one replica and its other requests to another,
// the second answers 421 misdirected; the SDK resends the same batch to
// the holder_url, and keeps talking to the holder afterwards.
func TestSDKFollowsMisdirectedToTheHolder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	holder, other := b.newReplica(nil), b.newReplica(nil)
	lb := newBalancer(t, func(req *http.Request) *replica {
		if req.Method == http.MethodPost && req.URL.Path == "/v1/leases" {
			return holder
		}
		return other
	})
	obs := &observed{}
	c := newClient(t, lb.srv.URL, "w1", func(c *client.Config) { c.HTTP = &http.Client{Transport: obs} })
	l, err := c.Acquire(bg, "shard:421")
	if err != nil {
		t.Fatal(err)
	}
	tok := l.Grant().Token
	a := &acked{}
	res := produce(t, l, a, "b-1", 2)
	if obs.saw("POST misdirected") != 1 || res.Token != tok {
		t.Fatalf("answers %v, result token %d: want one misdirected, then the batch committed under %d", obs.all(), res.Token, tok)
	}
	// Renewals go to the holder directly now: the deadline moves and no
	// further 421 is seen.
	d := l.Deadline()
	eventually(t, 10*time.Second, "two renewals", func() bool { return l.Deadline().Sub(d) > 2*300*time.Millisecond })
	produce(t, l, a, "b-2", 2)
	if err := l.Release(bg); err != nil {
		t.Fatal(err)
	}
	if n := len(obs.all()); n != 1 {
		t.Fatalf("answers %v: want only the first misdirected", obs.all())
	}
	b.check(t, "shard:421", a)
}

// TestSDKRenewsAcrossDrain: the replica holding the session drains
// (SIGTERM). Its renewal answer is not_holder and its acquire answer
// draining; the SDK goes back to the load balancer, which now sends it to
// the other replica, and moves the lease there with its current token.
// Renewal alone does it (no produce needed), Lost() stays open, and the
// worker's next batch commits under the new generation.
func TestSDKRenewsAcrossDrain(t *testing.T) {
	t.Parallel()
	b := setup(t)
	draining, other := b.newReplica(nil), b.newReplica(nil)
	// The acquire reaches the first replica, the rest the second: the
	// worker follows a 421 and talks to the first replica directly.
	lb := newBalancer(t, func(req *http.Request) *replica {
		if req.Method == http.MethodPost && req.URL.Path == "/v1/leases" {
			return draining
		}
		return other
	})
	obs := &observed{}
	c := newClient(t, lb.srv.URL, "w1", func(c *client.Config) { c.HTTP = &http.Client{Transport: obs} })
	l, err := c.Acquire(bg, "shard:40")
	if err != nil {
		t.Fatal(err)
	}
	tok := l.Grant().Token
	a := &acked{}
	produce(t, l, a, "before", 2)
	// The balancer sees the replica turn unready and sends everything to
	// the other one.
	lb.setRoute(func(*http.Request) *replica { return other })
	if err := draining.gateway().Drain(bg); err != nil {
		t.Fatal(err)
	}
	eventually(t, 15*time.Second, "the lease moved by renewal", func() bool {
		return l.Grant().Token > tok && other.gateway().Sessions() == 1
	})
	notLost(t, l)
	res := produce(t, l, a, "after", 2)
	if res.Token != l.Grant().Token || res.Token <= tok {
		t.Fatalf("after the drain the batch committed under %d, want the new generation %d", res.Token, l.Grant().Token)
	}
	if obs.saw("PATCH not_holder") == 0 || obs.saw("POST draining") == 0 {
		t.Fatalf("answers %v: want a renewal answered not_holder and a new generation answered draining", obs.all())
	}
	t.Logf("answers: %v", obs.all())
	if err := l.Release(bg); err != nil {
		t.Fatal(err)
	}
	b.check(t, "shard:40", a)
}

// TestSDKRenewsAcrossRestart: the replica holding the session restarts
// (connections drop meanwhile, then a new process at the same address has
// no session). Renewal retries the transport errors, then moves the lease
// to the new process with its current token on not_holder; Lost() stays
// open and the next batch commits.
func TestSDKRenewsAcrossRestart(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.newReplica(nil)
	obs := &observed{}
	c := newClient(t, r.url, "w1", func(c *client.Config) { c.HTTP = &http.Client{Transport: obs} })
	l, err := c.Acquire(bg, "shard:7")
	if err != nil {
		t.Fatal(err)
	}
	tok := l.Grant().Token
	a := &acked{}
	produce(t, l, a, "before", 2)
	r.restart()
	eventually(t, 15*time.Second, "the lease moved by renewal", func() bool {
		return l.Grant().Token > tok && r.gateway().Sessions() == 1
	})
	notLost(t, l)
	produce(t, l, a, "after", 2)
	if obs.saw("PATCH not_holder") == 0 {
		t.Fatalf("answers %v: want a renewal answered not_holder", obs.all())
	}
	if err := l.Release(bg); err != nil {
		t.Fatal(err)
	}
	b.check(t, "shard:7", a)
}

// TestSDKAcquireWaitsForHeldLease: Acquire returns lease_held at once;
// AcquireWait retries until the holder releases, and gives up with the
// last answer when its context ends.
func TestSDKAcquireWaitsForHeldLease(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.newReplica(nil)
	first := newClient(t, r.url, "w1", nil)
	held, err := first.Acquire(bg, "shard:9")
	if err != nil {
		t.Fatal(err)
	}
	obs := &observed{seen: make(chan string, 64)}
	second := newClient(t, r.url, "w2", func(c *client.Config) { c.HTTP = &http.Client{Transport: obs} })

	_, err = second.Acquire(bg, "shard:9")
	var p *client.Problem
	if !errors.As(err, &p) || p.Code != client.CodeLeaseHeld || p.HolderOwnerID != "w1" || p.ExpiresAt.IsZero() {
		t.Fatalf("acquire of a held lease: %v (%+v), want lease_held naming w1 with expires_at", err, p)
	}

	short, cancel := context.WithTimeout(bg, 300*time.Millisecond)
	defer cancel()
	_, err = second.AcquireWait(short, "shard:9")
	if !errors.Is(err, context.DeadlineExceeded) || client.ErrorCode(err) != client.CodeLeaseHeld {
		t.Fatalf("waiting acquire past its context: %v, want DeadlineExceeded with the last answer lease_held", err)
	}

	type got struct {
		l   *client.Lease
		err error
	}
	done := make(chan got, 1)
	for len(obs.seen) > 0 {
		<-obs.seen
	}
	go func() {
		l, err := second.AcquireWait(bg, "shard:9")
		done <- got{l, err}
	}()
	for range 2 { // it was refused twice: it is waiting
		if code := <-obs.seen; code != "POST lease_held" {
			t.Fatalf("waiting acquire answered %s", code)
		}
	}
	if err := held.Release(bg); err != nil {
		t.Fatal(err)
	}
	g := <-done
	if g.err != nil {
		t.Fatalf("waiting acquire after the release: %v", g.err)
	}
	if g.l.Grant().OwnerID != "w2" || g.l.Grant().Token <= held.Grant().Token {
		t.Fatalf("grant %+v after %+v", g.l.Grant(), held.Grant())
	}
	a := &acked{}
	produce(t, g.l, a, "w2-1", 1)
	if err := g.l.Release(bg); err != nil {
		t.Fatal(err)
	}
	b.check(t, "shard:9", a)
}

// TestSDKLostSaysWhy: when another instance of the same owner moves the
// lease with the current token, the worker's next renewal is answered
// lease_lost; Lost() closes and Err() carries the gateway's Problem.
// Produce refuses from then on.
func TestSDKLostSaysWhy(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.newReplica(nil)
	c := newClient(t, r.url, "w1", nil)
	l, err := c.Acquire(bg, "shard:11")
	if err != nil {
		t.Fatal(err)
	}
	// A second process of owner w1 asks for a new generation with w1's
	// token: the token the SDK holds is superseded.
	body, _ := json.Marshal(map[string]any{"name": "shard:11", "owner_id": "w1", "ttl_ms": 30000, "token": l.Grant().Token})
	req, _ := http.NewRequest(http.MethodPost, r.url+"/v1/leases", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("new generation by another process: %d", resp.StatusCode)
	}
	select {
	case <-l.Lost():
	case <-time.After(10 * time.Second):
		t.Fatal("Lost() never closed")
	}
	var p *client.Problem
	if !errors.Is(l.Err(), client.ErrLeaseLost) || !errors.As(l.Err(), &p) || p.Code != client.CodeLeaseLost {
		t.Fatalf("Err() = %v, want ErrLeaseLost with a lease_lost Problem", l.Err())
	}
	if _, err := l.Produce(bg, "b", recs(1, "b")); !errors.Is(err, client.ErrLeaseLost) {
		t.Fatalf("produce after the loss: %v", err)
	}
	t.Logf("Err(): %v", l.Err())
}
