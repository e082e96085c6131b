package barrier_test

import (
	"errors"
	"testing"
	"time"

	"github.com/fencegate/fencegate/barrier"
)

func TestSealOpenRoundTrip(t *testing.T) {
	t.Parallel()
	s, err := barrier.NewSigner([]byte("0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	g := barrier.Grant{Lease: "shard:1", Token: 7, Owner: "w", TransactionalID: "fencegate/dev/shard:1",
		ProducerID: 42, Epoch: 3, IssuedAt: time.Unix(1700000000, 0).UTC()}
	v, err := s.Seal(g)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Open(v)
	if err != nil || got != g {
		t.Fatalf("Open = %+v, %v; want %+v", got, err, g)
	}
	other, _ := barrier.NewSigner([]byte("another key 123456"))
	if _, err := other.Open(v); !errors.Is(err, barrier.ErrBadSignature) {
		t.Fatalf("open with another key: %v", err)
	}
	tampered := []byte(string(v))
	for i := range tampered {
		if tampered[i] == '7' {
			tampered[i] = '9'
			break
		}
	}
	if _, err := s.Open(tampered); !errors.Is(err, barrier.ErrBadSignature) {
		t.Fatalf("open tampered: %v", err)
	}
	if _, err := s.Open([]byte("{")); !errors.Is(err, barrier.ErrMalformed) {
		t.Fatalf("open garbage: %v", err)
	}
	if _, err := barrier.NewSigner([]byte("short")); err == nil {
		t.Fatal("short key accepted")
	}
}
