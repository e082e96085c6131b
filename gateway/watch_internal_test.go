package gateway

import (
	"fmt"
	"log/slog"
	"testing"

	"github.com/fencegate/fencegate/leasestore"
)

// read is an EventsAfter answer of the given ids and snapshot bounds.
func read(xmin, xmax uint64, ids ...int64) leasestore.EventRead {
	rd := leasestore.EventRead{Xmin: xmin, Xmax: xmax}
	for _, id := range ids {
		rd.Events = append(rd.Events, leasestore.Event{ID: id, Name: "shard:1", Kind: "acquired"})
	}
	return rd
}

// delivered drains the ids queued for s.
func delivered(s *sub) string {
	var ids []int64
	for {
		select {
		case e := <-s.events:
			ids = append(ids, e.ID)
		default:
			return fmt.Sprint(ids)
		}
	}
}

// TestRelayHoldsAGapUntilSettledAndSkipsNothingCommitted: an id missing
// below the newest read holds back the later events while its
// transaction may still commit (a later read's xmin below the xmax of the
// read that saw the gap), is delivered when it commits, and is skipped
// only once settled.
func TestRelayHoldsAGapUntilSettledAndSkipsNothingCommitted(t *testing.T) {
	t.Parallel()
	cfg := WatchConfig{}
	cfg.fill()
	r := newRelay(nil, cfg, slog.Default())
	s, _ := r.subscribe("shard:1", "")
	steps := []struct {
		rd      leasestore.EventRead
		blocked bool
		want    string
	}{
		{read(100, 105, 1, 3), true, "[1]"},         // 2 in flight: 3 waits
		{read(104, 106, 3), true, "[]"},             // 2's transaction may still commit
		{read(104, 106, 2, 3, 4), false, "[2 3 4]"}, // 2 committed: in order
		{read(110, 112, 6), true, "[]"},             // 5 missing
		{read(111, 113, 6, 7), true, "[]"},          // not settled yet (111 < 112)
		{read(112, 113, 6, 7), false, "[6 7]"},      // settled: 5 rolled back, skipped
		{read(112, 113, 7), false, "[]"},            // nothing twice
	}
	for i, st := range steps {
		if got := r.apply(st.rd); got != st.blocked {
			t.Fatalf("step %d: blocked %t, want %t", i, got, st.blocked)
		}
		if got := delivered(s); got != st.want {
			t.Fatalf("step %d: delivered %s, want %s", i, got, st.want)
		}
	}
}

// TestFM91_CatchUpReadsOnlyWhatTheClientMaySee: a prefix stream's
// catch-up reads the parts of its prefix the client's allow patterns
// reach, never the whole prefix of a client allowed less (FM91).
func TestFM91_CatchUpReadsOnlyWhatTheClientMaySee(t *testing.T) {
	t.Parallel()
	cases := []struct {
		prefix string
		allow  []string
		want   string
	}{
		{"", []string{"tenant-a:*"}, `["tenant-a:"]`},
		{"tenant-", []string{"tenant-a:*", "tenant-b:?", "other:*"}, `["tenant-a:" "tenant-b:"]`},
		{"tenant-a:1", []string{"tenant-a:*"}, `["tenant-a:1"]`},
		{"", []string{"*"}, `[""]`},
		{"x:", []string{"*", "x:1*"}, `["x:"]`},
		{"tenant-a:", []string{"other:*"}, `[]`},
		{"t", []string{"tenant-a:1", "tenant-a:*"}, `["tenant-a:"]`},
	}
	for _, c := range cases {
		if got := fmt.Sprintf("%q", visiblePrefixes(c.prefix, c.allow)); got != c.want {
			t.Errorf("visiblePrefixes(%q, %q) = %s, want %s", c.prefix, c.allow, got, c.want)
		}
	}
}
