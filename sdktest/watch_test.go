package sdktest

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/client"
	"github.com/fencegate/fencegate/gateway"
)

// watching makes r relay lease events to watch streams; the returned
// function stops its relay (the streams stay open and get nothing).
func (r *replica) watching(cfg gateway.WatchConfig) (stop func()) {
	r.b.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r.b.t.Cleanup(cancel)
	r.mu.Lock()
	h := r.h
	r.mu.Unlock()
	if err := h.Watch(ctx, r.b.store, cfg); err != nil {
		r.b.t.Fatal(err)
	}
	return cancel
}

// rawStream is a watch stream read by hand: each event's id and kind.
type rawStream struct {
	events chan rawEvent
	cancel context.CancelFunc
}

type rawEvent struct {
	id   int64
	kind string
	name string
}

// openRaw opens path on base with Last-Event-ID last (-1: none).
func openRaw(t testing.TB, base, path string, last int64) *rawStream {
	t.Helper()
	return openRawQueued(t, base, path, last, 4096)
}

// openRawQueued is openRaw with a queue of queue events (the idle
// watchers of the benchmarks keep theirs small: it is the test's memory,
// not the replica's).
func openRawQueued(t testing.TB, base, path string, last int64, queue int) *rawStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	if last >= 0 {
		req.Header.Set("Last-Event-ID", strconv.FormatInt(last, 10))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		cancel()
		t.Fatalf("GET %s: %v %v", path, resp, err)
	}
	s := &rawStream{events: make(chan rawEvent, queue), cancel: cancel}
	opened := make(chan struct{})
	go func() {
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		var e rawEvent
		first := true
		for sc.Scan() {
			line := sc.Text()
			switch {
			case first && strings.HasPrefix(line, ":"):
				first = false
				close(opened)
			case strings.HasPrefix(line, "id: "):
				e.id, _ = strconv.ParseInt(line[4:], 10, 64)
			case strings.HasPrefix(line, "event: "):
				e.kind = line[7:]
			case strings.HasPrefix(line, "data: "):
				var d struct{ Name string }
				_ = json.Unmarshal([]byte(line[6:]), &d)
				e.name = d.Name
			case line == "" && e.id != 0:
				s.events <- e
				e = rawEvent{}
			}
		}
	}()
	select {
	case <-opened:
	case <-time.After(10 * time.Second):
		t.Fatal("stream did not open")
	}
	t.Cleanup(cancel)
	return s
}

// take reads n events, failing after 10s.
func (s *rawStream) take(t testing.TB, n int) []rawEvent {
	t.Helper()
	var out []rawEvent
	for range n {
		select {
		case e := <-s.events:
			out = append(out, e)
		case <-time.After(10 * time.Second):
			t.Fatalf("%d events of %d within 10s: %v", len(out), n, out)
		}
	}
	return out
}

// regenerate takes a new generation of name with owner's token on base,
// as another process of the same owner given the token would.
func regenerate(t testing.TB, base, name, owner string, tok int64) int64 {
	t.Helper()
	body := fmt.Sprintf(`{"name":%q,"owner_id":%q,"ttl_ms":30000,"token":%d}`, name, owner, tok)
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/leases", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var g struct{ Token int64 }
	_ = json.NewDecoder(resp.Body).Decode(&g)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("regenerate %s: %d", name, resp.StatusCode)
	}
	return g.Token
}

// produceAs sends a batch under owner's token on base and returns the code
// of the answer ("" for 200).
func produceAs(t testing.TB, base, name, owner string, tok int64) string {
	t.Helper()
	body := fmt.Sprintf(`{"owner_id":%q,"token":%d,"batch_id":"b-%d","records":[{"value":"eA=="}]}`, owner, tok, tok)
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/leases/"+name+"/records", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var p struct{ Code string }
	_ = json.NewDecoder(resp.Body).Decode(&p)
	return p.Code
}

// lostWithin waits for l to be lost and returns its error.
func lostWithin(t testing.TB, l *client.Lease, d time.Duration) error {
	t.Helper()
	select {
	case <-l.Lost():
		return l.Err()
	case <-time.After(d):
		t.Fatalf("lease %s not lost within %s", l.Name(), d)
	}
	return nil
}

// TestWatchNoticeLosesTheLeaseBeforeItsRenewal: a new generation taken on
// another replica reaches the old owner's Lost by notice, long before its
// next renewal would.
func TestWatchNoticeLosesTheLeaseBeforeItsRenewal(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a, other := b.newReplica(nil), b.newReplica(nil)
	a.watching(gateway.WatchConfig{})
	other.watching(gateway.WatchConfig{})
	c := newClient(t, a.url, "w1", func(cfg *client.Config) {
		cfg.TTL, cfg.RenewEvery, cfg.DisableWatch = time.Minute, 50*time.Second, false
	})
	defer c.Close(context.Background())
	l, err := c.Acquire(context.Background(), "shard:1")
	if err != nil {
		t.Fatal(err)
	}
	// The SDK's stream may open after the grant: a notice needs it open.
	s := openRaw(t, a.url, "/v1/leases/shard:1/events", 0)
	s.take(t, 2) // acquired, activated: the relay is live
	regenerate(t, other.url, "shard:1", "w1", l.Grant().Token)
	err = lostWithin(t, l, 10*time.Second)
	var ne *client.NoticeError
	if !errors.As(err, &ne) || ne.Reason != "taken_over" {
		t.Fatalf("lost with %v, want a NoticeError taken_over (the renewal is 50s away)", err)
	}
}

// TestFM69_NoticesLostFencesHoldAndRenewalStillLoses: with notifications
// lost (the listening connections killed, the relays stopped, a watcher
// away) the fences hold and the SDK still loses the lease through its
// renewal; a watcher that comes back with Last-Event-ID receives every
// event it missed, once.
func TestFM69_NoticesLostFencesHoldAndRenewalStillLoses(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a, other := b.newReplica(nil), b.newReplica(nil)
	// No poll: only a notification or a reconnection makes a relay read.
	stopA := a.watching(gateway.WatchConfig{Poll: time.Hour})
	stopB := other.watching(gateway.WatchConfig{Poll: time.Hour})
	w := openRaw(t, a.url, "/v1/events?prefix=shard:", -1)

	// 1. The listening connections killed: the relays reconnect and catch
	// up by id; the watcher gets each event once, in order.
	listeners := func() (n int) {
		_ = b.db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND query = 'LISTEN fencegate_lease_events'`).Scan(&n)
		return n
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for deadline := time.After(10 * time.Second); listeners() < 2; {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("%d listening connections, want one per replica", listeners())
		}
	}
	var killed int
	if err := b.db.Pool.QueryRow(context.Background(), `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = current_database() AND query = 'LISTEN fencegate_lease_events'`).Scan(&killed); err != nil || killed != 2 {
		t.Fatalf("killed %d listening connections (%v), want the 2 replicas'", killed, err)
	}
	// The SDK watches too: with the relays stopped it gets no notice.
	c := newClient(t, other.url, "w1", func(cfg *client.Config) { cfg.DisableWatch = false })
	defer c.Close(context.Background())
	l, err := c.Acquire(context.Background(), "shard:2")
	if err != nil {
		t.Fatal(err)
	}
	evs := w.take(t, 2)
	if evs[0].kind != "acquired" || evs[1].kind != "activated" || evs[0].id >= evs[1].id {
		t.Fatalf("after the listeners were killed: %v, want acquired then activated", evs)
	}
	lastSeen := evs[1].id

	// 2. The watcher away and both relays stopped: a new generation
	// commits and nobody is told.
	w.cancel()
	stopA()
	stopB()
	oldTok := l.Grant().Token
	newTok := regenerate(t, a.url, "shard:2", "w1", oldTok)

	// The fences hold: the old token writes nothing, on either replica.
	for _, base := range []string{a.url, other.url} {
		if code := produceAs(t, base, "shard:2", "w1", oldTok); code == "" {
			t.Fatalf("a batch under the superseded token %d was accepted at %s", oldTok, base)
		}
	}
	// The SDK loses the lease through its renewal (300ms), not a notice.
	err = lostWithin(t, l, 10*time.Second)
	var ne *client.NoticeError
	if errors.As(err, &ne) || !errors.Is(err, client.ErrLeaseLost) {
		t.Fatalf("lost with %v, want the renewal's lease_lost (no relay runs)", err)
	}
	var p *client.Problem
	if !errors.As(err, &p) || p.Code != client.CodeLeaseLost {
		t.Fatalf("lost with %v, want a lease_lost Problem", err)
	}

	// 3. Back with Last-Event-ID on a replica whose relay runs again:
	// every missed event, once, in order (the outbox, not notifications).
	fresh := b.newReplica(nil)
	fresh.watching(gateway.WatchConfig{Poll: time.Hour})
	w2 := openRaw(t, fresh.url, "/v1/events?prefix=shard:", lastSeen)
	missed := w2.take(t, 2)
	if missed[0].kind != "regenerated" || missed[1].kind != "activated" || missed[0].id <= lastSeen || missed[1].id <= missed[0].id {
		t.Fatalf("missed events %v after %d, want regenerated then activated of token %d", missed, lastSeen, newTok)
	}
	select {
	case e := <-w2.events:
		t.Fatalf("event %v delivered beyond the missed ones", e)
	default:
	}
}
