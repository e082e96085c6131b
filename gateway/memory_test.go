package gateway

import (
	"fmt"
	"testing"
)

// TestBatchMemoryBoundedInOffsets: the batch-id memory of a session holds
// at most rememberedOffsets offsets and rememberedBatches ids, forgetting
// the oldest first; a batch larger than the bound is not kept. Bounded in
// ids alone, 1,024 batches of 10,000 records kept 10 M offsets (80 MB).
func TestBatchMemoryBoundedInOffsets(t *testing.T) {
	var m batchMemory
	result := func(n int) ProduceResult { return ProduceResult{Offsets: make([]int64, n)} }
	for i := range rememberedBatches {
		m.remember(fmt.Sprintf("b-%d", i), result(10_000))
		if _, offsets := m.size(); offsets > rememberedOffsets {
			t.Fatalf("after %d batches of 10,000 records the memory holds %d offsets, more than %d", i+1, offsets, rememberedOffsets)
		}
	}
	last := fmt.Sprintf("b-%d", rememberedBatches-1)
	if _, ok := m.recall(last); !ok {
		t.Fatalf("the newest batch %s was forgotten", last)
	}
	if _, ok := m.recall("b-0"); ok {
		t.Fatal("the oldest batch is still remembered past the bound")
	}
	m.remember("huge", result(rememberedOffsets+1))
	if _, ok := m.recall("huge"); ok {
		t.Fatal("a batch larger than the bound was kept")
	}
	for i := range 2 * rememberedBatches {
		m.remember(fmt.Sprintf("s-%d", i), result(1))
	}
	if batches, _ := m.size(); batches != rememberedBatches {
		t.Fatalf("the memory holds %d ids, want %d", batches, rememberedBatches)
	}
}
