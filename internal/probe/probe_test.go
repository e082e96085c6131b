package probe

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeClock is the injected clock: time moves only when the test says.
type fakeClock struct{ ns atomic.Int64 }

func (c *fakeClock) now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) advance(d time.Duration) { c.ns.Add(int64(d)) }

// TestOneCheckForConcurrentCallers: callers arriving while a check runs
// share it; its result is served until Every has passed, failures too;
// then the next caller runs a new check.
func TestOneCheckForConcurrentCallers(t *testing.T) {
	t.Parallel()
	clk := &fakeClock{}
	started := make(chan struct{}, 1)
	release := make(chan struct{})
	var answer atomic.Pointer[error]
	none := error(nil)
	answer.Store(&none)
	c := New(func(context.Context) error {
		started <- struct{}{}
		<-release
		return *answer.Load()
	}, Config{Every: time.Second, Now: clk.now})

	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for range 100 {
		wg.Add(1)
		go func() { defer wg.Done(); errs <- c.Check(context.Background()) }()
	}
	<-started
	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("a caller got %v", err)
		}
	}
	// A caller may arrive after the first check ended: still served from it.
	if n := c.Checks(); n != 1 {
		t.Fatalf("%d checks for 100 concurrent callers, want 1", n)
	}
	clk.advance(999 * time.Millisecond)
	if err := c.Check(context.Background()); err != nil || c.Checks() != 1 {
		t.Fatalf("within Every: %v after %d checks, want the cached nil", err, c.Checks())
	}

	down := errors.New("postgres down")
	answer.Store(&down)
	clk.advance(time.Millisecond)
	go func() { <-started }()
	if err := c.Check(context.Background()); !errors.Is(err, down) || c.Checks() != 2 {
		t.Fatalf("after Every: %v after %d checks, want a new check's error", err, c.Checks())
	}
	if err := c.Check(context.Background()); !errors.Is(err, down) || c.Checks() != 2 {
		t.Fatalf("a failure is served for Every too: %v after %d checks", err, c.Checks())
	}
}

// TestCallerGivesUp: a caller whose context ends gets its context's
// error; the check goes on for the others and its result is kept.
func TestCallerGivesUp(t *testing.T) {
	t.Parallel()
	started := make(chan struct{})
	release := make(chan struct{})
	c := New(func(ctx context.Context) error {
		close(started)
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}, Config{Every: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan error, 1)
	go func() { got <- c.Check(ctx) }()
	<-started
	cancel()
	if err := <-got; !errors.Is(err, context.Canceled) {
		t.Fatalf("the caller that gave up: %v", err)
	}
	other := make(chan error, 1)
	go func() { other <- c.Check(context.Background()) }()
	close(release)
	if err := <-other; err != nil {
		t.Fatalf("the caller that waited: %v (the check was cancelled with the first caller?)", err)
	}
	if n := c.Checks(); n != 1 {
		t.Fatalf("%d checks, want 1", n)
	}
}
