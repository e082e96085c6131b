// Package sdktest runs the Go SDK (module github.com/fencegate/fencegate/client)
// against real gateway replicas: real Postgres, the embedded Kafka broker
// (kfake), the gateway's own HTTP server. It holds only tests: the SDK's
// module must not depend on the server's packages, so these tests live in
// the server's module.
package sdktest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/fencegate/fencegate/client"
	"github.com/fencegate/fencegate/fileconfig"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/internal/kafkatest"
	"github.com/fencegate/fencegate/internal/pgtest"
	"github.com/fencegate/fencegate/leasestore"
	"github.com/fencegate/fencegate/materializer"
	"github.com/fencegate/fencegate/txnmap"
	"github.com/fencegate/fencegate/verify"
)

const (
	topic      = "shard-output"
	partitions = 16
	token      = "sdk-test-token"
)

// barrierKey signs the replicas' barriers; the ledger verifies them.
var barrierKey = []byte("sdk test barrier key 0123456789")

// bundle is one Postgres database and one Kafka cluster (kfake, or a topic
// of its own on the external cluster) shared by the replicas of a test.
type bundle struct {
	t       testing.TB
	db      *pgtest.DB // the lease store's and the ledger's
	store   *leasestore.Store
	kafka   *kafkatest.Cluster
	router  *txnmap.Router
	auth    *gateway.Authenticator
	replica int
}

func setup(t testing.TB) *bundle {
	t.Helper()
	db := pgtest.New(t)
	store, err := leasestore.New(db.Pool, leasestore.Config{ValidateName: txnmap.ValidateName})
	if err != nil {
		t.Fatal(err)
	}
	k := kafkatest.Start(t, topic, partitions)
	router, err := txnmap.NewRouter(k.RouterPrefix("sdk"), []txnmap.Route{{Pattern: "shard:*", Topic: k.Topic, Partitions: partitions}})
	if err != nil {
		t.Fatal(err)
	}
	auth, err := gateway.NewAuthenticator([]fileconfig.Client{{Name: "worker", TokenSHA256: gateway.HashToken(token), Allow: []string{"shard:*"}}})
	if err != nil {
		t.Fatal(err)
	}
	return &bundle{t: t, db: db, store: store, kafka: k, router: router, auth: auth}
}

// replica is one gateway process at a fixed address. restart replaces its
// gateway as a process restart would: same name, same address, no
// sessions.
type replica struct {
	b    *bundle
	srv  *httptest.Server
	url  string
	cfg  gateway.Config
	mu   sync.Mutex
	g    *gateway.Gateway
	h    *gateway.Server
	down atomic.Bool // while true, connections are dropped (the process is gone)
}

func (b *bundle) newReplica(mod func(*gateway.Config)) *replica {
	b.t.Helper()
	b.replica++
	r := &replica{b: b}
	r.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if r.down.Load() {
			panic(http.ErrAbortHandler) // the client sees the connection drop
		}
		r.mu.Lock()
		h := r.h
		r.mu.Unlock()
		h.ServeHTTP(w, req)
	}))
	r.url = "http://" + r.srv.Listener.Addr().String()
	r.cfg = gateway.Config{
		Replica:        fmt.Sprintf("replica-%d", b.replica),
		AdvertiseURL:   r.url,
		HeartbeatEvery: 200 * time.Millisecond,
		Kafka:          gateway.KafkaConfig{Config: b.kafka.Conn, TransactionTimeoutMS: 10000},
		BarrierKey:     barrierKey,
		Ledger:         b.db.Pool, // the checkpoint read's; a ledger runs only where a test starts one
		CommitTimeout:  5 * time.Second,
		ReapInterval:   50 * time.Millisecond,
		Logger:         slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	if mod != nil {
		mod(&r.cfg)
	}
	r.start()
	r.srv.Start()
	b.t.Cleanup(func() { r.srv.Close(); r.gateway().Close() })
	return r
}

func (r *replica) start() {
	g, err := gateway.New(r.b.store, r.b.router, r.cfg)
	if err != nil {
		r.b.t.Fatal(err)
	}
	r.mu.Lock()
	r.g, r.h = g, gateway.NewServer(g, r.b.auth)
	r.mu.Unlock()
}

func (r *replica) gateway() *gateway.Gateway {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.g
}

// restart stops the replica's gateway (its sessions end, its producers
// close) and starts a new one under the same name and address. Requests
// that arrive meanwhile lose their connection.
func (r *replica) restart() {
	r.down.Store(true)
	r.gateway().Close()
	r.start()
	r.down.Store(false)
}

// balancer is a load balancer in front of replicas: route picks the
// replica for each request (a real one would hash on the lease name and
// skip replicas whose readiness fails).
type balancer struct {
	srv   *httptest.Server
	route atomic.Pointer[func(*http.Request) *replica]
}

func newBalancer(t testing.TB, route func(*http.Request) *replica) *balancer {
	t.Helper()
	lb := &balancer{}
	lb.setRoute(route)
	lb.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		target := (*lb.route.Load())(req)
		u, _ := url.Parse(target.url)
		httputil.NewSingleHostReverseProxy(u).ServeHTTP(w, req)
	}))
	t.Cleanup(lb.srv.Close)
	return lb
}

func (lb *balancer) setRoute(route func(*http.Request) *replica) { lb.route.Store(&route) }

// newClient is a worker talking to base.
func newClient(t testing.TB, base, owner string, mod func(*client.Config)) *client.Client {
	t.Helper()
	// Watch streams off unless a test turns them on (watch_test.go): the
	// replicas here relay no events unless asked.
	cfg := client.Config{BaseURL: base, Token: token, Owner: owner, TTL: 3 * time.Second, RenewEvery: 300 * time.Millisecond,
		MinBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond, DisableWatch: true}
	if mod != nil {
		mod(&cfg)
	}
	c, err := client.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// observed is an http.RoundTripper that records the problem codes the
// gateway answered, as "METHOD code", in order.
type observed struct {
	mu    sync.Mutex
	codes []string
	seen  chan string // every code, if not nil (never blocks)
}

func (o *observed) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil || resp.StatusCode < 300 {
		return resp, err
	}
	raw, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(raw))
	var p struct{ Code string }
	_ = json.Unmarshal(raw, &p)
	code := req.Method + " " + p.Code
	o.mu.Lock()
	o.codes = append(o.codes, code)
	o.mu.Unlock()
	if o.seen != nil {
		select {
		case o.seen <- code:
		default:
		}
	}
	return resp, nil
}

func (o *observed) saw(what string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, c := range o.codes {
		if c == what {
			n++
		}
	}
	return n
}

func (o *observed) all() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.codes...)
}

// holdEndTxn holds the next EndTxn at the broker until release is closed.
func (b *bundle) holdEndTxn() (entered, release chan struct{}) {
	entered, release = make(chan struct{}), make(chan struct{})
	var taken atomic.Bool
	fake := b.kafka.Fake(b.t)
	fake.ControlKey(kmsg.EndTxn.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		fake.DropControl()
		if !taken.CompareAndSwap(false, true) {
			return nil, nil, false
		}
		close(entered)
		fake.SleepControl(func() { <-release })
		return nil, nil, false
	})
	return entered, release
}

// acked is what the worker was told is committed, for verify.NoAckedLoss.
type acked struct {
	mu      sync.Mutex
	batches []verify.Batch
}

func (a *acked) add(lease, batch string, res client.Result) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.batches = append(a.batches, verify.Batch{Lease: lease, Token: res.Token, BatchID: batch, Offsets: res.Offsets})
}

// check reads the lease's partition back from Kafka and asserts that no
// record was written behind a later barrier, in offset or commit order
// (I2), and that every acknowledged batch is there at its offsets (I3).
func (b *bundle) check(t testing.TB, lease string, a *acked) []verify.Record {
	t.Helper()
	p, err := b.router.Resolve(lease)
	if err != nil {
		t.Fatal(err)
	}
	a.mu.Lock()
	batches := append([]verify.Batch(nil), a.batches...)
	a.mu.Unlock()
	recs, vs, err := verify.CheckPartition(b.kafka.Conn, b.kafka.Topic, p.Partition, batches, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vs {
		t.Errorf("%s", v)
	}
	return recs
}

// runLedger runs a materializer on the bundle's database, the ledger that
// checkpoint reads wait for, until stop (or the test's end).
func (b *bundle) runLedger() (stop func()) {
	b.t.Helper()
	m, err := materializer.New(b.db.Pool, b.router, materializer.Config{Kafka: b.kafka.Conn, BarrierKey: barrierKey,
		PollTimeout: 20 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		b.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				b.t.Errorf("materializer: %v", err)
			}
			m.Close()
		})
	}
	b.t.Cleanup(stop)
	return stop
}

// eventually polls cond until it holds or timeout passes.
func eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(timeout)
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("%s: not within %s", what, timeout)
		}
	}
}

// notLost fails the test if l is lost.
func notLost(t testing.TB, l *client.Lease) {
	t.Helper()
	select {
	case <-l.Lost():
		t.Fatalf("the lease was lost: %v", l.Err())
	default:
	}
}

var bg = context.Background()
