package leasestore_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
)

// TestPlacementHistoryKeepsEveryVersion: the history a checkpoint read
// judges a moved lease by (FM82) holds every recorded version of every
// route, oldest first, not only the latest.
func TestPlacementHistoryKeepsEveryVersion(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	if err := b.store.RecordFirstPlacement(ctx, "shard:*", "out", 16); err != nil {
		t.Fatal(err)
	}
	if err := b.store.RecordFirstPlacement(ctx, "eu:*", "eu-out", 4); err != nil {
		t.Fatal(err)
	}
	if _, err := b.store.RecordPlacement(ctx, "shard:*", "out", 32); err != nil {
		t.Fatal(err)
	}
	hist, err := b.store.PlacementHistory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range hist {
		got = append(got, fmt.Sprintf("%s/%s/%d/%d", p.Pattern, p.Topic, p.Version, p.Partitions))
	}
	want := []string{"eu:*/eu-out/1/4", "shard:*/out/1/16", "shard:*/out/2/32"}
	if !slices.Equal(got, want) {
		t.Fatalf("history %v, want %v", got, want)
	}
}
