package sdktest

import (
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate/client"
	"github.com/fencegate/fencegate/gateway"
)

// parkAfter is short: these replicas run on the real clock.
const parkAfter = 300 * time.Millisecond

// TestSDKResumesParkedLeaseTransparently: a worker idles past the
// gateway's park-after; its producer is parked while renewals go on. The
// worker's next batch is answered not_holder once, the SDK asks for a new
// generation with its token and the batch commits under it, once: the
// worker sees nothing but the result.
func TestSDKResumesParkedLeaseTransparently(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.newReplica(func(c *gateway.Config) { c.ParkAfter = parkAfter })
	obs := &observed{}
	c := newClient(t, r.url, "w1", func(c *client.Config) { c.HTTP = &http.Client{Transport: obs} })
	l, err := c.Acquire(bg, "shard:30")
	if err != nil {
		t.Fatal(err)
	}
	first := l.Grant().Token
	a := &acked{}
	produce(t, l, a, "b-1", 2)
	eventually(t, 10*time.Second, "the session parked", func() bool { return r.gateway().Parked() == 1 })
	d := l.Deadline()
	eventually(t, 10*time.Second, "a renewal while parked", func() bool { return l.Deadline().After(d) })
	if r.gateway().Parked() != 1 {
		t.Fatal("a renewal unparked the session")
	}
	res := produce(t, l, a, "b-2", 3)
	if res.Token <= first || l.Grant().Token != res.Token {
		t.Fatalf("b-2 committed under token %d (lease at %d), want a new generation after %d", res.Token, l.Grant().Token, first)
	}
	if obs.saw("POST not_holder") != 1 || len(obs.all()) != 1 {
		t.Fatalf("answers seen: %v; want one not_holder", obs.all())
	}
	notLost(t, l)
	if err := l.Release(bg); err != nil {
		t.Fatal(err)
	}
	if by := batchRecords(t, b, "shard:30", "b-2", a); len(by) != 1 || by[res.Token] != 3 {
		t.Fatalf("batch b-2 by token: %v, want 3 records under %d only", by, res.Token)
	}
}

// TestSDKRenewalDuringResumeKeepsTheLease: while a parked lease resumes
// (the new generation's handover is held after its epoch bump), the
// renewal loop renews with the parked token and is refused lease_lost,
// because the gateway ended that generation when the handover began. The
// SDK waits for the new generation instead of taking the refusal for a
// loss: the lease stays, and the batch commits under the new token.
func TestSDKRenewalDuringResumeKeepsTheLease(t *testing.T) {
	t.Parallel()
	b := setup(t)
	lease := "shard:31"
	hold := &heldHandover{lease: lease, reached: make(chan struct{}), release: make(chan struct{})}
	r := b.newReplica(func(c *gateway.Config) { c.ParkAfter, c.Hooks.Fn = parkAfter, hold.fn })
	obs := &observed{}
	c := newClient(t, r.url, "w1", func(c *client.Config) {
		c.HTTP, c.RenewEvery = &http.Client{Transport: obs}, 50*time.Millisecond
	})
	l, err := c.Acquire(bg, lease)
	if err != nil {
		t.Fatal(err)
	}
	a := &acked{}
	produce(t, l, a, "b-1", 1)
	eventually(t, 10*time.Second, "the session parked", func() bool { return r.gateway().Parked() == 1 })
	hold.armed.Store(true)
	type answer struct {
		res client.Result
		err error
	}
	done := make(chan answer, 1)
	go func() {
		res, err := l.Produce(bg, "b-2", recs(2, "b-2"))
		done <- answer{res, err}
	}()
	<-hold.reached
	eventually(t, 10*time.Second, "a renewal refused during the resume", func() bool { return obs.saw("PATCH lease_lost") > 0 })
	close(hold.release)
	ans := <-done
	if ans.err != nil {
		t.Fatalf("b-2 across the resume: %v (answers %v)", ans.err, obs.all())
	}
	res := ans.res
	a.add(lease, "b-2", res)
	notLost(t, l)
	if res.Token != l.Grant().Token {
		t.Fatalf("b-2 committed under token %d, lease at %d", res.Token, l.Grant().Token)
	}
	d := l.Deadline()
	eventually(t, 10*time.Second, "a renewal of the new generation", func() bool { return l.Deadline().After(d) })
	if err := l.Release(bg); err != nil {
		t.Fatal(err)
	}
	b.check(t, lease, a)
}

// heldHandover holds the first handover of lease after it is armed, right
// after its epoch bump (the older generation already ended), until
// release is closed.
type heldHandover struct {
	lease            string
	armed            atomic.Bool
	once             sync.Once
	reached, release chan struct{}
}

func (h *heldHandover) fn(hook gateway.Hook, lease string, _ int64) {
	if hook != gateway.HookInitialized || lease != h.lease || !h.armed.Load() {
		return
	}
	h.once.Do(func() {
		close(h.reached)
		<-h.release
	})
}
