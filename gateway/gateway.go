package gateway

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencegate/fencegate/barrier"
	"github.com/fencegate/fencegate/client/wire"
	"github.com/fencegate/fencegate/internal/telemetry"
	"github.com/fencegate/fencegate/leasestore"
	"github.com/fencegate/fencegate/txnmap"
)

// LeaseStore is what the gateway needs of the lease store.
type LeaseStore interface {
	// CheckGrant judges a grant's arguments without I/O (leasestore.Store.CheckGrant).
	CheckGrant(name, owner string, ttl time.Duration) error
	Acquire(ctx context.Context, name, owner string, ttl time.Duration, holder, client, gate string) (leasestore.Lease, error)
	Regenerate(ctx context.Context, name, owner string, token int64, ttl time.Duration, holder, client, gate string) (leasestore.Lease, error)
	Activate(ctx context.Context, name string, token, producerID int64, epoch int16) (leasestore.Lease, error)
	Renew(ctx context.Context, name, owner string, token int64, ttl time.Duration, gate string) (leasestore.Lease, error)
	Release(ctx context.Context, name, owner string, token int64) (leasestore.Lease, error)
	Abandon(ctx context.Context, name string, token int64) error
	Get(ctx context.Context, name string) (leasestore.Lease, error)
	List(ctx context.Context, prefix, after string, limit int) ([]leasestore.Lease, error)
	Events(ctx context.Context, name string, limit int) ([]leasestore.Event, error)
	Ping(ctx context.Context) error
	Heartbeat(ctx context.Context, replica, url string) error
	Deregister(ctx context.Context, replica string) error
	Replica(ctx context.Context, replica string, fresh time.Duration) (string, bool, error)
}

var _ LeaseStore = (*leasestore.Store)(nil)

// Limits bound what one request may carry (413 beyond them). Zero fields
// take the defaults of DefaultLimits. Every limit is checked while
// decoding, before the work it bounds (FM39).
type Limits struct {
	MaxRecords      int // records per batch (default 10000)
	MaxRecordBytes  int // key + value + headers of one record (default 1 MiB)
	MaxRequestBytes int // one request body (default 16 MiB)
	// MaxHeaders bounds the headers of one record (default 256), and
	// MaxHeaderBytes their names and values (default 64 KiB): a record's
	// headers are checked one by one (reserved names, UTF-8, repeats),
	// so their count is the work a record costs beyond its bytes.
	MaxHeaders     int
	MaxHeaderBytes int
	// MaxCheckpointBytes bounds a batch's checkpoint after decoding
	// (default DefaultMaxCheckpointBytes).
	MaxCheckpointBytes int
}

// DefaultLimits returns the defaults of Limits.
func DefaultLimits() Limits {
	var l Limits
	l.fill()
	return l
}

// DefaultParkAfter is the default of Config.ParkAfter and of `fencegate
// serve --park-after`: an idle librdkafka instance costs CPU on its own
// timers (docs/design.md, "Parking idle sessions"), and a worker that
// writes less often than this pays one resume per batch.
const DefaultParkAfter = 30 * time.Second

// ParkNever is a Config.ParkAfter that never parks a session.
const ParkNever time.Duration = -1

// Config of a Gateway. Zero fields take the defaults noted.
type Config struct {
	// Replica names this gateway process in lease rows (default "gateway-1").
	Replica string
	// AdvertiseURL is where other replicas send clients of leases this
	// replica holds (421 with holder_url). Empty: not registered.
	AdvertiseURL string
	// HeartbeatEvery is the registry heartbeat interval (default 2s); a
	// replica silent for 3 intervals is taken for gone.
	HeartbeatEvery time.Duration
	// Kafka is how producers reach the cluster.
	Kafka KafkaConfig
	// Ledger is the ledger's database, read by the checkpoint read (GET
	// /v1/leases/{name}/checkpoint); nil: that read answers
	// store_unavailable.
	Ledger *pgxpool.Pool
	// Placements is every recorded version of the routes' placements
	// (leasestore.Store.PlacementHistory): a checkpoint read also waits
	// for the ledger on the partitions a lease lived on under a route's
	// earlier partition counts (FM82). nil: no route ever changed.
	Placements []leasestore.Placement
	// BarrierKey signs generation barriers (at least 16 bytes; required).
	BarrierKey []byte
	// HandoverBudget is the share of the TTL a handover may take before it
	// fails closed (default 0.5), capped by MaxHandover (default 30s).
	HandoverBudget float64
	MaxHandover    time.Duration
	// CommitTimeout bounds one CommitTransaction/AbortTransaction call
	// (default 10s), and never beyond the session's local deadline.
	CommitTimeout time.Duration
	// ReapInterval is how often expired sessions are reaped and idle ones
	// parked (default 1s).
	ReapInterval time.Duration
	// ParkAfter parks a session that has had no batch for this long: its
	// producer closes, the session stays and renews, and its next batch
	// is answered not_holder so that the worker resumes it as a new
	// generation (docs/design.md, "Parking idle sessions"). Zero takes
	// DefaultParkAfter, as `fencegate serve --park-after` does, so that a
	// gateway built in a program or a test idles at the cost the binary
	// does; a negative value (ParkNever) never parks.
	ParkAfter time.Duration
	// MaxConcurrentHandovers bounds handovers in flight (default
	// DefaultMaxConcurrentHandovers):
	// each creates a librdkafka instance, and a thundering herd of them
	// (every worker re-acquiring after a restart) starves the process. An
	// acquire waits for a slot before its grant, so waiting spends none of
	// its TTL.
	MaxConcurrentHandovers int
	// MaxHandoverQueue bounds the acquires waiting for a slot (default 4 x
	// MaxConcurrentHandovers); beyond it an acquire is answered 429 at
	// once. Waiting acquires hold API requests in flight: unbounded, a cold
	// start of thousands filled the in-flight caps and renewals were
	// answered 429 until their leases expired. Slots and queue are shared
	// fairly between API clients (handoverSlots, FM47).
	MaxHandoverQueue int
	// MaxSessions bounds this replica's live sessions (default
	// DefaultMaxSessions), MaxSessionsPerClient those of one API client
	// (default DefaultMaxSessionsPerClient); an acquire beyond either is
	// answered 429 before its grant (FM46).
	MaxSessions          int
	MaxSessionsPerClient int
	Limits               Limits
	// LeaseMetrics exports the per-lease gauges (fencegate.lease.token and
	// fencegate.lease.producer.epoch, labelled with the lease name) for at
	// most LeaseMetricsLimit leases held here (default
	// telemetry.DefaultLeaseSeriesLimit), the first by name; the others are
	// counted in fencegate.lease.series.omitted. Off by default: /metrics
	// needs no credentials, and lease names and tokens are for the clients
	// allowed the leases (FM41).
	LeaseMetrics      bool
	LeaseMetricsLimit int
	// Hooks are named pause points for tests.
	Hooks Hooks
	// Now is the monotonic clock for local deadlines (default time.Now).
	Now    func() time.Time
	Logger *slog.Logger
	// MeterProvider and TracerProvider receive the gateway's metrics and
	// spans (default: no-op).
	MeterProvider  metric.MeterProvider
	TracerProvider trace.TracerProvider
}

func (c *Config) fill() error {
	if c.Replica == "" {
		c.Replica = "gateway-1"
	}
	if c.HandoverBudget == 0 {
		c.HandoverBudget = 0.5
	}
	if c.MaxHandover == 0 {
		c.MaxHandover = 30 * time.Second
	}
	if c.CommitTimeout == 0 {
		c.CommitTimeout = 10 * time.Second
	}
	if c.ReapInterval == 0 {
		c.ReapInterval = time.Second
	}
	if c.HeartbeatEvery == 0 {
		c.HeartbeatEvery = 2 * time.Second
	}
	c.MaxConcurrentHandovers = cmp.Or(c.MaxConcurrentHandovers, DefaultMaxConcurrentHandovers)
	c.MaxHandoverQueue = cmp.Or(c.MaxHandoverQueue, 4*c.MaxConcurrentHandovers)
	c.MaxSessions = cmp.Or(c.MaxSessions, DefaultMaxSessions)
	c.MaxSessionsPerClient = cmp.Or(c.MaxSessionsPerClient, DefaultMaxSessionsPerClient)
	c.Kafka.TransactionTimeoutMS = cmp.Or(c.Kafka.TransactionTimeoutMS, int(DefaultTransactionTimeout.Milliseconds()))
	c.ParkAfter = cmp.Or(c.ParkAfter, DefaultParkAfter)
	c.Limits.fill()
	c.LeaseMetricsLimit = cmp.Or(c.LeaseMetricsLimit, telemetry.DefaultLeaseSeriesLimit)
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.MeterProvider == nil {
		c.MeterProvider = metricnoop.NewMeterProvider()
	}
	if c.TracerProvider == nil {
		c.TracerProvider = tracenoop.NewTracerProvider()
	}
	if c.Kafka.Brokers == "" {
		return errors.New("gateway: Kafka.Brokers is required")
	}
	if c.MaxConcurrentHandovers < 0 || c.MaxHandoverQueue < 0 {
		return fmt.Errorf("gateway: MaxConcurrentHandovers %d and MaxHandoverQueue %d must not be negative", c.MaxConcurrentHandovers, c.MaxHandoverQueue)
	}
	if c.MaxSessions < 0 || c.MaxSessionsPerClient < 0 {
		return fmt.Errorf("gateway: MaxSessions %d and MaxSessionsPerClient %d must not be negative", c.MaxSessions, c.MaxSessionsPerClient)
	}
	if c.HandoverBudget <= 0 || c.HandoverBudget >= 1 {
		return fmt.Errorf("gateway: HandoverBudget %v must be in (0, 1)", c.HandoverBudget)
	}
	if c.LeaseMetricsLimit < 0 {
		return fmt.Errorf("gateway: LeaseMetricsLimit %d must not be negative", c.LeaseMetricsLimit)
	}
	return nil
}

func (l *Limits) fill() {
	if l.MaxRecords == 0 {
		l.MaxRecords = 10000
	}
	if l.MaxRecordBytes == 0 {
		l.MaxRecordBytes = 1 << 20
	}
	if l.MaxRequestBytes == 0 {
		l.MaxRequestBytes = 16 << 20
	}
	if l.MaxHeaders == 0 {
		l.MaxHeaders = 256
	}
	if l.MaxHeaderBytes == 0 {
		l.MaxHeaderBytes = 64 << 10
	}
	l.MaxCheckpointBytes = cmp.Or(l.MaxCheckpointBytes, DefaultMaxCheckpointBytes)
}

// DefaultMaxCheckpointBytes is the largest checkpoint of a batch, in bytes
// after decoding (docs/api.md, "Checkpoints").
const DefaultMaxCheckpointBytes = 64 << 10

func (l Limits) wire() wire.Limits {
	return wire.Limits{Records: l.MaxRecords, Headers: l.MaxHeaders, HeaderBytes: l.MaxHeaderBytes,
		Checkpoint: l.MaxCheckpointBytes}
}

// Gateway holds the sessions of one replica. Its methods are the lease and
// produce operations of docs/design.md ("Handover", "Produce"); the HTTP layer only decodes,
// authorises and encodes.
type Gateway struct {
	cfg    Config
	store  LeaseStore
	router *txnmap.Router
	signer *barrier.Signer
	insp   *inspector
	log    *slog.Logger
	met    *metrics
	tracer trace.Tracer
	slots  *handoverSlots // handovers in flight and waiting
	quotas *quotaMetrics

	mu       sync.Mutex
	sessions map[string]*session
	// draining: the replica is stopping (Drain); no new acquire, batch or
	// renewal is admitted.
	draining atomic.Bool

	closers sync.WaitGroup // producers being closed in the background
	stop    chan struct{}
	reaped  sync.WaitGroup // the reaper and the park loop
	once    sync.Once
}

// New returns a Gateway and starts its reaper. Call Close to stop it.
func New(store LeaseStore, router *txnmap.Router, cfg Config) (*Gateway, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	signer, err := barrier.NewSigner(cfg.BarrierKey)
	if err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	insp, err := newInspector(cfg.Kafka)
	if err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	g := &Gateway{cfg: cfg, store: store, router: router, signer: signer, insp: insp,
		log: cfg.Logger, sessions: map[string]*session{}, stop: make(chan struct{}),
		tracer: cfg.TracerProvider.Tracer("github.com/fencegate/fencegate/gateway"),
		slots:  newHandoverSlots(cfg.MaxConcurrentHandovers, cfg.MaxHandoverQueue)}
	if g.met, err = newMetrics(cfg.MeterProvider, g); err != nil {
		insp.close()
		return nil, fmt.Errorf("gateway: metrics: %w", err)
	}
	if g.quotas, err = newQuotaMetrics(cfg.MeterProvider, g); err != nil {
		insp.close()
		return nil, fmt.Errorf("gateway: metrics: %w", err)
	}
	g.store = timedStore{LeaseStore: store, dur: g.met.store}
	g.reaped.Add(1)
	go g.reapLoop()
	if cfg.ParkAfter > 0 {
		g.reaped.Add(1)
		go g.parkLoop()
	}
	return g, nil
}

// Close ends every session, closes every producer and waits for them.
func (g *Gateway) Close() {
	g.once.Do(func() {
		close(g.stop)
		g.reaped.Wait()
		g.mu.Lock()
		for name, s := range g.sessions {
			g.endLocked(s, errorf(CodeNotHolder, "gateway shutting down"))
			delete(g.sessions, name)
		}
		g.mu.Unlock()
		g.closers.Wait()
		g.insp.close()
		if g.met.observers != nil {
			_ = g.met.observers.Unregister()
		}
		g.quotas.close()
	})
}

// Ready checks that Postgres and Kafka answer, that every route's topic
// has the route's partition count, and that the replica is not draining.
func (g *Gateway) Ready(ctx context.Context) error {
	if g.draining.Load() {
		return errDraining()
	}
	if err := g.store.Ping(ctx); err != nil {
		return err
	}
	if err := g.insp.ping(ctx, g.router.Routes()); err != nil {
		return err
	}
	return g.insp.prefixDenied(ctx, g.router.Prefix())
}

// Sessions returns the number of live sessions on this replica.
func (g *Gateway) Sessions() int { return len(g.liveSessions()) }

// liveSessions returns the sessions not ended.
func (g *Gateway) liveSessions() []*session {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]*session, 0, len(g.sessions))
	for _, s := range g.sessions {
		if s.endedReason() == nil {
			out = append(out, s)
		}
	}
	return out
}

// Idle waits until every producer being closed in the background is gone.
func (g *Gateway) Idle() { g.closers.Wait() }

func (g *Gateway) session(name string) *session {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.sessions[name]
}

// endLocked ends s with reason and closes its producer in the background
// once no transaction holds it. The ended session stays in the map as a
// tombstone until its deadline, so late requests of that generation learn
// why it ended (fenced, superseded, expired). g.mu is held.
// The returned channel closes once the producer is closed.
func (g *Gateway) endLocked(s *session, reason *Error) <-chan struct{} {
	s.end(reason)
	closed := make(chan struct{})
	g.closers.Add(1)
	go func() {
		defer g.closers.Done()
		defer close(closed)
		s.mu.Lock()
		defer s.mu.Unlock()
		s.closeProducer()
	}()
	return closed
}

// install makes s the session of its lease unless a later generation is
// already installed. An earlier generation is ended.
func (g *Gateway) install(s *session) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if cur := g.sessions[s.name]; cur != nil {
		if cur.token > s.token {
			return false
		}
		g.endLocked(cur, errorf(CodeLeaseLost, "superseded by token %d", s.token))
	}
	g.sessions[s.name] = s
	return true
}

// dropOlder ends the local session of name if its token is below token
// (handover step 2) and returns it (nil: none).
func (g *Gateway) dropOlder(name string, token int64) *session {
	g.mu.Lock()
	defer g.mu.Unlock()
	cur := g.sessions[name]
	if cur == nil || cur.token >= token {
		return nil
	}
	g.endLocked(cur, errorf(CodeLeaseLost, "superseded by token %d", token))
	return cur
}

// endNow ends s (release) and returns a channel that closes once its
// producer is closed. s stays in the map until then (forget): a release
// sent again while the batch in flight has not settled finds it and waits
// for the same close, instead of finding no session and releasing the row
// under a batch about to commit (FM81).
func (g *Gateway) endNow(s *session, reason *Error) <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.endLocked(s, reason)
}

// forget deletes s from the map once its producer is closed, unless a
// later generation took its place.
func (g *Gateway) forget(s *session) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.sessions[s.name] == s {
		delete(g.sessions, s.name)
	}
}

func (g *Gateway) reapLoop() {
	defer g.reaped.Done()
	t := time.NewTicker(g.cfg.ReapInterval)
	defer t.Stop()
	hb := time.NewTicker(g.cfg.HeartbeatEvery)
	defer hb.Stop()
	g.heartbeat()
	for {
		select {
		case <-g.stop:
			return
		case <-t.C:
			g.reap()
		case <-hb.C:
			g.heartbeat()
		}
	}
}

// heartbeat registers this replica's address (routing only).
func (g *Gateway) heartbeat() {
	if g.cfg.AdvertiseURL == "" || g.draining.Load() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), g.cfg.HeartbeatEvery)
	defer cancel()
	if err := g.store.Heartbeat(ctx, g.cfg.Replica, g.cfg.AdvertiseURL); err != nil {
		g.log.Warn("replica heartbeat failed", "replica", g.cfg.Replica, "error", err)
	}
}

// sessionFor returns the session of name that a request of token is
// judged by, or nil when there is none here or it is older than token: a
// later generation lives on another replica or on none, which is a routing
// answer (notHolder), never lease_lost. The replica may keep an older
// session of the lease (the owner moved it with its token; a fenced
// tombstone) until that session's deadline.
func (g *Gateway) sessionFor(name string, token int64) *session {
	s := g.session(name)
	if s == nil || s.token < token {
		return nil
	}
	return s
}

// holderLookup bounds the registry lookup of a request whose session is
// not here.
const holderLookup = time.Second

// notHolder answers a request for a lease with no session here: 421 with
// the holder's address when another live replica holds it, else 409
// not_holder (ask for a new generation here), or 503 when the lookup fails
// (heldElsewhere). It reads Postgres for routing only; a session's own
// produce path never gets here.
func (g *Gateway) notHolder(ctx context.Context, name string) *Error {
	if e := g.heldElsewhere(ctx, name); e != nil {
		return e
	}
	return errorf(CodeNotHolder, "no session of %q on this replica; ask for a new generation with your current token", name)
}

// heldElsewhere answers 421 misdirected with the holder's address when
// another live replica holds the lease's session, and nil only when it
// found that none does. A lookup that fails or takes longer than
// holderLookup proves nothing: 503, retry (FM36). Answering not_holder
// then would move the lease for nothing, and a release would end the row
// under a holder still committing.
func (g *Gateway) heldElsewhere(ctx context.Context, name string) *Error {
	ctx, cancel := context.WithTimeout(ctx, holderLookup)
	defer cancel()
	l, err := g.store.Get(ctx, name)
	switch {
	case errors.Is(err, leasestore.ErrNotFound), errors.Is(err, leasestore.ErrInvalid):
		return nil
	case err != nil:
		return lookupFailed(name, err)
	case !l.Live() || l.Holder == g.cfg.Replica:
		return nil
	}
	url, alive, err := g.store.Replica(ctx, l.Holder, 3*g.cfg.HeartbeatEvery)
	switch {
	case errors.Is(err, leasestore.ErrNotFound):
		return nil // the holder deregistered (drained) or never advertised
	case err != nil:
		return lookupFailed(name, err)
	case !alive:
		return nil
	}
	return misdirected(name, l.Holder, url)
}

// misdirected is the answer of a replica without the session of a lease
// that the live replica holder, reachable at url, holds.
func misdirected(name, holder, url string) *Error {
	return &Error{Code: CodeMisdirected, Detail: fmt.Sprintf("lease %q is held on replica %q; send the request there", name, holder),
		Members: Members{Holder: holder, HolderURL: url}}
}

func lookupFailed(name string, err error) *Error {
	return errorf(CodeStoreUnavailable, "the replica holding %q could not be looked up (%v); nothing was done, retry", name, err)
}

// reap ends sessions whose local deadline passed and closes their
// producers: an expired session must not keep librdkafka threads alive.
func (g *Gateway) reap() {
	now := g.cfg.Now()
	g.mu.Lock()
	defer g.mu.Unlock()
	for name, s := range g.sessions {
		if s.expired(now) {
			g.endLocked(s, expiredError(name))
			delete(g.sessions, name)
		}
	}
}
