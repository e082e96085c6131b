package client_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/fencegate/fencegate/client"
)

// TestCloseReleasesEveryLease: Close releases each lease the client holds
// (a DELETE with its token), leaves a lost lease alone, and refuses
// acquires afterwards; a second Close is a no-op.
func TestCloseReleasesEveryLease(t *testing.T) {
	t.Parallel()
	f := newFakeGateway(t)
	c := newClient(t, f, nil)
	var leases []*client.Lease
	for _, name := range []string{"shard:1", "shard:2", "shard:3"} {
		l, err := c.Acquire(bg, name)
		if err != nil {
			t.Fatal(err)
		}
		leases = append(leases, l)
	}
	if err := leases[2].Release(bg); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(bg); err != nil {
		t.Fatal(err)
	}
	for _, l := range leases {
		if !errors.Is(l.Err(), client.ErrReleased) {
			t.Fatalf("%s after Close: Err %v, want ErrReleased", l.Name(), l.Err())
		}
	}
	if n := f.count("release"); n != 3 {
		t.Fatalf("%d releases, want 3 (Close released the two still held): %v", n, f.requests())
	}
	if _, err := c.Acquire(bg, "shard:4"); !errors.Is(err, client.ErrClosed) {
		t.Fatalf("Acquire after Close: %v, want ErrClosed", err)
	}
	if err := c.Close(bg); err != nil || f.count("release") != 3 {
		t.Fatalf("second Close: %v; requests %v", err, f.requests())
	}
}

// TestCloseIsBoundedByItsContext: releases that do not get through end
// with Close's context; the renewals are stopped all the same, and Close
// returns the failed releases' errors.
func TestCloseIsBoundedByItsContext(t *testing.T) {
	t.Parallel()
	f := newFakeGateway(t)
	c := newClient(t, f, nil)
	l := acquire(t, c)
	f.answer(kRelease, slices.Repeat([]string{"transport"}, 10000)...)
	ctx, cancel := context.WithTimeout(bg, 100*time.Millisecond)
	defer cancel()
	err := c.Close(ctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Close: %v, want the context's end", err)
	}
	if !errors.Is(l.Err(), client.ErrReleased) {
		t.Fatalf("Err after Close: %v, want ErrReleased (renewals stopped)", l.Err())
	}
	n := f.count("renew")
	if err := l.Renew(bg); !errors.Is(err, client.ErrReleased) || f.count("renew") != n {
		t.Fatalf("Renew after Close: %v, %d renewals sent", err, f.count("renew")-n)
	}
}

// TestCloseEndsAWaitingAcquire: an AcquireWait waiting on a held lease
// returns ErrClosed when the client is closed, with the last answer.
func TestCloseEndsAWaitingAcquire(t *testing.T) {
	t.Parallel()
	f := newFakeGateway(t)
	c := newClient(t, f, nil)
	f.answer(kAcquire, slices.Repeat([]string{"lease_held"}, 100000)...)
	done := make(chan error, 1)
	go func() {
		_, err := c.AcquireWait(bg, "shard:1")
		done <- err
	}()
	eventually(t, "the acquire waiting", func() bool { return f.count("acquire") >= 2 })
	if err := c.Close(bg); err != nil {
		t.Fatal(err)
	}
	err := <-done
	if !errors.Is(err, client.ErrClosed) || client.ErrorCode(err) != client.CodeLeaseHeld {
		t.Fatalf("AcquireWait after Close: %v, want ErrClosed with the last answer lease_held", err)
	}
}
