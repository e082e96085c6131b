package client_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/client"
)

// TestErrorTextsHaveOnePrefix: every error the SDK builds around another
// of its errors says "fencegate: " once, at the start, and reads as one
// line: a lost lease, a passed deadline, an acquire, produce or release
// whose context ended, a 421 not followed, a closed client. The review
// saw "fencegate: lease lost: fencegate: local deadline passed".
func TestErrorTextsHaveOnePrefix(t *testing.T) {
	t.Parallel()
	const heldDetail = `lease "shard:100" held by "w1" (token 1) until 2026-11-30T10:31:07.302783Z`
	cases := []struct {
		name string
		err  func(t *testing.T) error
		want string
	}{
		{"lost by a renewal", func(t *testing.T) error {
			f := newFakeGateway(t)
			f.answer(kRenew, "lease_lost_not_owner")
			l := acquire(t, newClient(t, f, nil))
			<-l.Lost()
			return l.Err()
		}, `fencegate: lease lost: 409 lease_lost: lease "shard:100" lost: not_owner`},
		{"deadline passed", func(t *testing.T) error {
			f := newFakeGateway(t)
			// One failed renewal, then a backoff longer than the time left:
			// the renewer wakes at the deadline with no request in flight.
			f.answer(kRenew, slices.Repeat([]string{"store_unavailable"}, 10000)...)
			l := acquire(t, newClient(t, f, func(c *client.Config) {
				c.TTL, c.MinBackoff, c.MaxBackoff = 300*time.Millisecond, 10*time.Second, 10*time.Second
			}))
			<-l.Lost()
			return l.Err()
		}, "fencegate: lease lost: local deadline passed (last renewal: 503 store_unavailable)"},
		{"released", func(t *testing.T) error {
			l := acquire(t, newClient(t, newFakeGateway(t), nil))
			_ = l.Release(bg)
			_, err := l.Produce(bg, "b-1", rec)
			return err
		}, "fencegate: lease lost: lease released"},
		{"acquire past its context", func(t *testing.T) error {
			f := newFakeGateway(t)
			f.answer(kAcquire, slices.Repeat([]string{"lease_held"}, 10000)...)
			ctx, cancel := context.WithTimeout(bg, 50*time.Millisecond)
			defer cancel()
			_, err := newClient(t, f, nil).AcquireWait(ctx, "shard:1")
			return err
		}, "fencegate: acquire shard:1: context deadline exceeded (last answer: 409 lease_held: " + heldDetail + ")"},
		{"acquire closed while waiting", func(t *testing.T) error {
			f := newFakeGateway(t)
			f.answer(kAcquire, slices.Repeat([]string{"lease_held"}, 100000)...)
			c := newClient(t, f, nil)
			done := make(chan error, 1)
			go func() { _, err := c.AcquireWait(bg, "shard:1"); done <- err }()
			eventually(t, "a refused acquire", func() bool { return f.count("acquire") > 1 })
			_ = c.Close(bg)
			return <-done
		}, "fencegate: acquire shard:1: client closed (last answer: 409 lease_held: " + heldDetail + ")"},
		{"acquire after close", func(t *testing.T) error {
			c := newClient(t, newFakeGateway(t), nil)
			_ = c.Close(bg)
			_, err := c.Acquire(bg, "shard:1")
			return err
		}, "fencegate: acquire shard:1: client closed"},
		{"produce past its context, outcome unknown", func(t *testing.T) error {
			f := newFakeGateway(t)
			l := acquire(t, newClient(t, f, nil))
			f.answer(kProduce, slices.Repeat([]string{"internal"}, 10000)...)
			ctx, cancel := context.WithTimeout(bg, 50*time.Millisecond)
			defer cancel()
			_, err := l.Produce(ctx, "b-1", rec)
			return err
		}, "fencegate: produce b-1: context deadline exceeded (last answer: 500 internal); outcome of an earlier attempt unknown"},
		{"lost during produce, outcome unknown", func(t *testing.T) error {
			f := newFakeGateway(t)
			l := acquire(t, newClient(t, f, nil))
			f.answer(kProduce, "internal", "lease_lost_not_owner")
			_, err := l.Produce(bg, "b-1", rec)
			return err
		}, `fencegate: lease lost: 409 lease_lost: lease "shard:100" lost: not_owner; outcome of an earlier attempt unknown`},
		{"release past its context", func(t *testing.T) error {
			f := newFakeGateway(t)
			l := acquire(t, newClient(t, f, nil))
			f.answer(kRelease, slices.Repeat([]string{"store_unavailable"}, 10000)...)
			ctx, cancel := context.WithTimeout(bg, 50*time.Millisecond)
			defer cancel()
			return l.Release(ctx)
		}, "fencegate: release shard:1: context deadline exceeded (last answer: 503 store_unavailable)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if got := c.err(t).Error(); got != c.want {
				t.Fatalf("error text\n got: %s\nwant: %s", got, c.want)
			}
		})
	}
}

// TestHolderNotAllowedTextHasOnePrefix: the error of a 421 whose
// holder_url is refused names the refusal and the answer, with one prefix.
func TestHolderNotAllowedTextHasOnePrefix(t *testing.T) {
	t.Parallel()
	holder := "http://elsewhere.example:1"
	gw := httptest.NewServer(misdirecting(&holder))
	defer gw.Close()
	c, err := client.New(client.Config{BaseURL: gw.URL, Token: "tok", Owner: "w1", MinBackoff: time.Millisecond, MaxBackoff: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	l, err := c.Acquire(bg, "shard:1")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(bg)
	ctx, cancel := context.WithTimeout(bg, 50*time.Millisecond)
	defer cancel()
	_, err = l.Produce(ctx, "b-1", rec)
	text := err.Error()
	// "; outcome of an earlier attempt unknown" follows when the context
	// cut off an attempt in flight.
	want := `fencegate: produce b-1: context deadline exceeded (last answer: holder_url not allowed: host elsewhere.example of "http://elsewhere.example:1" is not allowed (Config.HolderHosts) (answer: 421 misdirected))`
	if !strings.HasPrefix(text, want) || !errors.Is(err, client.ErrHolderNotAllowed) {
		t.Fatalf("error text\n got: %s\nwant: %s", text, want)
	}
	if strings.Count(text, "fencegate:") != 1 {
		t.Fatalf("%q repeats the prefix", text)
	}
	var p *client.Problem
	if errors.As(err, &p) {
		t.Fatalf("the refused 421 matches a *Problem (%v): the reaction table would follow it", p)
	}
}

// TestRenewNamesATransportError: a renewal that got no answer returns
// net/http's error inside one that names the call.
func TestRenewNamesATransportError(t *testing.T) {
	t.Parallel()
	f := newFakeGateway(t)
	l := acquire(t, newClient(t, f, func(c *client.Config) { c.TTL, c.RenewEvery = time.Minute, 30*time.Second }))
	f.answer(kRenew, "transport")
	err := l.Renew(bg)
	if text := err.Error(); !strings.HasPrefix(text, `fencegate: renew shard:1: Patch "`) || strings.Count(text, "fencegate:") != 1 {
		t.Fatalf("error text %q", text)
	}
	if !open(l) {
		t.Fatalf("a renewal without an answer lost the lease: %v", l.Err())
	}
}
