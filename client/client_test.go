package client_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate/client"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/internal/kafkatest"
	"github.com/fencegate/fencegate/internal/pgtest"
	"github.com/fencegate/fencegate/leasestore"
	"github.com/fencegate/fencegate/txnmap"
)

func startGateway(t *testing.T) string {
	t.Helper()
	db := pgtest.New(t)
	k := kafkatest.Start(t, "shard-output", 16)
	store, err := leasestore.New(db.Pool, leasestore.Config{ValidateName: txnmap.ValidateName})
	if err != nil {
		t.Fatal(err)
	}
	router, _ := txnmap.NewRouter("t", []txnmap.Route{{Pattern: "shard:*", Topic: "shard-output", Partitions: 16}})
	auth, _ := gateway.NewAuthenticator([]gateway.Client{{Name: "w", TokenSHA256: gateway.HashToken("tok"), Allow: []string{"*"}}})
	g, err := gateway.New(store, router, gateway.Config{Kafka: gateway.KafkaConfig{Config: k.Conn},
		BarrierKey: []byte("client test barrier key"), ReapInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(gateway.NewServer(g, auth))
	t.Cleanup(func() { srv.Close(); g.Close() })
	return srv.URL
}

// gatedTransport holds renewals (PATCH) while closed: a worker whose
// renewals cannot get through, as if it were frozen.
type gatedTransport struct {
	mu   sync.Mutex
	gate chan struct{}
}

func (g *gatedTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	g.mu.Lock()
	gate := g.gate
	g.mu.Unlock()
	if gate != nil && r.Method == http.MethodPatch {
		<-gate
	}
	return http.DefaultTransport.RoundTrip(r)
}

func (g *gatedTransport) hold()    { g.mu.Lock(); g.gate = make(chan struct{}); g.mu.Unlock() }
func (g *gatedTransport) release() { g.mu.Lock(); close(g.gate); g.gate = nil; g.mu.Unlock() }

func TestLeaseOutlivesItsTTLByRenewing(t *testing.T) {
	t.Parallel()
	base := startGateway(t)
	c, err := client.New(client.Config{BaseURL: base, Token: "tok", Owner: "w1", TTL: time.Second, RenewEvery: 250 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	l, err := c.Acquire(ctx, "shard:1")
	if err != nil {
		t.Fatal(err)
	}
	past := time.After(2500 * time.Millisecond) // well beyond one TTL
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for n := 0; ; n++ {
		if _, err := l.Produce(ctx, "b"+strings.Repeat("x", n%3)+string(rune('a'+n%26)), []client.Record{{Value: []byte("v")}}); err != nil {
			t.Fatalf("produce %d: %v", n, err)
		}
		select {
		case <-past:
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := l.Produce(ctx, "after", []client.Record{{Value: []byte("v")}}); !errors.Is(err, client.ErrLeaseLost) {
				t.Fatalf("produce after release: %v", err)
			}
			return
		case <-tick.C:
		}
	}
}

func TestFrozenRenewalsLoseTheLease(t *testing.T) {
	t.Parallel()
	base := startGateway(t)
	gt := &gatedTransport{}
	frozen, _ := client.New(client.Config{BaseURL: base, Token: "tok", Owner: "w-old", TTL: time.Second,
		RenewEvery: 200 * time.Millisecond, HTTP: &http.Client{Transport: gt}})
	other, _ := client.New(client.Config{BaseURL: base, Token: "tok", Owner: "w-new", TTL: 10 * time.Second})
	ctx := context.Background()
	l, err := frozen.Acquire(ctx, "shard:2")
	if err != nil {
		t.Fatal(err)
	}
	gt.hold()
	var taken *client.Lease
	deadline := time.After(20 * time.Second)
	for taken == nil {
		taken, err = other.Acquire(ctx, "shard:2")
		if err != nil {
			var p *client.Problem
			if !errors.As(err, &p) || p.Code != "lease_held" {
				t.Fatal(err)
			}
			select {
			case <-deadline:
				t.Fatal("never taken over")
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	if _, err := l.Produce(ctx, "late", []client.Record{{Value: []byte("v")}}); !errors.Is(err, client.ErrLeaseLost) {
		t.Fatalf("the frozen worker wrote after the takeover: %v", err)
	}
	gt.release()
	select {
	case <-l.Lost():
	case <-time.After(10 * time.Second):
		t.Fatal("Lost() never closed")
	}
	if _, err := taken.Produce(ctx, "new", []client.Record{{Value: []byte("v")}}); err != nil {
		t.Fatalf("new owner: %v", err)
	}
	_ = taken.Release(ctx)
}
