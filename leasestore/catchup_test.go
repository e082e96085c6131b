package leasestore_test

import (
	"encoding/json"
	"testing"
)

// TestFM91_PrefixCatchUpReadsOnlyItsPrefix: with 20,000 events of other
// tenants' leases between them, a catch-up of prefix tenant-a: over the
// whole id window returns its 10 events and reads no more rows than its
// own (the plan's scans, summed from EXPLAIN ANALYZE: rows returned and
// rows removed by a filter). Through the id index it read every event of
// the window and removed the others one by one.
func TestFM91_PrefixCatchUpReadsOnlyItsPrefix(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if _, err := b.db.Pool.Exec(b.ctx, `
INSERT INTO lease_events (name, kind, token, owner_id, holder, expires_at)
SELECT CASE WHEN i % 2001 = 0 THEN 'tenant-a:' || i ELSE 'tenant-' || (i % 19) || 'z:' || i END,
       'acquired', i, 'w', 'r', now()
  FROM generate_series(1, 20010) AS i`); err != nil {
		t.Fatal(err)
	}
	if _, err := b.db.Pool.Exec(b.ctx, `ANALYZE lease_events`); err != nil {
		t.Fatal(err)
	}
	var last int64
	if err := b.db.Pool.QueryRow(b.ctx, `SELECT max(id) FROM lease_events`).Scan(&last); err != nil {
		t.Fatal(err)
	}
	evs, err := b.store.EventsRange(b.ctx, []string{"tenant-a:"}, 0, last, 100)
	if err != nil || len(evs) != 10 {
		t.Fatalf("catch-up of tenant-a: %d events (%v), want 10", len(evs), err)
	}
	q, args := b.store.EventsRangeQuery([]string{"tenant-a:"}, 0, last, 100)
	var plan []map[string]any
	if err := b.db.Pool.QueryRow(b.ctx, "EXPLAIN (ANALYZE, FORMAT JSON) "+q, args...).Scan(&plan); err != nil {
		t.Fatal(err)
	}
	read := rowsRead(plan[0]["Plan"].(map[string]any))
	t.Logf("the catch-up of tenant-a: read %d rows", read)
	if read > 50 {
		raw, _ := json.Marshal(plan)
		t.Fatalf("the catch-up of 10 events read %d rows; want it bounded by its prefix's events\n%s", read, raw)
	}
}

// rowsRead sums, over the plan's scan nodes, the rows each returned and
// removed by its filter, times its loops.
func rowsRead(node map[string]any) int {
	n := 0
	if t, _ := node["Node Type"].(string); len(t) > 4 && t[len(t)-4:] == "Scan" && t != "Function Scan" {
		loops, _ := node["Actual Loops"].(float64)
		rows, _ := node["Actual Rows"].(float64)
		removed, _ := node["Rows Removed by Filter"].(float64)
		n += int((rows + removed) * loops)
	}
	children, _ := node["Plans"].([]any)
	for _, c := range children {
		n += rowsRead(c.(map[string]any))
	}
	return n
}
