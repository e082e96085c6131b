package gateway_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate/client/wire"
	"github.com/fencegate/fencegate/fileconfig"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/internal/kafkatest"
	"github.com/fencegate/fencegate/internal/pgtest"
	"github.com/fencegate/fencegate/leasestore"
	"github.com/fencegate/fencegate/txnmap"
	"github.com/fencegate/fencegate/verify"
)

const (
	// topic is the lease topic asked of kafkatest: its name on kfake; on
	// an external cluster the test's own topic is b.kafka.Topic.
	topic      = "shard-output"
	partitions = 16
	devToken   = "test-token"
	// otherToken is a second client allowed the same leases as devToken's;
	// opsToken an operator that may act for any client.
	otherToken = "other-token"
	opsToken   = "ops-token"
	// directToken is the direct client's (an old binary's).
	directToken = "direct-token"
)

var barrierKey = []byte("test barrier key 0123456789")

// testClients are the clients of every test's config: ops is an admin
// that may act for anyone, oldbin an old binary that writes Kafka itself
// (kind direct, FM21).
var testClients = []fileconfig.Client{
	{Name: "worker", TokenSHA256: gateway.HashToken(devToken), Allow: []string{"shard:*"}},
	{Name: "narrow", TokenSHA256: gateway.HashToken("narrow-token"), Allow: []string{"shard:1?"}},
	{Name: "other", TokenSHA256: gateway.HashToken(otherToken), Allow: []string{"shard:*"}},
	{Name: "ops", TokenSHA256: gateway.HashToken(opsToken), Allow: []string{"*"}, ActFor: []string{"*"}, Admin: true},
	{Name: "oldbin", TokenSHA256: gateway.HashToken(directToken), Allow: []string{"shard:*"},
		Kind: fileconfig.KindDirect, KafkaPrincipal: "User:oldbin"},
}

// testBundle is one Postgres database and one Kafka cluster (kfake, or a
// topic of its own on the external cluster) shared by the replicas of a
// test.
type testBundle struct {
	t       testing.TB
	db      *pgtest.DB
	store   *leasestore.Store
	kafka   *kafkatest.Cluster
	router  *txnmap.Router
	auth    *gateway.Authenticator
	ctx     context.Context
	replica int
	// forward, when set, is each new replica's forwarding (its
	// Credential shared by them all).
	forward *gateway.Forwarding
}

func setup(t testing.TB) *testBundle {
	t.Helper()
	db := pgtest.New(t)
	store, err := leasestore.New(db.Pool, leasestore.Config{ValidateName: txnmap.ValidateName})
	if err != nil {
		t.Fatal(err)
	}
	auth, err := gateway.NewAuthenticator(testClients)
	if err != nil {
		t.Fatal(err)
	}
	b := &testBundle{t: t, db: db, store: store, auth: auth, ctx: context.Background()}
	b.useKafka(kafkatest.Start(t, topic, partitions))
	return b
}

// useKafka makes k the bundle's cluster and routes shard:* to its topic
// (call it before the first replica).
func (b *testBundle) useKafka(k *kafkatest.Cluster) {
	b.t.Helper()
	router, err := txnmap.NewRouter(k.RouterPrefix("test"), []txnmap.Route{{Pattern: "shard:*", Topic: k.Topic, Partitions: partitions}})
	if err != nil {
		b.t.Fatal(err)
	}
	b.kafka, b.router = k, router
}

// txnID is the transactional id of a lease.
func (b *testBundle) txnID(name string) string {
	b.t.Helper()
	id, err := txnmap.TransactionalID(b.kafka.RouterPrefix("test"), name)
	if err != nil {
		b.t.Fatal(err)
	}
	return id
}

// replica is one gateway process: a Gateway, its HTTP server and a clock
// that a test can freeze (a paused process sees no time pass).
type replica struct {
	g          *gateway.Gateway
	server     *gateway.Server
	srv        *httptest.Server
	clock      *clock
	name       string
	metricsURL string
}

type clock struct {
	frozen atomic.Pointer[time.Time]
	offset atomic.Int64
}

func (c *clock) now() time.Time {
	if f := c.frozen.Load(); f != nil {
		return *f
	}
	return time.Now().Add(time.Duration(c.offset.Load()))
}

// advance moves this replica's clock forward (a process that slept).
func (c *clock) advance(d time.Duration) { c.offset.Add(int64(d)) }

func (c *clock) freeze() { now := time.Now(); c.frozen.Store(&now) }

func (b *testBundle) newReplica(mod func(*gateway.Config)) *replica {
	b.t.Helper()
	return b.newReplicaOn(b.store, mod)
}

// newReplicaOn is newReplica on store (a store over a proxied pool).
func (b *testBundle) newReplicaOn(store gateway.LeaseStore, mod func(*gateway.Config)) *replica {
	b.t.Helper()
	b.replica++
	clk := &clock{}
	// The listener exists before the gateway, so the replica can advertise
	// its own address in the registry.
	var handler atomic.Pointer[gateway.Server]
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		handler.Load().ServeHTTP(w, r)
	}))
	cfg := gateway.Config{
		Replica:        fmt.Sprintf("replica-%d", b.replica),
		AdvertiseURL:   "http://" + srv.Listener.Addr().String(),
		HeartbeatEvery: 200 * time.Millisecond,
		Kafka:          gateway.KafkaConfig{Config: b.kafka.Conn, TransactionTimeoutMS: 10000},
		Ledger:         b.db.Pool,
		BarrierKey:     barrierKey,
		CommitTimeout:  5 * time.Second,
		ReapInterval:   50 * time.Millisecond,
		Now:            clk.now,
		// Warnings (fences, refused writes) show in failing tests' output;
		// per-handover info lines would drown benchmarks.
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	if mod != nil {
		mod(&cfg)
	}
	g, err := gateway.New(store, b.router, cfg)
	if err != nil {
		b.t.Fatal(err)
	}
	server := gateway.NewServer(g, b.auth)
	if b.forward != nil {
		if err := server.Forward(*b.forward); err != nil {
			b.t.Fatal(err)
		}
	}
	handler.Store(server)
	srv.Start()
	b.t.Cleanup(func() { srv.Close(); g.Close() })
	return &replica{g: g, server: server, srv: srv, clock: clk, name: cfg.Replica}
}

// reply is a decoded HTTP answer.
type reply struct {
	status int
	body   map[string]any
	raw    []byte
	header http.Header
}

func (r reply) code() string { s, _ := r.body["code"].(string); return s }

func (r reply) int(field string) int64 {
	n, _ := r.body[field].(json.Number)
	v, _ := n.Int64()
	return v
}

func (r *replica) do(t testing.TB, method, path string, body any) reply {
	t.Helper()
	return r.doAs(t, devToken, method, path, body)
}

func (r *replica) doAs(t testing.TB, token, method, path string, body any) reply {
	t.Helper()
	var rd io.Reader
	contentType := "application/json"
	switch v := body.(type) {
	case nil:
	case wire.Batch:
		rd, contentType = bytes.NewReader(wire.Append(nil, v)), wire.ContentType
	case rawBinary:
		rd, contentType = bytes.NewReader(v), wire.ContentType
	case []byte:
		rd = bytes.NewReader(v)
	case string:
		rd = bytes.NewReader([]byte(v))
	default:
		raw, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, r.srv.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	req.Header.Set("Content-Type", contentType)
	return send(t, req)
}

// send sends req and decodes the answer.
func send(t testing.TB, req *http.Request) reply {
	t.Helper()
	out, err := trySend(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL.Path, err)
	}
	return out
}

// trySend is send for a goroutine other than the test's: a transport
// error is returned, not fatal.
func trySend(req *http.Request) (reply, error) {
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return reply{}, err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	out := reply{status: resp.StatusCode, raw: raw, header: resp.Header}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	_ = dec.Decode(&out.body)
	return out, nil
}

// rawBinary is a body sent as-is with the binary batch's content type.
type rawBinary []byte

func (r *replica) acquire(t testing.TB, name, owner string, ttl time.Duration) reply {
	t.Helper()
	return r.do(t, "POST", "/v1/leases", map[string]any{"name": name, "owner_id": owner, "ttl_ms": ttl.Milliseconds()})
}

func (r *replica) regenerate(t testing.TB, name, owner string, token int64, ttl time.Duration) reply {
	t.Helper()
	return r.do(t, "POST", "/v1/leases", map[string]any{"name": name, "owner_id": owner, "ttl_ms": ttl.Milliseconds(), "token": token})
}

// acquireAsWorker acquires the way the answer table tells a worker to: a
// 503 kafka_unavailable granted nothing (a handover past its budget on a
// loaded machine) and is asked again, at most three times in all.
func (r *replica) acquireAsWorker(t testing.TB, name, owner string, ttl time.Duration) reply {
	t.Helper()
	rep := r.acquire(t, name, owner, ttl)
	for i := 1; i < 3 && rep.status == http.StatusServiceUnavailable && rep.code() == "kafka_unavailable"; i++ {
		t.Logf("acquire %s: %d %s; asking again", name, rep.status, rep.code())
		rep = r.acquire(t, name, owner, ttl)
	}
	return rep
}

// mustAcquire acquires (as a worker would) and returns the token.
func (r *replica) mustAcquire(t testing.TB, name, owner string, ttl time.Duration) int64 {
	t.Helper()
	rep := r.acquireAsWorker(t, name, owner, ttl)
	if rep.status != http.StatusCreated {
		t.Fatalf("acquire %s: %d %s", name, rep.status, rep.raw)
	}
	return rep.int("token")
}

func batchBody(owner string, token int64, batch string, n int) map[string]any {
	recs := make([]map[string]any, n)
	for i := range recs {
		recs[i] = map[string]any{
			"key":     map[string]any{"type": "STRING", "data": fmt.Sprintf("k%d", i)},
			"value":   map[string]any{"type": "BINARY", "data": base64.StdEncoding.EncodeToString([]byte(fmt.Sprintf("%s/%d", batch, i)))},
			"headers": map[string]string{"app": "test"},
		}
	}
	return map[string]any{"owner_id": owner, "token": token, "batch_id": batch, "records": recs}
}

func (r *replica) produce(t testing.TB, name, owner string, token int64, batch string, n int) reply {
	t.Helper()
	return r.do(t, "POST", "/v1/leases/"+name+"/records", batchBody(owner, token, batch, n))
}

// ackLog records acknowledged batches for the I3 check.
type ackLog struct {
	mu    sync.Mutex
	acked []verify.Batch
}

// mustProduce produces and logs the acknowledged batch.
func (b *testBundle) mustProduce(t testing.TB, r *replica, log *ackLog, name, owner string, token int64, batch string, n int) {
	t.Helper()
	b.mustProduceReplied(t, log, name, token, batch, r.produce(t, name, owner, token, batch, n))
}

// mustProduceReplied checks a produce reply and logs the acknowledged batch.
func (b *testBundle) mustProduceReplied(t testing.TB, log *ackLog, name string, token int64, batch string, rep reply) {
	t.Helper()
	if rep.status != http.StatusOK {
		t.Fatalf("produce %s batch %s: %d %s", name, batch, rep.status, rep.raw)
	}
	var res gateway.ProduceResult
	if err := json.Unmarshal(rep.raw, &res); err != nil {
		t.Fatal(err)
	}
	if res.Token != token || len(res.Offsets) == 0 {
		t.Fatalf("produce reply %+v, want offsets under token %d", res, token)
	}
	log.mu.Lock()
	log.acked = append(log.acked, verify.Batch{Lease: name, Token: token, BatchID: batch, Offsets: res.Offsets})
	log.mu.Unlock()
}

// partitionOf returns the partition of a lease.
func (b *testBundle) partitionOf(name string) int32 {
	p, err := b.router.Resolve(name)
	if err != nil {
		b.t.Fatal(err)
	}
	return p.Partition
}

// read returns the committed records of a lease's partition.
func (b *testBundle) read(t testing.TB, name string) []verify.Record {
	t.Helper()
	recs, err := verify.ReadPartition(b.kafka.Conn, b.kafka.Topic, b.partitionOf(name), 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

// checkInvariants asserts I2 (in offset order on what read_committed
// readers see, and in commit order on the whole log with its markers) and
// I3 on the lease's partition.
func (b *testBundle) checkInvariants(t testing.TB, name string, log *ackLog) []verify.Record {
	t.Helper()
	log.mu.Lock()
	acked := append([]verify.Batch(nil), log.acked...)
	log.mu.Unlock()
	recs, vs, err := verify.CheckPartition(b.kafka.Conn, b.kafka.Topic, b.partitionOf(name), acked, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vs {
		t.Errorf("%s", v)
	}
	return recs
}

// waitExpired waits until the lease has ended in database time.
func (b *testBundle) waitExpired(t testing.TB, name string) { pgtest.WaitExpired(t, b.store, name) }

// gate is a hook that pauses one (hook, lease, token) until released.
type gate struct {
	hook    gateway.Hook
	lease   string
	token   atomic.Int64 // 0: any token
	reached chan struct{}
	release chan struct{}
	once    sync.Once
	armed   atomic.Bool
}

func newGate(h gateway.Hook, lease string) *gate {
	g := &gate{hook: h, lease: lease, reached: make(chan struct{}), release: make(chan struct{})}
	g.armed.Store(true)
	return g
}

func (g *gate) fn(h gateway.Hook, lease string, token int64) {
	if h != g.hook || lease != g.lease || !g.armed.Load() {
		return
	}
	if want := g.token.Load(); want != 0 && want != token {
		return
	}
	if !g.armed.CompareAndSwap(true, false) {
		return
	}
	close(g.reached)
	<-g.release
}

func (g *gate) wait(t testing.TB) {
	t.Helper()
	select {
	case <-g.reached:
	case <-time.After(30 * time.Second):
		t.Fatalf("hook %s of %s never reached", g.hook, g.lease)
	}
}

func (g *gate) open() { g.once.Do(func() { close(g.release) }) }

func hooks(g *gate) func(*gateway.Config) {
	return func(c *gateway.Config) { c.Hooks.Fn = g.fn }
}

func strconvItoa(n int64) string { return fmt.Sprint(n) }

// eventually polls cond until it holds or timeout passes (no sleeping for
// an event: the condition is re-checked on a ticker with a deadline).
func eventually(t testing.TB, timeout time.Duration, cond func() (bool, string)) {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(timeout)
	for {
		ok, msg := cond()
		if ok {
			t.Log(msg)
			return
		}
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("condition did not hold within %s: %s", timeout, msg)
		}
	}
}
