package client_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate/client"
)

// event is one call of a hook.
type event struct {
	hook    string // "acquired", "renewed", "produced", "lost", "released"
	lease   string
	token   int64
	batch   string
	outcome client.Outcome
	latency time.Duration
	err     error
}

// hookRecorder implements every hook and keeps the calls in order.
type hookRecorder struct {
	mu     sync.Mutex
	events []event
}

func (h *hookRecorder) add(e event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.events = append(h.events, e)
}

func (h *hookRecorder) OnAcquired(l *client.Lease, latency time.Duration) {
	h.add(event{hook: "acquired", lease: l.Name(), token: l.Grant().Token, latency: latency})
}

func (h *hookRecorder) OnRenewed(l *client.Lease, latency time.Duration, err error) {
	h.add(event{hook: "renewed", lease: l.Name(), token: l.Grant().Token, latency: latency, err: err})
}

func (h *hookRecorder) OnProduced(l *client.Lease, batchID string, outcome client.Outcome, latency time.Duration, err error) {
	h.add(event{hook: "produced", lease: l.Name(), token: l.Grant().Token, batch: batchID, outcome: outcome, latency: latency, err: err})
}

func (h *hookRecorder) OnLost(l *client.Lease, err error) {
	h.add(event{hook: "lost", lease: l.Name(), token: l.Grant().Token, err: err})
}

func (h *hookRecorder) OnReleased(l *client.Lease, err error) {
	h.add(event{hook: "released", lease: l.Name(), token: l.Grant().Token, err: err})
}

// of returns the calls of hook so far.
func (h *hookRecorder) of(hook string) []event {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.DeleteFunc(slices.Clone(h.events), func(e event) bool { return e.hook != hook })
}

// timed runs f and returns how long it took.
func timed(f func()) time.Duration {
	start := time.Now()
	f()
	return time.Since(start)
}

// TestHookAcquiredGetsTheLeaseAndTheWait: OnAcquired fires once per
// acquire, with the lease and the call's time, waits for a held lease
// included.
func TestHookAcquiredGetsTheLeaseAndTheWait(t *testing.T) {
	t.Parallel()
	f := newFakeGateway(t)
	h := &hookRecorder{}
	c := newClient(t, f, func(c *client.Config) {
		c.Hooks = []client.Hook{h}
		c.MinBackoff, c.MaxBackoff = 20*time.Millisecond, 20*time.Millisecond
	})
	f.answer(kAcquire, "lease_held", "lease_held")
	var l *client.Lease
	took := timed(func() {
		var err error
		if l, err = c.AcquireWait(bg, "shard:1"); err != nil {
			t.Fatal(err)
		}
	})
	defer l.Release(bg)
	got := h.of("acquired")
	if len(got) != 1 || got[0].lease != "shard:1" || got[0].token != 1 {
		t.Fatalf("OnAcquired calls %+v, want one for shard:1 token 1", got)
	}
	// Two waits of at least 10ms (jitter keeps the upper half) came first.
	if got[0].latency < 20*time.Millisecond || got[0].latency > took {
		t.Fatalf("OnAcquired latency %s, want the call's time (%s), its two waits included", got[0].latency, took)
	}
}

// TestHookRenewedGetsEachRenewal: OnRenewed fires after each renewal with
// its time and result: nil for a renewal that moved the deadline, the
// answer for one that failed.
func TestHookRenewedGetsEachRenewal(t *testing.T) {
	t.Parallel()
	f := newFakeGateway(t)
	h := &hookRecorder{}
	c := newClient(t, f, func(c *client.Config) { c.Hooks = []client.Hook{h} })
	f.answer(kRenew, "store_unavailable")
	l := acquire(t, c)
	eventually(t, "a failed and a good renewal", func() bool { return len(h.of("renewed")) >= 2 })
	got := h.of("renewed")
	if client.ErrorCode(got[0].err) != client.CodeStoreUnavailable || got[1].err != nil {
		t.Fatalf("OnRenewed errors %v, %v; want store_unavailable then nil", got[0].err, got[1].err)
	}
	for _, e := range got {
		if e.lease != "shard:1" || e.latency <= 0 {
			t.Fatalf("OnRenewed %+v", e)
		}
	}
	took := timed(func() {
		if err := l.Renew(bg); err != nil {
			t.Fatal(err)
		}
	})
	if last := h.of("renewed"); last[len(last)-1].latency > took || last[len(last)-1].err != nil {
		t.Fatalf("OnRenewed after Renew %+v, want nil and at most the call's %s", last[len(last)-1], took)
	}
}

// TestHookProducedGetsTheOutcome: OnProduced fires once per Produce call
// with the batch id, the outcome the call's result means, the call's time
// (retries included) and its error.
func TestHookProducedGetsTheOutcome(t *testing.T) {
	t.Parallel()
	f := newFakeGateway(t)
	h := &hookRecorder{}
	l := acquire(t, newClient(t, f, func(c *client.Config) { c.Hooks = []client.Hook{h} }))

	f.answer(kProduce, "batch_aborted")
	took := []time.Duration{timed(func() { _, _ = l.Produce(bg, "committed", rec) })}
	f.answer(kProduce, "payload_too_large")
	took = append(took, timed(func() { _, _ = l.Produce(bg, "refused", rec) }))
	f.answer(kProduce, slices.Repeat([]string{"internal"}, 1000)...)
	ctx, cancel := context.WithTimeout(bg, 50*time.Millisecond)
	defer cancel()
	took = append(took, timed(func() { _, _ = l.Produce(ctx, "unknown", rec) }))

	got := h.of("produced")
	want := []struct {
		batch   string
		outcome client.Outcome
		code    string
	}{{"committed", client.OutcomeCommitted, ""}, {"refused", client.OutcomeRefused, client.CodePayloadTooLarge},
		{"unknown", client.OutcomeUnknown, client.CodeInternal}}
	if len(got) != len(want) {
		t.Fatalf("OnProduced calls %+v, want %d", got, len(want))
	}
	for i, w := range want {
		e := got[i]
		if e.batch != w.batch || e.outcome != w.outcome || client.ErrorCode(e.err) != w.code || e.latency <= 0 || e.latency > took[i] {
			t.Errorf("OnProduced %+v, want batch %s, %s, code %q, latency in (0, %s]", e, w.batch, w.outcome, w.code, took[i])
		}
	}
	if !errors.Is(got[2].err, client.ErrOutcomeUnknown) || !errors.Is(got[2].err, context.DeadlineExceeded) {
		t.Errorf("OnProduced error %v, want outcome unknown after the deadline", got[2].err)
	}
}

// TestHookLostFiresOnceOnLossNotOnRelease: OnLost fires once, with Err,
// for a lease lost while held (by a renewal, and by Produce past the local
// deadline); a released lease calls OnReleased instead.
func TestHookLostFiresOnceOnLossNotOnRelease(t *testing.T) {
	t.Parallel()
	f := newFakeGateway(t)
	h := &hookRecorder{}
	c := newClient(t, f, func(c *client.Config) { c.Hooks = []client.Hook{h} })

	f.answer(kRenew, "lease_lost_not_owner")
	lost, err := c.Acquire(bg, "shard:1")
	if err != nil {
		t.Fatal(err)
	}
	<-lost.Lost()
	eventually(t, "OnLost", func() bool { return len(h.of("lost")) == 1 })
	if e := h.of("lost")[0]; e.lease != "shard:1" || !errors.Is(e.err, client.ErrLeaseLost) || e.err != lost.Err() {
		t.Fatalf("OnLost %+v, want shard:1 with Err() %v", e, lost.Err())
	}
	if err := lost.Release(bg); !errors.Is(err, client.ErrLeaseLost) {
		t.Fatalf("release of a lost lease: %v", err)
	}

	// Renewals that never get an answer: the lease is lost at its local
	// deadline.
	f.answer(kRenew, slices.Repeat([]string{"transport"}, 1000)...)
	expired, err := c.Acquire(bg, "shard:2", client.WithTTL(200*time.Millisecond), client.WithRenewEvery(150*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	<-expired.Lost()
	eventually(t, "OnLost of the expired lease", func() bool { return len(h.of("lost")) == 2 })
	if e := h.of("lost")[1]; e.lease != "shard:2" || !errors.Is(e.err, client.ErrDeadlinePassed) {
		t.Fatalf("OnLost %+v, want shard:2 with ErrDeadlinePassed", e)
	}

	released, err := c.Acquire(bg, "shard:3")
	if err != nil {
		t.Fatal(err)
	}
	if err := released.Release(bg); err != nil {
		t.Fatal(err)
	}
	rel := h.of("released")
	if len(rel) != 2 || rel[0].lease != "shard:1" || rel[0].err == nil || rel[1].lease != "shard:3" || rel[1].err != nil {
		t.Fatalf("OnReleased calls %+v, want shard:1 with its loss, shard:3 with nil", rel)
	}
	if n := len(h.of("lost")); n != 2 {
		t.Fatalf("OnLost fired %d times, want 2 (not for the released lease)", n)
	}
}

// recordingHandler is a slog.Handler that keeps its records.
type recordingHandler struct {
	mu      sync.Mutex
	records []slog.Record
}

func (r *recordingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (r *recordingHandler) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *recordingHandler) WithGroup(string) slog.Handler            { return r }
func (r *recordingHandler) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.records = append(r.records, rec)
	return nil
}

// find returns the first record with msg at level, as "key=value" pairs.
func (r *recordingHandler) find(level slog.Level, msg string) (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rec := range r.records {
		if rec.Level == level && rec.Message == msg {
			var attrs []string
			rec.Attrs(func(a slog.Attr) bool { attrs = append(attrs, a.String()); return true })
			return strings.Join(attrs, " "), true
		}
	}
	return "", false
}

// TestLoggerSeesRetriesAndLosses: Config.Logger gets a Warn record for an
// acquire that is retried (so a worker sees why Acquire has not returned)
// and for a lost lease, each naming the lease.
func TestLoggerSeesRetriesAndLosses(t *testing.T) {
	t.Parallel()
	f := newFakeGateway(t)
	rh := &recordingHandler{}
	c := newClient(t, f, func(c *client.Config) { c.Logger = slog.New(rh) })
	f.answer(kAcquire, "store_unavailable")
	f.answer(kRenew, "lease_lost_not_owner")
	l, err := c.Acquire(bg, "shard:1")
	if err != nil {
		t.Fatal(err)
	}
	<-l.Lost()
	attrs, ok := rh.find(slog.LevelWarn, "acquire failed, retrying")
	if !ok || !strings.Contains(attrs, "lease=shard:1") || !strings.Contains(attrs, "503 store_unavailable") {
		t.Fatalf("retry record: %q (found %v)", attrs, ok)
	}
	eventually(t, "the loss logged", func() bool { _, ok := rh.find(slog.LevelWarn, "lease lost"); return ok })
	if attrs, _ := rh.find(slog.LevelWarn, "lease lost"); !strings.Contains(attrs, "lease=shard:1") || !strings.Contains(attrs, "not_owner") {
		t.Fatalf("loss record: %q", attrs)
	}
	if _, ok := rh.find(slog.LevelInfo, "lease acquired"); !ok {
		t.Fatal("no record of the grant")
	}
}
