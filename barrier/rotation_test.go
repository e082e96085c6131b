package barrier_test

import (
	"errors"
	"testing"

	"github.com/fencegate/fencegate/barrier"
)

// TestKeyRotation: a signer with keys [new, old] signs with new and opens
// barriers of either; a reader that has only the old key refuses the new
// barriers, and one that dropped the old key refuses the old ones.
func TestKeyRotation(t *testing.T) {
	t.Parallel()
	oldKey, newKey := []byte("old-key-0123456789abcdef"), []byte("new-key-0123456789abcdef")
	old, err := barrier.NewSigner(oldKey)
	if err != nil {
		t.Fatal(err)
	}
	rotating, err := barrier.NewSigner(newKey, oldKey)
	if err != nil {
		t.Fatal(err)
	}
	done, err := barrier.NewSigner(newKey)
	if err != nil {
		t.Fatal(err)
	}
	g := barrier.Grant{Lease: "shard:1", Token: 7, Owner: "o"}
	byOld, _ := old.Seal(g)
	byRotating, _ := rotating.Seal(g)
	for _, c := range []struct {
		name   string
		s      *barrier.Signer
		value  []byte
		opened bool
	}{
		{"rotating opens old", rotating, byOld, true},
		{"rotating opens its own", rotating, byRotating, true},
		{"rotating signs with the new key", done, byRotating, true},
		{"old-only refuses new", old, byRotating, false},
		{"new-only refuses old", done, byOld, false},
	} {
		got, err := c.s.Open(c.value)
		switch {
		case c.opened && (err != nil || got.Token != 7):
			t.Errorf("%s: %v", c.name, err)
		case !c.opened && !errors.Is(err, barrier.ErrBadSignature):
			t.Errorf("%s: got %v, want ErrBadSignature", c.name, err)
		}
	}
	if _, err := barrier.NewSigner(newKey, []byte("short")); err == nil {
		t.Error("a short previous key was accepted")
	}
}
