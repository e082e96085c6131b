package gateway_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/internal/pgtest"
)

// TestFM90_SupersededTokenShownOnlyToWhoMayActForIt: client worker's
// generation of shard:90 lapses and client other takes the lease. The
// superseded event is about worker's generation: other, which may not act
// for worker, sees it without its token in the lease view and on a watch
// stream; ops (act_for *) sees the token. Before, the event carried no
// client and its token was shown to every reader.
func TestFM90_SupersededTokenShownOnlyToWhoMayActForIt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.newReplica(nil)
	r.watch(t, b, gateway.WatchConfig{})
	ctx := context.Background()
	const lease = "shard:90"
	old, err := b.store.Acquire(ctx, lease, "w1", 200*time.Millisecond, "gone", "worker", "")
	if err != nil {
		t.Fatal(err)
	}
	pgtest.WaitExpired(t, b.store, lease)
	if _, err := b.store.Acquire(ctx, lease, "w2", time.Minute, "gone", "other", ""); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		who, token string
		want       int64
	}{{"other", otherToken, 0}, {"ops", opsToken, old.Token}} {
		rep := r.doAs(t, tc.token, http.MethodGet, "/v1/leases/"+lease, nil)
		var got []int64
		for _, e := range rep.body["events"].([]any) {
			if ev := e.(map[string]any); ev["kind"] == "superseded" {
				got = append(got, reply{body: ev}.int("token"))
			}
		}
		if len(got) != 1 || got[0] != tc.want {
			t.Errorf("lease view as %s: superseded tokens %v, want [%d]", tc.who, got, tc.want)
		}
		s := r.mustStream(t, tc.token, "/v1/leases/"+lease+"/events", 0)
		for {
			ev := s.next(t)
			if ev.kind != "superseded" {
				continue
			}
			if ev.data.Token != tc.want {
				t.Errorf("watch as %s: superseded token %d, want %d", tc.who, ev.data.Token, tc.want)
			}
			break
		}
		s.close()
	}
}
