package leasestore_test

import (
	"context"
	"testing"
	"time"
)

func TestEventsAfterReadsInIDOrderWithItsSnapshot(t *testing.T) {
	t.Parallel()
	b := setup(t)
	from, _, err := b.store.LastEventID(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	l := acquireActive(t, b, "shard:e1", "w1", time.Minute)
	if _, err := b.store.Release(b.ctx, "shard:e1", "w1", l.Token); err != nil {
		t.Fatal(err)
	}
	rd, err := b.store.EventsAfter(b.ctx, from, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(rd.Events) != 3 || rd.Events[0].Kind != "acquired" || rd.Events[2].Kind != "released" {
		t.Fatalf("events after %d: %+v", from, rd.Events)
	}
	for i, e := range rd.Events {
		if i > 0 && e.ID <= rd.Events[i-1].ID {
			t.Fatalf("event ids not increasing: %+v", rd.Events)
		}
		if e.Client != "c" {
			t.Errorf("event %s: client %q, want the grant's client c", e.Kind, e.Client)
		}
	}
	if rd.Xmin == 0 || rd.Xmax < rd.Xmin {
		t.Fatalf("snapshot bounds xmin %d xmax %d", rd.Xmin, rd.Xmax)
	}
	last, _, err := b.store.LastEventID(b.ctx)
	if err != nil || last != rd.Events[2].ID {
		t.Fatalf("last event id %d (%v), want %d", last, err, rd.Events[2].ID)
	}
	rng, err := b.store.EventsRange(b.ctx, []string{"shard:e"}, from, rd.Events[1].ID, 10)
	if err != nil || len(rng) != 2 {
		t.Fatalf("range (%d, %d]: %+v (%v), want the first two", from, rd.Events[1].ID, rng, err)
	}
	if rng, _ := b.store.EventsRange(b.ctx, []string{"other:"}, from, last, 10); len(rng) != 0 {
		t.Fatalf("range of another prefix: %+v", rng)
	}
}

func TestPruneEventsDeletesOnlyOlderEvents(t *testing.T) {
	t.Parallel()
	b := setup(t)
	acquireActive(t, b, "shard:p1", "w1", time.Minute)
	acquireActive(t, b, "shard:p2", "w1", time.Minute)
	if _, err := b.db.Pool.Exec(b.ctx, `UPDATE lease_events SET at = at - interval '2 hours' WHERE name = 'shard:p1'`); err != nil {
		t.Fatal(err)
	}
	n, err := b.store.PruneEvents(b.ctx, time.Hour)
	if err != nil || n != 2 {
		t.Fatalf("pruned %d (%v), want shard:p1's 2 events", n, err)
	}
	if evs, _ := b.store.Events(b.ctx, "shard:p1", 10); len(evs) != 0 {
		t.Fatalf("shard:p1 kept %v", evs)
	}
	if evs, _ := b.store.Events(b.ctx, "shard:p2", 10); len(evs) != 2 {
		t.Fatalf("shard:p2 has %v, want its 2 events", evs)
	}
	if _, err := b.store.PruneEvents(b.ctx, 0); err == nil {
		t.Fatal("a prune of age 0 was accepted")
	}
}

func TestEventIsNotifiedToListeners(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx, cancel := context.WithCancel(b.ctx)
	defer cancel()
	notes := make(chan struct{}, 16)
	done := make(chan error, 1)
	go func() { done <- b.store.Listen(ctx, func() { notes <- struct{}{} }) }()
	<-notes // listening
	acquireActive(t, b, "shard:n1", "w1", time.Minute)
	select {
	case <-notes:
	case err := <-done:
		t.Fatalf("listen ended: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("no notification within 10s of a committed event")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("listen after its context ended: %v", err)
	}
}
