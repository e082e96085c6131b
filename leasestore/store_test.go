package leasestore_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/pgtest"
	"github.com/fencegate/fencegate/leasestore"
)

type testBundle struct {
	db    *pgtest.DB
	store *leasestore.Store
	ctx   context.Context
}

func setup(t testing.TB) *testBundle {
	t.Helper()
	db := pgtest.New(t)
	st, err := leasestore.New(db.Pool, leasestore.Config{MinTTL: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := st.Verify(ctx); err != nil {
		t.Fatal(err)
	}
	return &testBundle{db: db, store: st, ctx: ctx}
}

// waitExpired waits until the lease has ended in database time.
func waitExpired(t *testing.T, b *testBundle, name string) { pgtest.WaitExpired(t, b.store, name) }

func acquireActive(t *testing.T, b *testBundle, name, owner string, ttl time.Duration) leasestore.Lease {
	t.Helper()
	l, err := b.store.Acquire(b.ctx, name, owner, ttl, "replica-a", "c", "")
	if err != nil {
		t.Fatalf("acquire: %v", err)
	}
	if l.State != leasestore.StatePending {
		t.Fatalf("state after acquire = %s, want pending", l.State)
	}
	l, err = b.store.Activate(b.ctx, name, l.Token, 1000, 3)
	if err != nil {
		t.Fatalf("activate: %v", err)
	}
	return l
}

func TestMigrateIsIdempotent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	applied, err := leasestore.Migrate(b.ctx, b.db.Pool)
	if err != nil {
		t.Fatal(err)
	}
	if len(applied) != 0 {
		t.Fatalf("second migrate applied %v, want nothing", applied)
	}
}

func TestAcquireHeldNamesHolder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	first := acquireActive(t, b, "shard:1", "w1", time.Minute)
	_, err := b.store.Acquire(b.ctx, "shard:1", "w2", time.Minute, "replica-b", "c", "")
	var held *leasestore.HeldError
	if !errors.As(err, &held) || !errors.Is(err, leasestore.ErrLeaseHeld) {
		t.Fatalf("second acquire: %v, want HeldError", err)
	}
	if held.Owner != "w1" || held.Token != first.Token || !held.ExpiresAt.Equal(first.ExpiresAt) {
		t.Fatalf("held = %+v, want owner w1 token %d", held, first.Token)
	}
}

func TestFM03_ExpiredLeaseCannotRenew(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// Long enough to activate on a loaded machine, short enough to wait out.
	l := acquireActive(t, b, "shard:3", "w1", 300*time.Millisecond)
	waitExpired(t, b, "shard:3")
	_, err := b.store.Renew(b.ctx, "shard:3", "w1", l.Token, time.Minute, "")
	var lost *leasestore.LostError
	if !errors.As(err, &lost) || lost.Reason != leasestore.LostExpired {
		t.Fatalf("renew after expiry: %v, want LostError expired", err)
	}
	if _, err := b.store.Release(b.ctx, "shard:3", "w1", l.Token); !errors.Is(err, leasestore.ErrLeaseLost) {
		t.Fatalf("release after expiry: %v, want ErrLeaseLost", err)
	}
	if _, err := b.store.Regenerate(b.ctx, "shard:3", "w1", l.Token, time.Minute, "r", "c", ""); !errors.Is(err, leasestore.ErrLeaseLost) {
		t.Fatalf("regenerate after expiry: %v, want ErrLeaseLost", err)
	}
}

func TestFM03_WrongOwnerOrTokenRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	acquireActive(t, b, "shard:burn", "w0", time.Minute) // so that l.Token-1 is a real token
	l := acquireActive(t, b, "shard:4", "w1", time.Minute)
	cases := []struct {
		name   string
		owner  string
		token  int64
		reason leasestore.LostReason
	}{
		{"wrong owner", "w2", l.Token, leasestore.LostNotOwner},
		{"older token", "w1", l.Token - 1, leasestore.LostTokenMismatch},
		{"newer token", "w1", l.Token + 1, leasestore.LostTokenMismatch},
	}
	for _, tc := range cases {
		_, err := b.store.Renew(b.ctx, "shard:4", tc.owner, tc.token, time.Minute, "")
		var lost *leasestore.LostError
		if !errors.As(err, &lost) || lost.Reason != tc.reason {
			t.Errorf("%s: renew: %v, want %s", tc.name, err, tc.reason)
		}
		_, err = b.store.Release(b.ctx, "shard:4", tc.owner, tc.token)
		if !errors.As(err, &lost) || lost.Reason != tc.reason {
			t.Errorf("%s: release: %v, want %s", tc.name, err, tc.reason)
		}
	}
	if _, err := b.store.Renew(b.ctx, "shard:4", "w1", l.Token, time.Minute, ""); err != nil {
		t.Fatalf("the real owner's renew after refused attempts: %v", err)
	}
}

func TestFM03_ReleaseKeepsTokenAndNextGrantIsLarger(t *testing.T) {
	t.Parallel()
	b := setup(t)
	l := acquireActive(t, b, "shard:5", "w1", time.Minute)
	rel, err := b.store.Release(b.ctx, "shard:5", "w1", l.Token)
	if err != nil {
		t.Fatal(err)
	}
	if rel.Token != l.Token || rel.State != leasestore.StateReleased {
		t.Fatalf("released row = token %d state %s, want token %d released", rel.Token, rel.State, l.Token)
	}
	next, err := b.store.Acquire(b.ctx, "shard:5", "w2", time.Minute, "r", "c", "")
	if err != nil {
		t.Fatal(err)
	}
	if next.Token <= l.Token {
		t.Fatalf("token after release = %d, want > %d", next.Token, l.Token)
	}
}

func TestFM06_ActivateRefusedWhenGrantSuperseded(t *testing.T) {
	t.Parallel()
	b := setup(t)
	stale, err := b.store.Acquire(b.ctx, "shard:6", "w1", 20*time.Millisecond, "replica-a", "c", "")
	if err != nil {
		t.Fatal(err)
	}
	waitExpired(t, b, "shard:6")
	fresh, err := b.store.Acquire(b.ctx, "shard:6", "w2", time.Minute, "replica-b", "c", "")
	if err != nil {
		t.Fatal(err)
	}
	_, err = b.store.Activate(b.ctx, "shard:6", stale.Token, 1, 1)
	var lost *leasestore.LostError
	if !errors.As(err, &lost) || lost.Reason != leasestore.LostTokenMismatch || lost.Current != fresh.Token {
		t.Fatalf("late activate: %v, want token mismatch with current %d", err, fresh.Token)
	}
	if _, err := b.store.Activate(b.ctx, "shard:6", fresh.Token, 2, 1); err != nil {
		t.Fatalf("activate of the current grant: %v", err)
	}
}

func TestActivateRefusedAfterExpiry(t *testing.T) {
	t.Parallel()
	b := setup(t)
	g, err := b.store.Acquire(b.ctx, "shard:7", "w1", 10*time.Millisecond, "r", "c", "")
	if err != nil {
		t.Fatal(err)
	}
	waitExpired(t, b, "shard:7")
	if _, err := b.store.Activate(b.ctx, "shard:7", g.Token, 1, 1); !errors.Is(err, leasestore.ErrLeaseLost) {
		t.Fatalf("activate after expiry: %v, want ErrLeaseLost", err)
	}
}

func TestRegenerateGivesLargerTokenToOwnerOnly(t *testing.T) {
	t.Parallel()
	b := setup(t)
	l := acquireActive(t, b, "shard:8", "w1", time.Minute)
	if _, err := b.store.Regenerate(b.ctx, "shard:8", "w2", l.Token, time.Minute, "r", "c", ""); !errors.Is(err, leasestore.ErrLeaseLost) {
		t.Fatalf("regenerate by another owner: %v", err)
	}
	g, err := b.store.Regenerate(b.ctx, "shard:8", "w1", l.Token, time.Minute, "replica-b", "ops", "")
	if err != nil {
		t.Fatal(err)
	}
	if g.Token <= l.Token || g.State != leasestore.StatePending || g.Holder != "replica-b" || g.Client != "ops" {
		t.Fatalf("regenerated = %+v, want pending token > %d on replica-b bound to client ops", g, l.Token)
	}
	if l.Client != "c" {
		t.Fatalf("acquired = %+v, want bound to client c", l)
	}
	if got, err := b.store.Get(b.ctx, "shard:8"); err != nil || got.Client != "ops" {
		t.Fatalf("Get = %+v, %v: want the client of the current generation", got, err)
	}
	if _, err := b.store.Renew(b.ctx, "shard:8", "w1", l.Token, time.Minute, ""); !errors.Is(err, leasestore.ErrLeaseLost) {
		t.Fatalf("renew of the old generation: %v", err)
	}
}

func TestAbandonEndsOnlyThatPendingGrant(t *testing.T) {
	t.Parallel()
	b := setup(t)
	g, err := b.store.Acquire(b.ctx, "shard:9", "w1", time.Minute, "r", "c", "")
	if err != nil {
		t.Fatal(err)
	}
	if err := b.store.Abandon(b.ctx, "shard:9", g.Token); err != nil {
		t.Fatal(err)
	}
	next, err := b.store.Acquire(b.ctx, "shard:9", "w2", time.Minute, "r", "c", "")
	if err != nil {
		t.Fatalf("acquire after abandon: %v", err)
	}
	if err := b.store.Abandon(b.ctx, "shard:9", g.Token); err != nil {
		t.Fatal(err)
	}
	cur, err := b.store.Get(b.ctx, "shard:9")
	if err != nil || cur.Token != next.Token || !cur.Live() {
		t.Fatalf("a stale abandon touched the next grant: %+v %v", cur, err)
	}
}

func TestInvalidArguments(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cases := []struct {
		name  string
		lease string
		owner string
		ttl   time.Duration
		field string
	}{
		{"empty name", "", "w", time.Second, "name"},
		{"invalid utf8 name", "shard:\xff", "w", time.Second, "name"},
		{"empty owner", "n", "", time.Second, "owner_id"},
		{"zero ttl", "n", "w", 0, "ttl_ms"},
		{"negative ttl", "n", "w", -time.Second, "ttl_ms"},
		{"huge ttl", "n", "w", 24 * time.Hour, "ttl_ms"},
		{"sub-millisecond ttl", "n", "w", 1500 * time.Microsecond, "ttl_ms"},
	}
	for _, tc := range cases {
		_, err := b.store.Acquire(b.ctx, tc.lease, tc.owner, tc.ttl, "r", "c", "")
		var inv *leasestore.InvalidError
		if !errors.As(err, &inv) || inv.Field != tc.field {
			t.Errorf("%s: %v, want InvalidError on %s", tc.name, err, tc.field)
		}
	}
	if ls, err := b.store.List(b.ctx, "", "", 0); err != nil || len(ls) != 0 {
		t.Fatalf("refused acquires wrote rows: %v %v", ls, err)
	}
}

func TestListByPrefixIsLiteral(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, n := range []string{"shard:1", "shard:2", "shard_x", "other"} {
		acquireActive(t, b, n, "w", time.Minute)
	}
	ls, err := b.store.List(b.ctx, "shard:", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, l := range ls {
		names = append(names, l.Name)
	}
	if fmt.Sprint(names) != "[shard:1 shard:2]" {
		t.Fatalf("List(shard:) = %v", names)
	}
	if ls, _ := b.store.List(b.ctx, "shard_", "", 0); len(ls) != 1 {
		t.Fatalf("List(shard_) matched %d rows, want 1 (underscore is literal)", len(ls))
	}
}

// TestListPagesInByteOrder: List pages through the names under a prefix
// in byte order, the cursor excluded, whatever runes end the prefix; a
// prefix or cursor that is not UTF-8 or holds a NUL is an InvalidError,
// never an unavailable store (FM40).
func TestListPagesInByteOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	names := []string{"a", "b:1", "b:2", "b:3", "b:\u00e9", "b:\u00e9x", "b:\u00ea", "b;", "c"}
	for _, n := range names {
		acquireActive(t, b, n, "w", time.Minute)
	}
	list := func(prefix, after string, limit int) string {
		t.Helper()
		ls, err := b.store.List(b.ctx, prefix, after, limit)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, l := range ls {
			out = append(out, l.Name)
		}
		return fmt.Sprint(out)
	}
	for _, c := range []struct {
		prefix, after string
		limit         int
		want          string
	}{
		{"b:", "", 0, "[b:1 b:2 b:3 b:\u00e9 b:\u00e9x b:\u00ea]"},
		{"b:", "", 2, "[b:1 b:2]"},
		{"b:", "b:2", 2, "[b:3 b:\u00e9]"},
		{"b:\u00e9", "", 0, "[b:\u00e9 b:\u00e9x]"},
		{"", "b;", 0, "[c]"},
		{"b", "b:\u00ea", 0, "[b;]"},
		{"z", "", 0, "[]"},
	} {
		if got := list(c.prefix, c.after, c.limit); got != c.want {
			t.Errorf("List(%q, after %q, %d) = %s, want %s", c.prefix, c.after, c.limit, got, c.want)
		}
	}
	for _, bad := range [][2]string{{"\x00", ""}, {"\xff", ""}, {"b:\xc3", ""}, {"", "\x00"}, {"", "\xff"}} {
		var inv *leasestore.InvalidError
		if _, err := b.store.List(b.ctx, bad[0], bad[1], 0); !errors.As(err, &inv) {
			t.Errorf("List(%q, after %q): %v, want an InvalidError", bad[0], bad[1], err)
		}
	}
}

func TestEventsRecordTransitionsNotRenewals(t *testing.T) {
	t.Parallel()
	b := setup(t)
	l := acquireActive(t, b, "shard:10", "w1", time.Minute)
	if _, err := b.store.Renew(b.ctx, "shard:10", "w1", l.Token, time.Minute, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := b.store.Release(b.ctx, "shard:10", "w1", l.Token); err != nil {
		t.Fatal(err)
	}
	evs, err := b.store.Events(b.ctx, "shard:10", 10)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, e := range evs {
		kinds = append(kinds, e.Kind)
		if e.Token != l.Token {
			t.Errorf("event %s has token %d, want %d", e.Kind, e.Token, l.Token)
		}
	}
	if fmt.Sprint(kinds) != "[released activated acquired]" {
		t.Fatalf("events = %v", kinds)
	}
}

func TestFM04_SequenceWithCacheRefused(t *testing.T) {
	t.Parallel()
	db := pgtest.NewEmpty(t)
	ctx := context.Background()
	if _, err := db.Pool.Exec(ctx, `CREATE SEQUENCE lease_token_seq AS bigint NO CYCLE CACHE 50`); err != nil {
		t.Fatal(err)
	}
	st, err := leasestore.New(db.Pool, leasestore.Config{MinTTL: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	err = st.Verify(ctx)
	if !errors.Is(err, leasestore.ErrUnsafeSequence) {
		t.Fatalf("Verify with CACHE 50: %v, want ErrUnsafeSequence", err)
	}
	if _, err := db.Pool.Exec(ctx, `ALTER SEQUENCE lease_token_seq CACHE 1 CYCLE`); err != nil {
		t.Fatal(err)
	}
	if err := st.Verify(ctx); !errors.Is(err, leasestore.ErrUnsafeSequence) {
		t.Fatalf("Verify with CYCLE: %v, want ErrUnsafeSequence", err)
	}
	if _, err := db.Pool.Exec(ctx, `ALTER SEQUENCE lease_token_seq NO CYCLE`); err != nil {
		t.Fatal(err)
	}
	if err := st.Verify(ctx); err != nil {
		t.Fatalf("Verify after the fix: %v", err)
	}
}

func TestFM04_MissingSequenceRefused(t *testing.T) {
	t.Parallel()
	db := pgtest.NewEmpty(t)
	st, _ := leasestore.New(db.Pool, leasestore.Config{MinTTL: time.Millisecond})
	if err := st.Verify(context.Background()); !errors.Is(err, leasestore.ErrUnsafeSequence) {
		t.Fatalf("Verify without migrations: %v", err)
	}
}

// grant is one acquired event of the storm.
type grant struct {
	token     int64
	grantedAt time.Time
	expiresAt time.Time
}

func TestFM04_AcquireStormTokensIncreaseNoOverlap(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const workers, perWorker = 32, 100
	names := []string{"storm:1", "storm:2", "storm:3", "storm:4", "storm:5"}
	var wg sync.WaitGroup
	var mu sync.Mutex
	granted, held := 0, 0
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perWorker {
				name := names[(w+i)%len(names)]
				ttl := time.Duration(1+(w+i)%3) * time.Millisecond
				_, err := b.store.Acquire(b.ctx, name, fmt.Sprintf("w%d", w), ttl, "r", "c", "")
				mu.Lock()
				switch {
				case err == nil:
					granted++
				case errors.Is(err, leasestore.ErrLeaseHeld):
					held++
				default:
					t.Errorf("acquire: %v", err)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if granted == 0 || held == 0 {
		t.Fatalf("storm was not contended: %d granted, %d held", granted, held)
	}
	grants := loadGrants(t, b)
	total := 0
	for name, gs := range grants {
		total += len(gs)
		checkGrants(t, name, gs)
	}
	if total != granted {
		t.Fatalf("lease_events holds %d grants, callers saw %d", total, granted)
	}
	t.Logf("%d attempts: %d granted, %d held", workers*perWorker, granted, held)
}

func loadGrants(t *testing.T, b *testBundle) map[string][]grant {
	t.Helper()
	rows, err := b.db.Pool.Query(b.ctx,
		`SELECT name, token, at, expires_at FROM lease_events WHERE kind = 'acquired'`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string][]grant{}
	for rows.Next() {
		var name string
		var g grant
		if err := rows.Scan(&name, &g.token, &g.grantedAt, &g.expiresAt); err != nil {
			t.Fatal(err)
		}
		out[name] = append(out[name], g)
	}
	return out
}

// checkGrants asserts I1 and exclusivity: in database time order, tokens
// strictly increase, and each grant starts no earlier than the previous one
// expired.
func checkGrants(t *testing.T, name string, gs []grant) {
	t.Helper()
	sort.Slice(gs, func(i, j int) bool { return gs[i].grantedAt.Before(gs[j].grantedAt) })
	for i := 1; i < len(gs); i++ {
		prev, cur := gs[i-1], gs[i]
		if cur.token <= prev.token {
			t.Errorf("%s: token %d granted at %s after token %d at %s", name,
				cur.token, cur.grantedAt, prev.token, prev.grantedAt)
		}
		if cur.grantedAt.Before(prev.expiresAt) {
			t.Errorf("%s: grant %d at %s overlaps grant %d until %s", name,
				cur.token, cur.grantedAt, prev.token, prev.expiresAt)
		}
	}
}

func TestPrefixEnd(t *testing.T) {
	t.Parallel()
	for prefix, want := range map[string]string{
		"": "", "a": "b", "b:": "b;", "b:\u00e9": "b:\u00ea", "a\ud7ff": "a\ue000",
		"a\U0010FFFF": "b", "\U0010FFFF": "",
	} {
		got, ok := leasestore.PrefixEnd(prefix)
		if got != want || ok != (want != "") {
			t.Errorf("PrefixEnd(%q) = %q, %v, want %q", prefix, got, ok, want)
		}
	}
}
