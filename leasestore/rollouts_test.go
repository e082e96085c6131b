package leasestore_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/pgtest"
	"github.com/fencegate/fencegate/leasestore"
	"github.com/fencegate/fencegate/txnmap"
)

const rolloutPattern = "shard:*"

// setRollout moves rolloutPattern to st, failing the test on an error.
func setRollout(t *testing.T, b *testBundle, st leasestore.RolloutState, direct ...string) leasestore.Rollout {
	t.Helper()
	r, err := b.store.SetRollout(b.ctx, leasestore.RolloutChange{Pattern: rolloutPattern, To: st, Actor: "ops",
		DirectClients: direct}, nil)
	if err != nil {
		t.Fatalf("set %s: %v", st, err)
	}
	return r
}

// TestFM21_DirectClientGrantedOnlyInObserve: a direct client (gate set)
// is refused by a pattern with no recorded state (enforced, as before the
// rollout states existed) and in gated, and granted and renewed in
// observe; a fenced client (no gate) is granted in every state.
func TestFM21_DirectClientGrantedOnlyInObserve(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.store.Acquire(b.ctx, "shard:1", "old", time.Minute, "r", "old-binary", rolloutPattern)
	var gated *leasestore.GatedError
	if !errors.As(err, &gated) || gated.State != leasestore.Enforced || gated.Pattern != rolloutPattern {
		t.Fatalf("direct acquire with no recorded state: %v, want a GatedError (enforced)", err)
	}
	setRollout(t, b, leasestore.Observe)
	l, err := b.store.Acquire(b.ctx, "shard:1", "old", time.Minute, "r", "old-binary", rolloutPattern)
	if err != nil {
		t.Fatalf("direct acquire in observe: %v", err)
	}
	if _, err := b.store.Activate(b.ctx, "shard:1", l.Token, 1, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := b.store.Renew(b.ctx, "shard:1", "old", l.Token, time.Minute, rolloutPattern); err != nil {
		t.Fatalf("direct renew in observe: %v", err)
	}
	setRollout(t, b, leasestore.Gated)
	if _, err := b.store.Renew(b.ctx, "shard:1", "old", l.Token, time.Minute, rolloutPattern); !errors.As(err, &gated) || gated.State != leasestore.Gated {
		t.Fatalf("direct renew in gated: %v, want a GatedError (gated)", err)
	}
	if _, err := b.store.Regenerate(b.ctx, "shard:1", "old", l.Token, time.Minute, "r", "old-binary", rolloutPattern); !errors.As(err, &gated) {
		t.Fatalf("direct regenerate in gated: %v, want a GatedError", err)
	}
	if _, err := b.store.Acquire(b.ctx, "shard:2", "new", time.Minute, "r", "indexer", ""); err != nil {
		t.Fatalf("fenced acquire in gated: %v", err)
	}
	if _, err := b.store.Renew(b.ctx, "shard:1", "old", l.Token, time.Minute, ""); err != nil {
		t.Fatalf("the same renewal by a fenced caller: %v", err)
	}
}

// TestFM21_RolloutStepsAndAudit: moving up is one step at a time unless
// forced with a reason; enforced waits until no direct client holds a live
// lease of the pattern; every change is an event with who, from and to.
func TestFM21_RolloutStepsAndAudit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	setRollout(t, b, leasestore.Observe)
	var step *leasestore.StepError
	if _, err := b.store.SetRollout(b.ctx, leasestore.RolloutChange{Pattern: rolloutPattern, To: leasestore.Enforced, Actor: "ops"}, nil); !errors.As(err, &step) {
		t.Fatalf("observe -> enforced: %v, want a StepError", err)
	}
	l, err := b.store.Acquire(b.ctx, "shard:7", "old", 4*time.Second, "r", "old-binary", rolloutPattern) // live through the steps below, even on a loaded machine
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.store.Acquire(b.ctx, "other:7", "old", time.Minute, "r", "old-binary", ""); err != nil {
		t.Fatal(err)
	}
	setRollout(t, b, leasestore.Gated, "old-binary")
	_, err = b.store.SetRollout(b.ctx, leasestore.RolloutChange{Pattern: rolloutPattern, To: leasestore.Enforced, Actor: "ops",
		DirectClients: []string{"old-binary"}}, nil)
	if !errors.As(err, &step) || len(step.Blocking) != 1 || step.Blocking[0].Name != "shard:7" {
		t.Fatalf("gated -> enforced with shard:7 held by a direct client: %v, want a StepError naming only shard:7", err)
	}
	if _, err := b.store.SetRollout(b.ctx, leasestore.RolloutChange{Pattern: rolloutPattern, To: leasestore.Enforced, Actor: "ops",
		DirectClients: []string{"old-binary"}, Force: true}, nil); err == nil {
		t.Fatal("a forced step without a reason was taken")
	}
	waitExpired(t, b, l.Name)
	before, _ := b.store.RolloutOf(b.ctx, rolloutPattern)
	r := setRollout(t, b, leasestore.Enforced, "old-binary")
	if r.Version <= before.Version {
		t.Fatalf("version %d after %d, want it to grow", r.Version, before.Version)
	}
	setRollout(t, b, leasestore.Observe) // down: always allowed
	got, err := b.store.RolloutOf(b.ctx, rolloutPattern)
	if err != nil || got.State != leasestore.Observe || got.ChangedBy != "ops" {
		t.Fatalf("RolloutOf = %+v, %v", got, err)
	}
	var n int
	if err := b.db.Pool.QueryRow(b.ctx, `SELECT count(*) FROM rollout_events WHERE pattern = $1 AND actor = 'ops'`, rolloutPattern).Scan(&n); err != nil || n != 4 {
		t.Fatalf("%d audit events (%v), want 4", n, err)
	}
}

// TestFM21_GrantWaitsForGateChange: a direct acquire that starts while a
// change to gated is being made (its markers being written, under the
// pattern's row lock) waits for it and is refused once it commits: its
// gate reads the row FOR SHARE. Without the lock it would read the
// committed observe and be granted after the gate.
func TestFM21_GrantWaitsForGateChange(t *testing.T) {
	t.Parallel()
	b := setup(t)
	setRollout(t, b, leasestore.Observe)
	locked, release := make(chan struct{}), make(chan struct{})
	open := sync.OnceFunc(func() { close(release) })
	t.Cleanup(open) // a failed test must not leave the change holding the row
	changed := make(chan error, 1)
	go func() {
		_, err := b.store.SetRollout(context.Background(), leasestore.RolloutChange{Pattern: rolloutPattern, To: leasestore.Gated, Actor: "ops"},
			func(context.Context, leasestore.Rollout) error { close(locked); <-release; return nil })
		changed <- err
	}()
	<-locked
	granted := make(chan error, 1)
	go func() {
		_, err := b.store.Acquire(context.Background(), "shard:3", "old", time.Minute, "r", "old-binary", rolloutPattern)
		granted <- err
	}()
	pgtest.WaitLockWaiter(t, b.db, granted)
	open()
	if err := <-changed; err != nil {
		t.Fatal(err)
	}
	if err := <-granted; !errors.Is(err, leasestore.ErrGated) {
		t.Fatalf("direct acquire during the change: %v, want ErrGated", err)
	}
}

// TestFM87_ALeaseOfAMoreSpecificRouteIsThatRoutes: with routes
// shard:eu:* (listed first) and shard:*, a direct client's live lease
// shard:eu:1 is a lease of shard:eu:*: it blocks that route's enforce and
// is no direct lease of shard:*, whose step to enforced is taken. Judged
// by glob, shard:eu:1 matched shard:* too and held its enforce back.
func TestFM87_ALeaseOfAMoreSpecificRouteIsThatRoutes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	router, err := txnmap.NewRouter("test", []txnmap.Route{
		{Pattern: "shard:eu:*", Topic: "eu", Partitions: 4},
		{Pattern: rolloutPattern, Topic: "shards", Partitions: 16},
	})
	if err != nil {
		t.Fatal(err)
	}
	direct := []string{"old-binary"}
	for _, p := range []string{"shard:eu:*", rolloutPattern} {
		for _, st := range []leasestore.RolloutState{leasestore.Observe, leasestore.Gated} {
			if _, err := b.store.SetRollout(b.ctx, leasestore.RolloutChange{Pattern: p, To: st, Actor: "ops"}, nil); err != nil {
				t.Fatal(err)
			}
			if st == leasestore.Observe && p == "shard:eu:*" {
				if _, err := b.store.Acquire(b.ctx, "shard:eu:1", "old", time.Minute, "r", "old-binary", p); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if held, err := b.store.DirectLeases(b.ctx, rolloutPattern, direct, router.PatternOf); err != nil || len(held) != 0 {
		t.Fatalf("direct leases of shard:*: %v, %v; want none (shard:eu:1 is shard:eu:*'s)", held, err)
	}
	enforce := func(p string) error {
		_, err := b.store.SetRollout(b.ctx, leasestore.RolloutChange{Pattern: p, To: leasestore.Enforced, Actor: "ops",
			DirectClients: direct, PatternOf: router.PatternOf}, nil)
		return err
	}
	if err := enforce(rolloutPattern); err != nil {
		t.Fatalf("enforce shard:* with only shard:eu:1 held: %v, want it taken", err)
	}
	var step *leasestore.StepError
	if err := enforce("shard:eu:*"); !errors.As(err, &step) || len(step.Blocking) != 1 || step.Blocking[0].Name != "shard:eu:1" {
		t.Fatalf("enforce shard:eu:* with shard:eu:1 held: %v, want a StepError naming it", err)
	}
}

// TestFM92_ForcedStepNeedsAReasonOfSense: a forced step with a blank
// reason, and any step with a reason of 1 MiB or with a line break, is
// refused as invalid and records nothing; a forced step with a reason is
// taken. Before, only the empty reason was refused.
func TestFM92_ForcedStepNeedsAReasonOfSense(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cases := []struct {
		name, reason string
		force        bool
	}{
		{"blank and forced", "   \t ", true},
		{"1 MiB", strings.Repeat("x", 1<<20), false},
		{"1 MiB and forced", strings.Repeat("x", 1<<20), true},
		{"a forged log line", "ok\nlevel=INFO msg=approved", true},
	}
	for _, tc := range cases {
		_, err := b.store.SetRollout(b.ctx, leasestore.RolloutChange{Pattern: rolloutPattern, To: leasestore.Enforced, Actor: "ops",
			Reason: tc.reason, Force: tc.force}, nil)
		var inv *leasestore.InvalidError
		if !errors.As(err, &inv) || inv.Field != "reason" {
			t.Errorf("%s: %v, want an InvalidError on reason", tc.name, err)
		}
	}
	if got, _ := b.store.RolloutOf(b.ctx, rolloutPattern); got.Version != 0 {
		t.Fatalf("a refused step recorded version %d", got.Version)
	}
	if _, err := b.store.SetRollout(b.ctx, leasestore.RolloutChange{Pattern: rolloutPattern, To: leasestore.Enforced, Actor: "ops",
		Reason: "indexers moved", Force: true}, nil); err != nil {
		t.Fatalf("a forced step with a reason: %v", err)
	}
}
