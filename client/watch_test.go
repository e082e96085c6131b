package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/fencegate/fencegate/client"
)

// serveEvents is the fake's watch stream: open until the client goes,
// sending what push sends.
func (f *fakeGateway) serveEvents(w http.ResponseWriter, r *http.Request) {
	ch := make(chan string, 64)
	f.mu.Lock()
	f.streams = append(f.streams, ch)
	f.mu.Unlock()
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	_, _ = fmt.Fprint(w, ": watching\n\n")
	w.(http.Flusher).Flush()
	f.opened <- r.URL.Path + " " + r.Header.Get("Last-Event-ID")
	for {
		select {
		case <-r.Context().Done():
			return
		case s, ok := <-ch:
			if !ok {
				return // the stream ends (a drain)
			}
			_, _ = fmt.Fprint(w, s)
			w.(http.Flusher).Flush()
		}
	}
}

// push sends e on every open stream.
func (f *fakeGateway) push(t *testing.T, e client.Event) {
	t.Helper()
	raw, _ := json.Marshal(e)
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, ch := range f.streams {
		ch <- fmt.Sprintf("id: %d\nevent: %s\ndata: %s\n\n", e.ID, e.Kind, raw)
	}
}

// endStreams ends every open stream, as a drain does.
func (f *fakeGateway) endStreams() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, ch := range f.streams {
		close(ch)
	}
	f.streams = nil
}

func (f *fakeGateway) waitOpened(t *testing.T) string {
	t.Helper()
	select {
	case s := <-f.opened:
		return s
	case <-time.After(10 * time.Second):
		t.Fatal("no watch stream opened within 10s")
	}
	return ""
}

func watchingClient(t *testing.T, f *fakeGateway) *client.Client {
	t.Helper()
	c, err := client.New(client.Config{BaseURL: f.srv.URL, Token: "tok", Owner: "w1", TTL: time.Minute,
		MinBackoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

func TestNoticeOfALaterGenerationLosesTheLeaseAtOnce(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		event  client.Event
		reason string
	}{
		{"taken over", client.Event{Kind: "acquired", OwnerID: "w2", Token: 99}, "taken_over"},
		{"taken over by another client", client.Event{Kind: "acquired", OwnerID: "w2", At: time.Now().Add(time.Hour)}, "taken_over"},
		{"released", client.Event{Kind: "released", OwnerID: "w1", Token: 1}, "released"},
		{"superseded", client.Event{Kind: "superseded", OwnerID: "w1", Token: 1}, "superseded"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFakeGateway(t)
			c := watchingClient(t, f)
			l, err := c.Acquire(context.Background(), "shard:1")
			if err != nil {
				t.Fatal(err)
			}
			if got := f.waitOpened(t); got != "/v1/leases/shard:1/events " {
				t.Fatalf("stream opened %q, want the lease's, without Last-Event-ID", got)
			}
			// Events of our own generation are no loss.
			f.push(t, client.Event{ID: 1, Name: "shard:1", Kind: "activated", OwnerID: "w1", Token: 1})
			tc.event.ID, tc.event.Name = 2, "shard:1"
			f.push(t, tc.event)
			select {
			case <-l.Lost():
			case <-time.After(10 * time.Second):
				t.Fatal("the notice did not lose the lease within 10s")
			}
			var ne *client.NoticeError
			if err := l.Err(); !errors.Is(err, client.ErrLeaseLost) || !errors.As(err, &ne) || ne.Reason != tc.reason || ne.Event.ID != 2 {
				t.Fatalf("Err() = %v, want ErrLeaseLost with a NoticeError of reason %s for event 2", err, tc.reason)
			}
		})
	}
}

func TestNoticesOfEarlierGenerationsAreNoLoss(t *testing.T) {
	t.Parallel()
	f := newFakeGateway(t)
	c := watchingClient(t, f)
	l, err := c.Acquire(context.Background(), "shard:1")
	if err != nil {
		t.Fatal(err)
	}
	f.waitOpened(t)
	// The generation we superseded, ended before ours, and one of
	// another client granted before ours; then a marker we wait for.
	f.push(t, client.Event{ID: 1, Name: "shard:1", Kind: "superseded", OwnerID: "w0", Token: 0})
	f.push(t, client.Event{ID: 2, Name: "shard:1", Kind: "acquired", OwnerID: "w0", At: time.Now().Add(-time.Hour)})
	f.push(t, client.Event{ID: 3, Name: "shard:1", Kind: "released", OwnerID: "w0", Token: 0})
	f.push(t, client.Event{ID: 4, Name: "shard:1", Kind: "acquired", OwnerID: "w9", Token: 7})
	<-l.Lost()
	var ne *client.NoticeError
	if !errors.As(l.Err(), &ne) || ne.Event.ID != 4 {
		t.Fatalf("lost to %v, want only event 4 (a later token)", l.Err())
	}
}

func TestWatchReopensWithLastEventID(t *testing.T) {
	t.Parallel()
	f := newFakeGateway(t)
	c := watchingClient(t, f)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan client.Event, 16)
	done := make(chan error, 1)
	go func() {
		done <- c.Watch(ctx, "shard:", -1, func(e client.Event) error { got <- e; return nil })
	}()
	if s := f.waitOpened(t); s != "/v1/events " {
		t.Fatalf("opened %q", s)
	}
	f.push(t, client.Event{ID: 5, Name: "shard:1", Kind: "acquired"})
	if e := <-got; e.ID != 5 {
		t.Fatalf("event %d, want 5", e.ID)
	}
	f.endStreams()
	if s := f.waitOpened(t); s != "/v1/events 5" {
		t.Fatalf("reopened %q, want Last-Event-ID 5", s)
	}
	f.push(t, client.Event{ID: 5, Name: "shard:1", Kind: "acquired"}) // sent twice: passed once
	f.push(t, client.Event{ID: 6, Name: "shard:1", Kind: "released"})
	if e := <-got; e.ID != 6 {
		t.Fatalf("event %d after the reopen, want 6 (5 only once)", e.ID)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Watch after its context ended: %v", err)
	}
}

func TestDisableWatchOpensNoStream(t *testing.T) {
	t.Parallel()
	f := newFakeGateway(t)
	c, err := client.New(client.Config{BaseURL: f.srv.URL, Token: "tok", Owner: "w1", DisableWatch: true})
	if err != nil {
		t.Fatal(err)
	}
	l, err := c.Acquire(context.Background(), "shard:1")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case s := <-f.opened:
		t.Fatalf("a stream was opened (%s) with DisableWatch", s)
	default:
	}
}
