package barrier_test

import (
	"strings"
	"testing"

	"github.com/fencegate/fencegate/barrier"
)

// TestPlacementOptional: a grant without placement seals to the bytes a
// gateway wrote before placements existed (no topic, partition or
// partitions member) and opens without one; a grant with one keeps it.
func TestPlacementOptional(t *testing.T) {
	t.Parallel()
	s, err := barrier.NewSigner([]byte("0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	old, err := s.Seal(barrier.Grant{Lease: "shard:1", Token: 7})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(old), "partition") || strings.Contains(string(old), "topic") {
		t.Fatalf("a grant without placement seals a placement: %s", old)
	}
	if g, err := s.Open(old); err != nil || g.HasPlacement() {
		t.Fatalf("old barrier: %+v %v", g, err)
	}
	placed := barrier.Grant{Lease: "shard:17", Token: 8, Topic: "t", Partition: 17, Partitions: 32}
	v, err := s.Seal(placed)
	if err != nil {
		t.Fatal(err)
	}
	if g, err := s.Open(v); err != nil || g != placed || !g.HasPlacement() {
		t.Fatalf("placed barrier: %+v %v", g, err)
	}
}
