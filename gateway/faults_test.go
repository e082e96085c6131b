package gateway_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/internal/pgtest"
)

// holdInitProducerID holds the first InitProducerID of transactionalID at
// the broker until release is closed; entered is closed when it arrives.
func (b *testBundle) holdInitProducerID(transactionalID string) (entered, release chan struct{}) {
	entered, release = make(chan struct{}), make(chan struct{})
	var taken atomic.Bool
	fake := b.kafka.Fake(b.t)
	fake.ControlKey(kmsg.InitProducerID.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		r := req.(*kmsg.InitProducerIDRequest)
		if r.TransactionalID == nil || *r.TransactionalID != transactionalID {
			fake.KeepControl()
			return nil, nil, false
		}
		fake.DropControl()
		if !taken.CompareAndSwap(false, true) {
			return nil, nil, false
		}
		close(entered)
		fake.SleepControl(func() { <-release })
		return nil, nil, false
	})
	return entered, release
}

// TestFM05_NoAckWhileInitProducerIDHeld: while the epoch bump is held at
// the broker, the grant is pending and no 201 has been sent.
func TestFM05_NoAckWhileInitProducerIDHeld(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.newReplica(nil)
	entered, release := b.holdInitProducerID(b.txnID("shard:5"))
	done := make(chan reply, 1)
	go func() { done <- r.acquire(t, "shard:5", "w1", 30*time.Second) }()
	select {
	case <-entered:
	case rep := <-done:
		t.Fatalf("acquire answered before its InitProducerID reached the broker: %d %s", rep.status, rep.raw)
	}
	l, err := b.store.Get(b.ctx, "shard:5")
	if err != nil || l.State != "pending" {
		t.Fatalf("lease while InitProducerID is held: %+v %v, want pending", l, err)
	}
	select {
	case rep := <-done:
		t.Fatalf("acquire answered while InitProducerID is held: %d %s", rep.status, rep.raw)
	default:
	}
	close(release)
	rep := <-done
	if rep.status != http.StatusCreated {
		t.Fatalf("acquire after release: %d %s", rep.status, rep.raw)
	}
	l, err = b.store.Get(b.ctx, "shard:5")
	if err != nil || l.State != "active" {
		t.Fatalf("lease after the 201: %+v %v", l, err)
	}
}

// TestFM06_LateHandoverFencesRightfulOwner: replica A froze between its
// grant (N) and its epoch bump; B took N+1 and wrote; A's late bump fences
// B, but A never acknowledges, nothing is written under N, and B recovers
// with a new generation.
func TestFM06_LateHandoverFencesRightfulOwner(t *testing.T) {
	t.Parallel()
	b := setup(t)
	gate := newGate(gateway.HookGranted, "shard:6")
	a := b.newReplica(hooks(gate))
	bb := b.newReplica(nil)
	a.clock.freeze()
	done := make(chan reply, 1)
	go func() { done <- a.acquire(t, "shard:6", "w-a", 2*time.Second) }()
	gate.wait(t)
	log := &ackLog{}
	fresh := b.takeover(t, bb, "shard:6", "w-b")
	b.mustProduce(t, bb, log, "shard:6", "w-b", fresh, "b-1", 2)
	gate.open()
	rep := <-done
	if rep.status == http.StatusCreated {
		t.Fatalf("the late handover was acknowledged: %s", rep.raw)
	}
	if rep.status != http.StatusConflict || rep.code() != "lease_lost" {
		t.Fatalf("late handover: %d %s, want 409 lease_lost", rep.status, rep.raw)
	}
	rep = bb.produce(t, "shard:6", "w-b", fresh, "b-2", 2)
	if rep.status != http.StatusConflict || rep.code() != "fenced" {
		t.Fatalf("B's produce after A's late bump: %d %s, want 409 fenced", rep.status, rep.raw)
	}
	rep = bb.regenerate(t, "shard:6", "w-b", fresh, 30*time.Second)
	if rep.status != http.StatusCreated || rep.int("token") <= fresh {
		t.Fatalf("B's new generation: %d %s", rep.status, rep.raw)
	}
	next := rep.int("token")
	b.mustProduce(t, bb, log, "shard:6", "w-b", next, "b-2", 2)
	recs := b.checkInvariants(t, "shard:6", log)
	for _, r := range recs {
		if !r.Barrier && r.Token < fresh {
			t.Fatalf("data record of the late generation %d at offset %d", r.Token, r.Offset)
		}
	}
}

// blockDatabase makes the test database refuse connections and kills the
// open ones, as if Postgres went away; the returned func restores it.
func (b *testBundle) blockDatabase(t *testing.T) func() {
	t.Helper()
	u, err := url.Parse(b.db.URL)
	if err != nil {
		t.Fatal(err)
	}
	name := strings.TrimPrefix(u.Path, "/")
	admin, err := pgx.Connect(b.ctx, pgtest.ServerURL())
	if err != nil {
		t.Fatal(err)
	}
	exec := func(q string, args ...any) {
		if _, err := admin.Exec(b.ctx, q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	exec("ALTER DATABASE " + name + " CONNECTION LIMIT 0")
	// Client connections only: an autovacuum worker on the database is a
	// superuser's, which the test's role may not terminate.
	exec("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid() "+
		"AND backend_type = 'client backend'", name)
	return func() {
		exec("ALTER DATABASE " + name + " CONNECTION LIMIT -1")
		admin.Close(context.Background())
	}
}

// TestFM08_PostgresDown: acquire and renew fail closed with 503; produce of
// an active session goes on (it never calls Postgres) until its local
// deadline.
func TestFM08_PostgresDown(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.newReplica(nil)
	token := r.mustAcquire(t, "shard:8", "w1", 30*time.Second)
	log := &ackLog{}
	restore := b.blockDatabase(t)
	b.mustProduce(t, r, log, "shard:8", "w1", token, "during-outage", 3)
	if rep := r.acquire(t, "shard:9", "w2", 30*time.Second); rep.status != http.StatusServiceUnavailable || rep.code() != "store_unavailable" {
		t.Fatalf("acquire with Postgres down: %d %s", rep.status, rep.raw)
	}
	rep := r.do(t, "PATCH", "/v1/leases/shard:8", map[string]any{"owner_id": "w1", "token": token, "ttl_ms": 30000})
	if rep.status != http.StatusServiceUnavailable || rep.code() != "store_unavailable" {
		t.Fatalf("renew with Postgres down: %d %s", rep.status, rep.raw)
	}
	if rep := r.do(t, "GET", "/readyz", nil); rep.status != http.StatusServiceUnavailable {
		t.Fatalf("readyz with Postgres down: %d %s", rep.status, rep.raw)
	}
	b.mustProduce(t, r, log, "shard:8", "w1", token, "still-during-outage", 1)
	restore()
	if _, err := b.store.Get(b.ctx, "shard:9"); err == nil {
		t.Fatal("an acquire during the outage left a lease row")
	}
	r.clock.advance(30 * time.Second)
	if rep := r.produce(t, "shard:8", "w1", token, "after-deadline", 1); rep.status != http.StatusConflict {
		t.Fatalf("produce past the local deadline: %d %s", rep.status, rep.raw)
	}
	b.checkInvariants(t, "shard:8", log)
}

// TestFM08_BrokerRefusesInitProducerID: an epoch bump that cannot happen
// fails the acquire closed within the handover budget; nothing is active.
func TestFM08_BrokerRefusesInitProducerID(t *testing.T) {
	t.Parallel()
	b := setup(t)
	fake := b.kafka.Fake(t)
	r := b.newReplica(nil)
	fake.ControlKey(kmsg.InitProducerID.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		fake.KeepControl()
		resp := req.ResponseKind().(*kmsg.InitProducerIDResponse)
		resp.ErrorCode = kerr.CoordinatorNotAvailable.Code
		return resp, nil, true
	})
	rep := r.acquire(t, "shard:10", "w1", 2*time.Second)
	if rep.status != http.StatusServiceUnavailable || rep.code() != "kafka_unavailable" {
		t.Fatalf("acquire with InitProducerID refused: %d %s", rep.status, rep.raw)
	}
	l, err := b.store.Get(b.ctx, "shard:10")
	if err != nil || l.State == "active" || l.Live() {
		t.Fatalf("lease after the failed handover: %+v %v, want not active and ended", l, err)
	}
	if rep := r.produce(t, "shard:10", "w1", l.Token, "x", 1); rep.status != http.StatusConflict {
		t.Fatalf("produce with the failed grant's token: %d %s", rep.status, rep.raw)
	}
}

// TestFM20_HotLeaseRowDoesNotStallProduce: the lease row is locked by a
// slow transaction and renewals pile up behind it (one in Postgres on the
// row lock, the others behind it: a session's renewals are serialised,
// FM35); produce of the active session goes on, because the data plane
// never touches Postgres.
func TestFM20_HotLeaseRowDoesNotStallProduce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.newReplica(nil)
	token := r.mustAcquire(t, "shard:20", "w1", 30*time.Second)
	lock, err := b.db.Pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lock.Rollback(context.Background()) }) // before the server's cleanup waits for the renewals
	if _, err := lock.Exec(b.ctx, `SELECT 1 FROM leases WHERE name = 'shard:20' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	renewed := make(chan reply, 16)
	for range cap(renewed) {
		go func() {
			renewed <- r.do(t, "PATCH", "/v1/leases/shard:20", map[string]any{"owner_id": "w1", "token": token, "ttl_ms": 30000})
		}()
	}
	waitForRowLockWaiters(t, b, lock, 1)
	log := &ackLog{}
	for i := range 5 {
		b.mustProduce(t, r, log, "shard:20", "w1", token, fmt.Sprintf("hot-%d", i), 10)
	}
	select {
	case rep := <-renewed:
		t.Fatalf("a renewal finished while the row was locked: %d %s", rep.status, rep.raw)
	default:
	}
	if err := lock.Rollback(b.ctx); err != nil {
		t.Fatal(err)
	}
	for range cap(renewed) {
		if rep := <-renewed; rep.status != http.StatusOK {
			t.Fatalf("renewal after the lock: %d %s", rep.status, rep.raw)
		}
	}
	b.checkInvariants(t, "shard:20", log)
}

// waitForRowLockWaiters waits until n statements of this test's database
// wait on a lock (the row lock tx holds).
func waitForRowLockWaiters(t testing.TB, b *testBundle, tx pgx.Tx, n int) {
	t.Helper()
	eventually(t, 10*time.Second, func() (bool, string) {
		var waiting int
		// Statistics views are a snapshot per transaction: clear it first.
		_, _ = tx.Exec(b.ctx, `SELECT pg_stat_clear_snapshot()`)
		_ = tx.QueryRow(b.ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND datname = current_database()`).Scan(&waiting)
		return waiting >= n, fmt.Sprintf("%d statements waiting on the row lock, want %d", waiting, n)
	})
}

// TestFM53_ResumedPastItsBudgetDoesNotBump: replica A stopped after its
// grant (N) and its producer's first metadata, before its epoch bump, and
// its clock moved past the handover budget meanwhile (a SIGSTOP: the
// monotonic clock runs on); B took N+1 and wrote. A resumes: it must not
// bump the epoch, so B's next batch commits. Calling InitTransactions
// with A's spent context returned at once and bumped in the background:
// B was fenced.
func TestFM53_ResumedPastItsBudgetDoesNotBump(t *testing.T) {
	t.Parallel()
	b := setup(t)
	gate := newGate(gateway.HookConnected, "shard:53")
	a := b.newReplica(hooks(gate))
	bb := b.newReplica(nil)
	done := make(chan reply, 1)
	go func() { done <- a.acquire(t, "shard:53", "w-a", 2*time.Second) }()
	gate.wait(t)
	log := &ackLog{}
	fresh := b.takeover(t, bb, "shard:53", "w-b")
	b.mustProduce(t, bb, log, "shard:53", "w-b", fresh, "b-1", 2)
	a.clock.advance(10 * time.Second) // the stop, as A's own clock saw it
	gate.open()
	if rep := <-done; rep.status == http.StatusCreated {
		t.Fatalf("the late handover was acknowledged: %s", rep.raw)
	}
	b.mustProduce(t, bb, log, "shard:53", "w-b", fresh, "b-2", 2)
	b.checkInvariants(t, "shard:53", log)
}
