package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/client"
)

var bg = context.Background()

func newClient(t *testing.T, f *fakeGateway, mod func(*client.Config)) *client.Client {
	t.Helper()
	cfg := client.Config{BaseURL: f.srv.URL, Token: "tok", Owner: "w1", TTL: 2 * time.Second, RenewEvery: 100 * time.Millisecond,
		MinBackoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond}
	if mod != nil {
		mod(&cfg)
	}
	c, err := client.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func acquire(t *testing.T, c *client.Client) *client.Lease {
	t.Helper()
	l, err := c.Acquire(bg, "shard:1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Release(bg) })
	return l
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(10 * time.Second)
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("%s: not within 10s", what)
		}
	}
}

func open(l *client.Lease) bool {
	select {
	case <-l.Lost():
		return false
	default:
		return true
	}
}

var rec = []client.Record{{Value: []byte("v")}}

// TestProblemKeepsEveryMemberOfRecordedReplies: each recorded reply of the
// real gateway decodes into a Problem that holds every member it sent.
func TestProblemKeepsEveryMemberOfRecordedReplies(t *testing.T) {
	files, err := filepath.Glob("testdata/replies/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no recorded replies: %v", err)
	}
	for _, file := range files {
		name := strings.TrimSuffix(filepath.Base(file), ".json")
		t.Run(name, func(t *testing.T) {
			f := newFakeGateway(t)
			f.answer(kAcquire, slices.Repeat([]string{name}, 1000)...)
			// Answers that Acquire retries come back with the context's end.
			ctx, cancel := context.WithTimeout(bg, 100*time.Millisecond)
			defer cancel()
			_, err := newClient(t, f, nil).Acquire(ctx, "shard:1")
			var p *client.Problem
			if !errors.As(err, &p) {
				t.Fatalf("acquire answered %s: %v, want a *Problem", name, err)
			}
			if client.ErrorCode(err) != p.Code || p.Code == "" {
				t.Fatalf("ErrorCode %q, Problem code %q", client.ErrorCode(err), p.Code)
			}
			raw, _ := os.ReadFile(file)
			var sent, kept map[string]any
			_ = json.Unmarshal(raw, &sent)
			back, _ := json.Marshal(p)
			_ = json.Unmarshal(back, &kept)
			if _, ok := sent["holder_url"]; ok {
				sent["holder_url"] = f.other.URL
			}
			if !maps.Equal(sent, kept) && !equalJSON(sent, kept) {
				t.Fatalf("recorded %v\ndecoded  %v", sent, kept)
			}
		})
	}
}

func equalJSON(a, b map[string]any) bool {
	ka, kb := slices.Sorted(maps.Keys(a)), slices.Sorted(maps.Keys(b))
	if !slices.Equal(ka, kb) {
		return false
	}
	for k, v := range a {
		if vb := b[k]; v != vb {
			ta, ea := time.Parse(time.RFC3339Nano, v.(string))
			tb, eb := time.Parse(time.RFC3339Nano, vb.(string))
			if ea != nil || eb != nil || !ta.Equal(tb) {
				return false
			}
		}
	}
	return true
}

// TestRenewalAsksForANewGeneration: a renewal answered not_holder (the
// replica drained or restarted) or generation_ended renews through a new
// generation with the current token; Lost stays open.
func TestRenewalAsksForANewGeneration(t *testing.T) {
	for _, reply := range []string{"not_holder", "generation_ended"} {
		t.Run(reply, func(t *testing.T) {
			f := newFakeGateway(t)
			f.answer(kRenew, reply)
			l := acquire(t, newClient(t, f, nil))
			eventually(t, "a new generation", func() bool { return l.Grant().Token == 2 })
			eventually(t, "a renewal of it", func() bool { return f.count("renew 2") > 0 })
			if !open(l) || f.count("regenerate 1") != 1 {
				t.Fatalf("lost %v; requests %v", l.Err(), f.requests())
			}
		})
	}
}

// TestFM52_UnansweredRenewalIsRetriedInTime: a renewal request nobody
// answers (a stopped replica, a balancer holding the request there) is
// given up after one renewal interval and sent again, so the lease lives
// past its TTL; bounded only by the local deadline, it would hold the
// lease's whole remaining life and the lease would be lost.
func TestFM52_UnansweredRenewalIsRetriedInTime(t *testing.T) {
	f := newFakeGateway(t)
	f.answer(kRenew, unanswered)
	l := acquire(t, newClient(t, f, func(c *client.Config) { c.TTL, c.RenewEvery = time.Second, 250*time.Millisecond }))
	eventually(t, "a second renewal", func() bool { return f.count("renew 1") >= 2 })
	select { // until beyond the TTL from the acquire, Lost must stay open
	case <-l.Lost():
		t.Fatalf("lost after an unanswered renewal: %v; requests %v", l.Err(), f.requests())
	case <-time.After(1500 * time.Millisecond):
	}
}

// TestRenewalLosesOnLeaseLost: lease_lost and fenced close Lost, and Err
// carries the gateway's Problem.
func TestRenewalLosesOnLeaseLost(t *testing.T) {
	f := newFakeGateway(t)
	f.answer(kRenew, "lease_lost_not_owner")
	l := acquire(t, newClient(t, f, nil))
	select {
	case <-l.Lost():
	case <-time.After(10 * time.Second):
		t.Fatal("Lost never closed")
	}
	var p *client.Problem
	if !errors.Is(l.Err(), client.ErrLeaseLost) || !errors.As(l.Err(), &p) || p.Reason != "not_owner" {
		t.Fatalf("Err() = %v", l.Err())
	}
	if _, err := l.Produce(bg, "b", rec); !errors.Is(err, client.ErrLeaseLost) || f.count("produce") != 0 {
		t.Fatalf("produce after the loss: %v; requests %v", err, f.requests())
	}
}

// TestDeadlinePassesWhenRenewalsFail: renewals that never get an answer
// lose the lease at its local deadline (fail closed), and Err names the
// deadline and the last renewal's error.
func TestDeadlinePassesWhenRenewalsFail(t *testing.T) {
	f := newFakeGateway(t)
	f.answer(kRenew, slices.Repeat([]string{"transport"}, 1000)...)
	l := acquire(t, newClient(t, f, func(c *client.Config) { c.TTL = 500 * time.Millisecond }))
	deadline := l.Deadline()
	select {
	case <-l.Lost():
	case <-time.After(10 * time.Second):
		t.Fatal("Lost never closed")
	}
	if late := time.Since(deadline); late > 300*time.Millisecond {
		t.Errorf("lost %s after the local deadline", late)
	}
	if !errors.Is(l.Err(), client.ErrDeadlinePassed) || !strings.Contains(l.Err().Error(), "last renewal") {
		t.Fatalf("Err() = %v", l.Err())
	}
	if _, err := l.Produce(bg, "b", rec); !errors.Is(err, client.ErrDeadlinePassed) {
		t.Fatalf("produce past the deadline: %v", err)
	}
}

// TestProduceRetriesTheSameBatch: batch_aborted, 503 and a dropped
// connection are retried under the same batch id and token.
func TestProduceRetriesTheSameBatch(t *testing.T) {
	f := newFakeGateway(t)
	f.answer(kProduce, "transport", "store_unavailable", "batch_aborted")
	l := acquire(t, newClient(t, f, nil))
	res, err := l.Produce(bg, "b-1", rec)
	if err != nil || res.Token != 1 || f.count("produce 1 b-1") != 4 {
		t.Fatalf("result %+v, %v; requests %v", res, err, f.requests())
	}
}

// TestProduceUnderANewGeneration: generation_ended and not_holder make
// Produce ask for a new generation with the current token and send the
// same batch id under it.
func TestProduceUnderANewGeneration(t *testing.T) {
	for _, reply := range []string{"generation_ended", "not_holder"} {
		t.Run(reply, func(t *testing.T) {
			f := newFakeGateway(t)
			f.answer(kProduce, reply)
			l := acquire(t, newClient(t, f, nil))
			res, err := l.Produce(bg, "b-1", rec)
			want := []string{"produce 1 b-1 @a", "regenerate 1 @a", "produce 2 b-1 @a"}
			var got []string
			for _, r := range f.requests() {
				if !strings.HasPrefix(r, "renew") && !strings.HasPrefix(r, "acquire") {
					got = append(got, r)
				}
			}
			if err != nil || res.Token != 2 || !slices.Equal(got, want) {
				t.Fatalf("result %+v, %v; requests %v, want %v", res, err, got, want)
			}
		})
	}
}

// TestProduceFollowsMisdirected: a 421 sends the same batch to holder_url,
// and the lease's later requests go there too.
func TestProduceFollowsMisdirected(t *testing.T) {
	f := newFakeGateway(t)
	f.answer(kProduce, "misdirected")
	l := acquire(t, newClient(t, f, nil))
	if _, err := l.Produce(bg, "b-1", rec); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Produce(bg, "b-2", rec); err != nil {
		t.Fatal(err)
	}
	if f.count("produce 1 b-1 @b") != 1 || f.count("produce 1 b-2 @b") != 1 {
		t.Fatalf("requests %v", f.requests())
	}
}

// TestProduceReturnsDefiniteRefusals: a 4xx the worker must fix comes back
// at once, as a Problem, and the lease goes on.
func TestProduceReturnsDefiniteRefusals(t *testing.T) {
	f := newFakeGateway(t)
	f.answer(kProduce, "payload_too_large")
	l := acquire(t, newClient(t, f, nil))
	_, err := l.Produce(bg, "b-1", rec)
	if client.ErrorCode(err) != client.CodePayloadTooLarge || errors.Is(err, client.ErrOutcomeUnknown) || !open(l) || f.count("produce") != 1 {
		t.Fatalf("%v; requests %v", err, f.requests())
	}
}

// TestProduceSaysWhenTheOutcomeIsUnknown: when the context ends after
// attempts without an answer, the error says the batch may be committed.
func TestProduceSaysWhenTheOutcomeIsUnknown(t *testing.T) {
	f := newFakeGateway(t)
	f.answer(kProduce, slices.Repeat([]string{"transport"}, 10000)...)
	l := acquire(t, newClient(t, f, nil))
	ctx, cancel := context.WithTimeout(bg, 100*time.Millisecond)
	defer cancel()
	_, err := l.Produce(ctx, "b-1", rec)
	if !errors.Is(err, client.ErrOutcomeUnknown) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("%v", err)
	}
}

// TestAcquireRetriesDraining: a draining replica granted nothing; the
// retry (behind a load balancer, at another replica) gets the lease.
func TestAcquireRetriesDraining(t *testing.T) {
	f := newFakeGateway(t)
	f.answer(kAcquire, "draining", "draining", "too_many_requests")
	c := newClient(t, f, func(c *client.Config) { c.MaxBackoff = time.Millisecond })
	start := time.Now()
	l := acquire(t, c)
	if l.Grant().Token != 1 || f.count("acquire") != 4 {
		t.Fatalf("grant %+v; requests %v", l.Grant(), f.requests())
	}
	if time.Since(start) < time.Second {
		t.Errorf("too_many_requests' Retry-After (1s) was not honoured")
	}
}

// TestAcquireWaitsOnlyWhenAsked: Acquire returns lease_held at once;
// AcquireWait retries it.
func TestAcquireWaitsOnlyWhenAsked(t *testing.T) {
	f := newFakeGateway(t)
	c := newClient(t, f, nil)
	f.answer(kAcquire, "lease_held")
	if _, err := c.Acquire(bg, "shard:1"); client.ErrorCode(err) != client.CodeLeaseHeld {
		t.Fatalf("Acquire: %v", err)
	}
	f.answer(kAcquire, "lease_held", "lease_held", "lease_held")
	l, err := c.AcquireWait(bg, "shard:1")
	if err != nil || f.count("acquire") != 5 {
		t.Fatalf("AcquireWait: %v; requests %v", err, f.requests())
	}
	_ = l.Release(bg)
}

// TestReleaseFollowsMisdirected: only the holder releases; the SDK
// follows the 421, and the lease is lost (released) afterwards.
func TestReleaseFollowsMisdirected(t *testing.T) {
	f := newFakeGateway(t)
	f.answer(kRelease, "misdirected")
	l, err := newClient(t, f, nil).Acquire(bg, "shard:1")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(bg); err != nil || f.count("release 1 @b") != 1 {
		t.Fatalf("%v; requests %v", err, f.requests())
	}
	if !errors.Is(l.Err(), client.ErrReleased) {
		t.Fatalf("Err() = %v", l.Err())
	}
}
