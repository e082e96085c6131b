package stack

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/fencegate/fencegate/internal/kafkadev"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/fencegate/fencegate/fileconfig"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/internal/netfault"
	"github.com/fencegate/fencegate/kafkaconn"
	"github.com/fencegate/fencegate/leasestore"
	"github.com/fencegate/fencegate/materializer"
	"github.com/fencegate/fencegate/materializer/schema"
	"github.com/fencegate/fencegate/txnmap"
)

// Topic names and sizes of the embedded stack.
const (
	LeaseTopic  = "shard-output"
	NaiveTopic  = "naive-output"
	DirectTopic = "direct-output"
	Partitions  = 16
	// WorkerToken is the bearer token of the harness's workers.
	WorkerToken = "loadtest-token"
	barrierKey  = "loadtest-barrier-key-0123456789"
	// CommitTimeout is the embedded gateway's commit timeout; the
	// ambiguity fault holds EndTxn longer.
	CommitTimeout = 2 * time.Second
)

// harnessLimits are the gateway's HTTP limits in the harness: the defaults
// but for the in-flight caps, which many workers behind one token would
// otherwise meet (the caps have their own test, TestHostileClients).
var harnessLimits = gateway.ServerConfig{MaxInFlight: 1 << 16, MaxInFlightPerClient: 1 << 16}

// Stack is what a run drives: a gateway URL, the brokers and the database.
type Stack struct {
	GatewayURL string
	// Kafka is how the harness, its gateway and materializer reach the
	// cluster.
	Kafka       kafkaconn.Config
	DatabaseURL string
	Pool        *pgxpool.Pool
	Router      *txnmap.Router
	cluster     *kfake.Cluster // embedded only
	// topic is the lease topic when it is not LeaseTopic (an external
	// cluster: StartEmbeddedOn).
	topic     string
	closers   []func()
	ambiguity sync.Mutex
	// Materialize: a materializer applies the lease topic to the
	// database, so the ledger can be checked.
	Materialize bool
	// Trusted: the materializer also writes the trusted topic
	// (WithTrusted), so it can be checked too.
	Trusted bool
	// LedgerValues is the materializer's --ledger-values
	// (WithLedgerValues; empty: the default, keep).
	LedgerValues materializer.LedgerValues
	// Token is the workers' bearer token of an external gateway (default
	// WorkerToken).
	Token string
	// tokens are the bearer tokens of the API clients the harness
	// registered with the gateways it started (WithClients), one client
	// each; workers are spread over them round-robin.
	tokens []string
	// limits are the in-flight caps of the gateways the harness starts
	// (WithLimits; zero: harnessLimits).
	limits gateway.ServerConfig
	// gw is the in-process gateway (embedded only), for leak checks.
	gw *gateway.Gateway
	// children are the gateway replicas as child processes
	// (StartEmbeddedReplicas only), at GatewayURLs.
	children    []*ChildGateway
	GatewayURLs []string
	// separate: every component is a child process whose CPU and memory
	// the harness samples (StartSeparateProcesses only).
	separate *separate
	// apache is the Apache Kafka cluster of SeparateOptions.KafkaCluster
	// (nil: none).
	apache *kafkadev.Cluster
	// balancerKind is the load balancer in front of the children
	// (WithBalancer; "": none), bal its process, BalancerURL its address:
	// the workers' base URL.
	balancerKind string
	bal          *balancer
	BalancerURL  string
	// childDir holds the children's files (config, replica credential,
	// the balancer's config and socket); forwarding: the children share a
	// replica credential and forward to the holder.
	childDir   string
	forwarding bool
	// mixed: the mixed fleet's clients, admin API and broker ACLs
	// (WithMixedFleet).
	mixed bool
	// brokerLinks, pgLink and faultPool are the fault proxies and the
	// components' pool through them (WithNetFaults).
	brokerLinks *netfault.Links
	pgLink      *netfault.Link
	faultPool   *pgxpool.Pool
}

// StackOption configures a stack that the harness starts (StartEmbedded,
// StartEmbeddedOn, StartEmbeddedReplicas, StartSeparateProcesses).
type StackOption func(*Stack) error

// MaxClients bounds WithClients.
const MaxClients = 10000

// WithClients registers n API clients with the gateways the harness
// starts, each with a bearer token of its own and the same allow pattern
// (shard:*), and spreads the workers over them round-robin, as an estate
// of many workers is many clients: the gateway caps requests in flight per
// client. The first is the one client of the default (n = 1): "loadtest",
// token WorkerToken.
func WithClients(n int) StackOption {
	return func(s *Stack) error {
		if n < 1 || n > MaxClients {
			return fmt.Errorf("clients must be 1..%d", MaxClients)
		}
		s.tokens = clientTokens(n)
		return nil
	}
}

// WithLimits sets the in-flight caps (MaxInFlight, MaxInFlightPerClient;
// a zero field takes the gateway's default, as serve's flags do) of the
// gateways the harness starts, instead of the lifted caps of
// harnessLimits.
func WithLimits(c gateway.ServerConfig) StackOption {
	return func(s *Stack) error {
		d := gateway.DefaultServerConfig()
		if c.MaxInFlight == 0 {
			c.MaxInFlight = d.MaxInFlight
		}
		if c.MaxInFlightPerClient == 0 {
			c.MaxInFlightPerClient = d.MaxInFlightPerClient
		}
		if c.MaxInFlight < 0 || c.MaxInFlightPerClient < 0 {
			return errors.New("in-flight caps must be >= 0")
		}
		s.limits = gateway.ServerConfig{MaxInFlight: c.MaxInFlight, MaxInFlightPerClient: c.MaxInFlightPerClient}
		return nil
	}
}

// InFlightCaps are the in-flight caps of the gateways the harness started;
// ok is false for an external gateway, whose caps it does not know.
func (s *Stack) InFlightCaps() (caps gateway.ServerConfig, ok bool) {
	return s.caps(), len(s.tokens) > 0
}

// caps are the in-flight caps of the gateways the stack starts.
func (s *Stack) caps() gateway.ServerConfig {
	if s.limits.MaxInFlight == 0 {
		return harnessLimits
	}
	return s.limits
}

// newStack is a stack the harness starts, its options applied.
func newStack(opts []StackOption) (*Stack, error) {
	s := &Stack{Materialize: true, tokens: clientTokens(1)}
	for _, o := range opts {
		if err := o(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// clientTokens are the bearer tokens of n harness clients.
func clientTokens(n int) []string {
	out := []string{WorkerToken}
	for i := 1; i < n; i++ {
		out = append(out, fmt.Sprintf("%s-%d", WorkerToken, i))
	}
	return out
}

// clientName is the name of the i-th harness client.
func clientName(i int) string {
	if i == 0 {
		return "loadtest"
	}
	return fmt.Sprintf("loadtest-%d", i)
}

// WorkerTokens are the bearer tokens workers use: the registered clients'
// or, for an external gateway, Token.
func (s *Stack) WorkerTokens() []string {
	if len(s.tokens) > 0 {
		return s.tokens
	}
	return []string{s.Token}
}

// Clients is the number of API clients the workers are spread over.
func (s *Stack) Clients() int { return len(s.WorkerTokens()) }

// configYAML is the routes and clients file of the harness's gateways:
// the children read it (--config), the in-process gateway takes its
// clients from it too, so both register the same clients.
func (s *Stack) configYAML() []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "transactional_id_prefix: loadtest\nroutes:\n"+
		"  - {pattern: \"shard:*\", topic: %s, partitions: %d}\n  - {pattern: \"naive:*\", topic: %s, partitions: %d}\nclients:\n",
		LeaseTopic, Partitions, NaiveTopic, Partitions)
	for i, tok := range s.WorkerTokens() {
		fmt.Fprintf(&b, "  - {name: %s, token_sha256: %s, allow: [\"shard:*\"]}\n", clientName(i), gateway.HashToken(tok))
	}
	if s.mixed {
		mixedClientsYAML(&b)
	}
	return []byte(b.String())
}

// URLs are the gateway replicas' URLs (one for an in-process or external
// gateway).
func (s *Stack) URLs() []string {
	if len(s.GatewayURLs) > 0 {
		return s.GatewayURLs
	}
	return []string{s.GatewayURL}
}

// LiveSessions returns the embedded gateway's live sessions after its
// background producer closes finished, or -1 when not embedded (not
// measured: the report says so).
func (s *Stack) LiveSessions() int {
	if s.gw == nil {
		return -1
	}
	s.gw.Idle()
	return s.gw.Sessions()
}

// External describes a running gateway, its Kafka and its database.
func External(ctx context.Context, gatewayURL string, conn kafkaconn.Config, databaseURL, token string, router *txnmap.Router) (*Stack, error) {
	if err := loopbackOnly(gatewayURL, conn.Brokers); err != nil {
		return nil, err
	}
	s := &Stack{GatewayURL: gatewayURL, Kafka: conn, DatabaseURL: databaseURL, Router: router, Token: token, Materialize: true}
	if p, err := router.Resolve("shard:0"); err != nil || p.Topic != LeaseTopic {
		return nil, fmt.Errorf("the gateway's routes must send shard:* to %s (got %+v, %v)", LeaseTopic, p, err)
	}
	pool, err := pgxpool.New(ctx, databaseURL)
	if err != nil {
		return nil, err
	}
	s.Pool = pool
	s.closers = append(s.closers, pool.Close)
	return s, nil
}

// Close stops everything the stack started, in reverse order.
func (s *Stack) Close() {
	for i := len(s.closers) - 1; i >= 0; i-- {
		s.closers[i]()
	}
}

// NewRouter returns the routes of the harness: shard:* on LeaseTopic by
// number, naive:* on NaiveTopic.
func NewRouter() (*txnmap.Router, error) {
	return txnmap.NewRouter("loadtest", []txnmap.Route{
		{Pattern: "shard:*", Topic: LeaseTopic, Partitions: Partitions},
		{Pattern: "naive:*", Topic: NaiveTopic, Partitions: Partitions},
	})
}

// Topic is the topic of the shard:* leases.
func (s *Stack) Topic() string {
	if s.topic != "" {
		return s.topic
	}
	return LeaseTopic
}

// StartEmbedded starts, in this process, a fresh database on serverURL's
// server, a kfake development broker, a gateway and a materializer.
func StartEmbedded(ctx context.Context, serverURL string, log *slog.Logger, opts ...StackOption) (*Stack, error) {
	return startEmbedded(ctx, serverURL, log, true, opts)
}

// ExternalKafka is a Kafka cluster the embedded stack uses instead of
// kfake (the release check, make test-external).
type ExternalKafka struct {
	Conn kafkaconn.Config
	// LeaseTopic is a topic with Partitions partitions that the caller
	// made for this run (and deletes after it).
	LeaseTopic string
	// Prefix is the gateway's transactional-id prefix, one of this run
	// alone: producer epochs on the cluster outlive the run.
	Prefix string
}

// StartEmbeddedOn is StartEmbedded with the gateway and the materializer
// on k's cluster instead of kfake. Only shard:* leases are routed: the
// naive and direct baselines write topics of their own and the ambiguity
// fault holds EndTxn at kfake, so a run on it turns them off.
func StartEmbeddedOn(ctx context.Context, serverURL string, k ExternalKafka, log *slog.Logger, opts ...StackOption) (*Stack, error) {
	s, err := newStack(opts)
	if err != nil {
		return nil, err
	}
	if s.mixed {
		return nil, errMixedInProcess
	}
	s.Kafka, s.topic = k.Conn, k.LeaseTopic
	ok := false
	defer func() {
		if !ok {
			s.Close()
		}
	}()
	if err := k.Conn.Validate(); err != nil {
		return nil, err
	}
	if err := s.freshDatabase(ctx, serverURL); err != nil {
		return nil, err
	}
	if s.Router, err = txnmap.NewRouter(k.Prefix, []txnmap.Route{{Pattern: "shard:*", Topic: k.LeaseTopic, Partitions: Partitions}}); err != nil {
		return nil, err
	}
	if err := s.startGateway(s.Pool, log); err != nil {
		return nil, err
	}
	if err := s.startMaterializer(ctx, s.Pool, log); err != nil {
		return nil, err
	}
	ok = true
	return s, nil
}

func startEmbedded(ctx context.Context, serverURL string, log *slog.Logger, withGateway bool, opts []StackOption) (*Stack, error) {
	s, err := newStack(opts)
	if err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			s.Close()
		}
	}()
	if err := s.freshDatabase(ctx, serverURL); err != nil {
		return nil, err
	}
	if s.mixed && !withGateway {
		return nil, errMixedInProcess
	}
	copts := []kfake.Opt{kfake.NumBrokers(1), kfake.SeedTopics(Partitions, LeaseTopic, NaiveTopic, DirectTopic)}
	if s.mixed {
		copts = append(copts, mixedClusterOpts()...)
	}
	if s.brokerLinks != nil {
		copts = append(copts, kfake.ListenFn(s.brokerLinks.Listen))
		s.closers = append(s.closers, s.brokerLinks.Close)
	}
	cluster, err := kfake.NewCluster(copts...)
	if err != nil {
		return nil, err
	}
	s.cluster = cluster
	s.closers = append(s.closers, cluster.Close)
	s.Kafka = kafkaconn.Config{Brokers: strings.Join(cluster.ListenAddrs(), ",")}
	if s.mixed {
		s.Kafka = superuserConn(s.Kafka.Brokers)
	}
	if s.Router, err = NewRouter(); err != nil {
		return nil, err
	}
	pool, err := s.componentPool(ctx)
	if err != nil {
		return nil, err
	}
	if withGateway {
		if err := s.startGateway(pool, log); err != nil {
			return nil, err
		}
	}
	if err := s.startMaterializer(ctx, pool, log); err != nil {
		return nil, err
	}
	ok = true
	return s, nil
}

func (s *Stack) freshDatabase(ctx context.Context, serverURL string) error {
	admin, err := pgx.Connect(ctx, serverURL)
	if err != nil {
		return fmt.Errorf("postgres at %s: %w (start it with deploy/dev/pg.sh start)", serverURL, err)
	}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "fencegate_loadtest_" + hex.EncodeToString(b)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		admin.Close(ctx)
		return err
	}
	s.closers = append(s.closers, func() {
		defer admin.Close(context.Background())
		_, _ = admin.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	})
	u, err := url.Parse(serverURL)
	if err != nil {
		return err
	}
	u.Path = "/" + name
	s.DatabaseURL = u.String()
	if s.Pool, err = pgxpool.New(ctx, s.DatabaseURL); err != nil {
		return err
	}
	s.closers = append(s.closers, s.Pool.Close)
	if _, err = leasestore.Migrate(ctx, s.Pool); err != nil {
		return err
	}
	_, err = schema.Migrate(ctx, s.Pool)
	return err
}

func (s *Stack) startGateway(pool *pgxpool.Pool, log *slog.Logger) error {
	store, err := leasestore.New(pool, leasestore.Config{ValidateName: txnmap.ValidateName})
	if err != nil {
		return err
	}
	// The clients of the children's config file (the routes are the
	// stack's own: StartEmbeddedOn has other ones).
	fc, _, err := fileconfig.Parse(s.configYAML())
	if err != nil {
		return err
	}
	auth, err := gateway.NewAuthenticator(fc.Clients)
	if err != nil {
		return err
	}
	g, err := gateway.New(store, s.Router, gateway.Config{Replica: "loadtest-gateway",
		Kafka: gateway.KafkaConfig{Config: s.Kafka}, BarrierKey: []byte(barrierKey), Ledger: pool,
		CommitTimeout: CommitTimeout, Logger: log.With("component", "gateway")})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		g.Close()
		return err
	}
	// The listener of `fencegate serve` (timeouts), its in-flight caps
	// the stack's (lifted by default: by default every worker of the
	// harness shares one token).
	api := gateway.NewServer(g, auth)
	api.Limit(s.caps())
	if s.mixed {
		if err := s.serveAdmin(api, store, auth, fc.Clients); err != nil {
			g.Close()
			_ = ln.Close()
			return err
		}
	}
	srv, err := s.caps().HTTPServer(api, log.With("component", "gateway"))
	if err != nil {
		g.Close()
		_ = ln.Close()
		return err
	}
	go func() { _ = srv.Serve(ln) }()
	s.GatewayURL = "http://" + ln.Addr().String()
	s.gw = g
	s.closers = append(s.closers, func() { _ = srv.Close(); g.Close() })
	return nil
}

func (s *Stack) startMaterializer(ctx context.Context, pool *pgxpool.Pool, log *slog.Logger) error {
	m, err := materializer.New(pool, s.Router, materializer.Config{Kafka: s.Kafka,
		BarrierKey: []byte(barrierKey), Logger: log.With("component", "materializer"), LedgerValues: s.LedgerValues})
	if err != nil {
		return err
	}
	if s.Trusted {
		if err := s.startTrusted(ctx, m, log.With("component", "materializer")); err != nil {
			return err
		}
	}
	mctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan error, 1)
	go func() { done <- supervise(mctx, m.Run, log) }()
	s.closers = append(s.closers, func() {
		cancel()
		if err := <-done; err != nil {
			log.Error("materializer stopped", "error", err)
		}
		m.Close()
	})
	return nil
}

// InProcessBroker reports whether the stack's broker is kfake in this
// process, whose requests the harness can hold (HoldNextEndTxn).
func (s *Stack) InProcessBroker() bool { return s.cluster != nil }

// Children are the gateway replicas that run as child processes, in the
// order of GatewayURLs (none for an in-process or external gateway).
func (s *Stack) Children() []*ChildGateway { return s.children }

// Separate returns the options of a stack whose components run as
// separate processes; ok is false for any other stack.
func (s *Stack) Separate() (opts SeparateOptions, ok bool) {
	if s.separate == nil {
		return SeparateOptions{}, false
	}
	return s.separate.opts, true
}

// HoldNextEndTxn makes the embedded broker hold the next EndTxn for d,
// longer than the gateway's commit timeout: the commit's outcome is
// unknown to the gateway (FM22). It reports whether a hold was armed.
func (s *Stack) HoldNextEndTxn(d time.Duration) bool {
	if s.cluster == nil || !s.ambiguity.TryLock() {
		return false
	}
	var once sync.Once
	s.cluster.ControlKey(kmsg.EndTxn.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		s.cluster.DropControl()
		held := false
		once.Do(func() { held = true })
		if held {
			timer := time.NewTimer(d)
			s.cluster.SleepControl(func() { <-timer.C })
			s.ambiguity.Unlock()
		}
		return nil, nil, false
	})
	return true
}

// ErrNotEmbedded is returned for a fault that needs the embedded broker.
var ErrNotEmbedded = errors.New("this fault needs --embedded")

// loopbackOnly refuses targets off this machine: the harness generates
// load and injects faults, and must never point them at a shared system.
func loopbackOnly(gatewayURL, brokers string) error {
	u, err := url.Parse(gatewayURL)
	if err != nil {
		return err
	}
	hosts := []string{u.Hostname()}
	for _, b := range strings.Split(brokers, ",") {
		h, _, err := net.SplitHostPort(strings.TrimSpace(b))
		if err != nil {
			return fmt.Errorf("broker %q: %w", b, err)
		}
		hosts = append(hosts, h)
	}
	for _, h := range hosts {
		ip := net.ParseIP(h)
		if h != "localhost" && (ip == nil || !ip.IsLoopback()) {
			return fmt.Errorf("the load harness targets loopback only; %q is not", h)
		}
	}
	return nil
}
