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
)

// workLoop is the loop of the SDK's package Example (client/example_test.go):
// AcquireWait, produce docs until the lease is lost, back off, again. It
// returns how many times the lease was lost; committed is called after
// each committed batch.
func workLoop(ctx context.Context, c *client.Client, name string, docs []string, committed func(i int, l *client.Lease, res client.Result)) (int, error) {
	next, losses := 0, 0
	for next < len(docs) {
		lease, err := c.AcquireWait(ctx, name)
		if err != nil {
			return losses, err
		}
		for err == nil && next < len(docs) {
			select {
			case <-lease.Lost():
				err = lease.Err()
			default:
				var res client.Result
				res, err = lease.Produce(ctx, "doc-"+docs[next], []client.Record{{Key: []byte(docs[next]), Value: []byte("payload")}})
				if err == nil {
					committed(next, lease, res)
					next++
				}
			}
		}
		if err == nil {
			break
		}
		if !errors.Is(err, client.ErrLeaseLost) {
			return losses, err
		}
		losses++
		select {
		case <-time.After(client.Backoff(losses, 100*time.Millisecond, 10*time.Second, 0)):
		case <-ctx.Done():
			return losses, ctx.Err()
		}
	}
	return losses, nil
}

// newGeneration asks r for a new generation of name under owner's token,
// as a second process of the same owner would: the token the worker holds
// is superseded.
func newGeneration(t testing.TB, r *replica, name, owner string, tok int64, ttl time.Duration) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"name": name, "owner_id": owner, "ttl_ms": ttl.Milliseconds(), "token": tok})
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
}

// TestSDKWorkerLoopSurvivesATakeover: the Example's worker loop against a
// real replica. After the second batch another process takes the lease
// (a new generation under the worker's token, for one second); the loop
// sees the loss, backs off, waits for the lease and goes on. Every doc is
// in the ledger once, at the offsets the worker was told.
func TestSDKWorkerLoopSurvivesATakeover(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.newReplica(nil)
	c := newClient(t, r.url, "w1", nil)
	defer c.Close(bg)
	docs := []string{"a", "b", "c", "d", "e"}
	a := &acked{}
	var tokens []int64
	ctx, cancel := context.WithTimeout(bg, 60*time.Second)
	defer cancel()
	losses, err := workLoop(ctx, c, "shard:23", docs, func(i int, l *client.Lease, res client.Result) {
		a.add(l.Name(), "doc-"+docs[i], res)
		tokens = append(tokens, res.Token)
		if i == 1 {
			newGeneration(t, r, "shard:23", "w1", res.Token, time.Second)
		}
	})
	if err != nil || losses != 1 {
		t.Fatalf("worker loop: %v after %d losses, want done after 1", err, losses)
	}
	if tokens[1] != tokens[0] || tokens[2] <= tokens[1] || tokens[4] != tokens[2] {
		t.Fatalf("tokens of the batches %v: want the first two under one token, the rest under a later one", tokens)
	}
	by := map[string]int{}
	for _, rec := range b.check(t, "shard:23", a) {
		if !rec.Barrier {
			by[rec.Batch]++
		}
	}
	for _, d := range docs {
		if by["doc-"+d] != 1 {
			t.Fatalf("records by batch %v: want each doc once", by)
		}
	}
}

// leaseHooks records the hook calls of a real lease's life.
type leaseHooks struct {
	mu       sync.Mutex
	acquired []int64 // tokens
	renewed  []error
	produced []client.Outcome
	released []error
	lost     []error
}

func (h *leaseHooks) OnAcquired(l *client.Lease, _ time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.acquired = append(h.acquired, l.Grant().Token)
}

func (h *leaseHooks) OnRenewed(_ *client.Lease, _ time.Duration, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.renewed = append(h.renewed, err)
}

func (h *leaseHooks) OnProduced(_ *client.Lease, _ string, o client.Outcome, _ time.Duration, _ error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.produced = append(h.produced, o)
}

func (h *leaseHooks) OnReleased(_ *client.Lease, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.released = append(h.released, err)
}

func (h *leaseHooks) OnLost(_ *client.Lease, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lost = append(h.lost, err)
}

func (h *leaseHooks) String() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return fmt.Sprintf("acquired %v, renewed %v, produced %v, released %v, lost %v", h.acquired, h.renewed, h.produced, h.released, h.lost)
}

// TestSDKCloseReleasesForTheNextOwner: a lease taken WithTTL gets that TTL
// from the gateway; the hooks see its grant, renewals, batch and release;
// Close releases it at the gateway, so another owner's Acquire (not
// AcquireWait) gets it at once, without a TTL wait.
func TestSDKCloseReleasesForTheNextOwner(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.newReplica(nil)
	h := &leaseHooks{}
	first := newClient(t, r.url, "w1", func(c *client.Config) { c.Hooks = []client.Hook{h} })
	l, err := first.Acquire(bg, "shard:24", client.WithTTL(20*time.Second), client.WithRenewEvery(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if g := l.Grant(); g.TTLMillis != 20000 {
		t.Fatalf("grant %+v, want ttl_ms 20000", g)
	}
	a := &acked{}
	produce(t, l, a, "b-1", 1)
	eventually(t, 10*time.Second, "two renewals", func() bool { h.mu.Lock(); defer h.mu.Unlock(); return len(h.renewed) >= 2 })
	if err := first.Close(bg); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(l.Err(), client.ErrReleased) {
		t.Fatalf("Err after Close: %v", l.Err())
	}
	next, err := newClient(t, r.url, "w2", nil).Acquire(bg, "shard:24")
	if err != nil {
		t.Fatalf("acquire by the next owner right after Close: %v", err)
	}
	defer next.Release(bg)
	h.mu.Lock()
	ok := len(h.acquired) == 1 && len(h.renewed) >= 2 && h.renewed[0] == nil && len(h.produced) == 1 &&
		h.produced[0] == client.OutcomeCommitted && len(h.released) == 1 && h.released[0] == nil && len(h.lost) == 0
	h.mu.Unlock()
	if !ok {
		t.Fatalf("hooks: %s", h)
	}
	b.check(t, "shard:24", a)
}
