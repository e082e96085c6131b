package loadtest

import (
	"context"
	"testing"

	"github.com/fencegate/fencegate/internal/pgtest"
	"github.com/fencegate/fencegate/loadtest/report"
)

func items(idx ...int) [][]byte {
	out := make([][]byte, len(idx))
	for k, i := range idx {
		out[k] = itemValue(i, 16*(k%2)) // padded or not
	}
	return out
}

// TestCheckItemsFindsPlantedViolations is the negative test of I6's
// checker: a planted gap, duplicate, reordering or record past the
// checkpoint is counted as such, and a clean sequence passes.
func TestCheckItemsFindsPlantedViolations(t *testing.T) {
	for _, tc := range []struct {
		name   string
		values [][]byte
		n      int
		want   report.ItemCounts
	}{
		{"clean", items(0, 1, 2, 3), 4, report.ItemCounts{Leases: 1, Items: 4, Records: 4}},
		{"empty, no checkpoint", nil, 0, report.ItemCounts{Leases: 1}},
		{"gap", items(0, 1, 3), 4, report.ItemCounts{Leases: 1, Items: 4, Records: 3, Gaps: 1}},
		{"gap at the end", items(0, 1), 4, report.ItemCounts{Leases: 1, Items: 4, Records: 2, Gaps: 2}},
		{"duplicate", items(0, 1, 1, 2), 3, report.ItemCounts{Leases: 1, Items: 3, Records: 4, Duplicates: 1}},
		{"a batch again after a takeover", items(0, 1, 2, 3, 2, 3, 4), 5, report.ItemCounts{Leases: 1, Items: 5, Records: 7, Duplicates: 2}},
		{"out of order", items(0, 2, 1, 3), 4, report.ItemCounts{Leases: 1, Items: 4, Records: 4, OutOfOrder: 1}},
		{"beyond the checkpoint", items(0, 1, 2), 2, report.ItemCounts{Leases: 1, Items: 2, Records: 3, Beyond: 1}},
		{"other records skipped", [][]byte{[]byte("x"), []byte("item-x"), itemValue(0, 0)}, 1, report.ItemCounts{Leases: 1, Items: 1, Records: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := checkItems(tc.values, tc.n); got != tc.want {
				t.Fatalf("checkItems = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestItemValueRoundTrips: an item's index survives its padding.
func TestItemValueRoundTrips(t *testing.T) {
	for _, size := range []int{0, 3, 7, 1024} {
		for _, i := range []int{0, 9, 12345} {
			v := itemValue(i, size)
			if got, ok := itemIndex(v); !ok || got != i || len(v) < size {
				t.Fatalf("itemValue(%d, %d) = %q: index %d, %v", i, size, v, got, ok)
			}
		}
	}
}

// TestJudgeFailsI6OnAPlantedGapOrDuplicate: one bad lease among good ones
// fails the invariant, names the lease, and counts each violation.
func TestJudgeFailsI6OnAPlantedGapOrDuplicate(t *testing.T) {
	seqs := itemSequences{
		values: map[string][][]byte{"shard:0": items(0, 1, 2), "shard:1": items(0, 2, 2)},
		next:   map[string]int{"shard:0": 3, "shard:1": 3},
	}
	var inv report.Invariant
	got := seqs.judge(&inv)
	if inv.Pass || inv.Violations != 2 || len(inv.Examples) != 1 || got.Gaps != 1 || got.Duplicates != 1 || got.Items != 6 {
		t.Fatalf("judge = %+v, invariant %+v: want a failure with 1 gap and 1 duplicate on shard:1", got, inv)
	}
	var clean report.Invariant
	seqs.values["shard:1"] = items(0, 1, 2)
	if seqs.judge(&clean); !clean.Pass || clean.Checked != 6 {
		t.Fatalf("clean sequences: %+v", clean)
	}
}

// TestFencedStateCheckFindsPlantedBreaches: the own-table check fails on
// a write of a lower token logged after a higher one's, on a position past
// the ledger's checkpoint, and on a refusal without its receipt.
func TestFencedStateCheckFindsPlantedBreaches(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	f, err := newFencedState(ctx, db.Pool)
	if err != nil {
		t.Fatal(err)
	}
	f.record(ctx, "shard:1", "w", 2, 10)
	f.record(ctx, "shard:1", "w", 1, 5) // refused, with a receipt
	got, err := f.check(ctx, map[string]int{"shard:1": 10})
	if err != nil || !got.Pass || got.Applied != 1 || got.Refused != 1 || got.Receipts != 1 {
		t.Fatalf("a clean history: %+v %v", got, err)
	}
	for _, plant := range []string{
		`INSERT INTO loadtest_worker_state_log (lease, token, next_item) VALUES ('shard:1', 1, 5)`, // overtaken, applied
		`DELETE FROM fencegate_refusals`, // a refusal without its receipt
	} {
		if _, err := db.Pool.Exec(ctx, plant); err != nil {
			t.Fatal(err)
		}
		if got, err := f.check(ctx, map[string]int{"shard:1": 10}); err != nil || got.Pass {
			t.Fatalf("after %q the check passed: %+v %v", plant, got, err)
		}
	}
	if got, err := f.check(ctx, map[string]int{"shard:1": 3}); err != nil || got.Pass {
		t.Fatalf("a position past the ledger's checkpoint passed: %+v %v", got, err)
	}
}
