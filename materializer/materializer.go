// Package materializer is fencegate's defence in depth behind the broker's
// epoch fence, and the producer of the one ledger downstream readers may
// trust. It reads the lease topics read_committed, partition by partition
// in offset order, and applies to Postgres, in one transaction per chunk
// of one partition's records:
//
//   - a barrier whose HMAC verifies, signed for this lease, on the lease's
//     partition, with a token above the fence, advances the fence; any
//     other barrier is rejected as bad_barrier. A fence guards one lease
//     on one partition: Kafka orders records only within a partition, and
//     a lease that moved when its route grew keeps its older generations
//     on the partition it left (FM31);
//   - a data record with token == fence and a new (lease, owner_id, batch_id, seq) is
//     accepted into accepted_records, whose unique key on those columns
//     is the dedup memory (applied_keys is a view of it); token < fence
//     is stale, token > fence is unfenced (a bare number never moves a
//     fence, FM11), a known key is duplicate;
//   - a record without valid fencegate headers is malformed, as is one
//     the ledger cannot keep exactly (a stamp or header not UTF-8 or
//     with a NUL) or that Postgres refuses (SQLSTATE class 22 or 54: the
//     chunk is applied in halves down to that record, FM30), so no
//     record halts the ledger;
//   - every rejection is written to rejected_records with its reason
//     (FM15);
//   - the consumed position advances by compare-and-set in the same
//     transaction (FM13, FM14): two instances on one partition cannot both
//     apply a record, and a crash at any statement leaves no trace.
//
// The fence is a running state in offset order, never the final high-water
// mark (FM12): records written by a generation before its successor's
// barrier stay valid. Rebuilding from offset 0 gives the same ledger.
//
// It must never import the gateway, nor stop on a record it cannot judge:
// it shares no acceptance code with what it defends against, and a record
// it cannot keep is refused with a receipt, never a halt.
package materializer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/fencegate/fencegate/barrier"
	"github.com/fencegate/fencegate/internal/probe"
	"github.com/fencegate/fencegate/internal/telemetry"
	"github.com/fencegate/fencegate/kafkaconn"
	"github.com/fencegate/fencegate/txnmap"
)

// Verdict is what the materializer decided for one record.
type Verdict string

// The verdicts (docs/ledger.md, "The materializer and the ledger").
const (
	Accepted   Verdict = "accepted"
	Barrier    Verdict = "barrier"
	Stale      Verdict = "stale"
	Unfenced   Verdict = "unfenced"
	Duplicate  Verdict = "duplicate"
	BadBarrier Verdict = "bad_barrier"
	Malformed  Verdict = "malformed"
	// Kept is a record that would have been stale, unfenced or malformed
	// (written without any stamp) but is kept in kept_records, because
	// its pattern was in observe or gated where it was written (FM21).
	Kept Verdict = "kept"
	// Marker is a rollout marker that verified and set its pattern's
	// state on the partition.
	Marker Verdict = "marker"
	// Checkpoint is a batch's checkpoint record of the generation in
	// force: the lease's row of checkpoints moves to it if it is newer
	// (docs/design.md, "Checkpoints").
	Checkpoint Verdict = "checkpoint"
)

// Verdicts lists every verdict, for metrics and reports.
var Verdicts = []Verdict{Accepted, Barrier, Stale, Unfenced, Duplicate, BadBarrier, Malformed, Kept, Marker, Checkpoint}

// KeptVerdicts lists the verdicts a kept record would have had.
var KeptVerdicts = []Verdict{Stale, Unfenced, Malformed}

// Hooks are named points for tests.
type Hooks struct {
	// AfterStatement runs after each statement of an apply transaction
	// with the running statement count; an error aborts the transaction
	// and stops Run, like a crash at that point (FM13).
	AfterStatement func(n int64) error
}

// Config of a Materializer. Zero fields take the defaults noted.
type Config struct {
	// Kafka is how the consumer reaches the cluster (brokers required;
	// TLS and SASL as the gateway's).
	Kafka kafkaconn.Config
	// Consumer holds extra librdkafka consumer properties; security
	// properties belong in Kafka and are refused here.
	Consumer map[string]string
	// GroupID of the consumer (default "fencegate-materializer"); only a
	// hint: positions live in consumer_positions.
	GroupID string
	// BarrierKey verifies barriers (the gateway's key; required).
	BarrierKey []byte
	// PreviousBarrierKeys also verify barriers: keys being rotated out,
	// kept while barriers they signed may still be read.
	PreviousBarrierKeys [][]byte
	// Partitions limits this instance to these partitions of every routed
	// topic (empty: all). Instances on disjoint sets scale out; overlapping
	// sets are safe too (compare-and-set on positions, FM14).
	Partitions []int32
	// MaxBatch is the most records applied in one transaction (default
	// 2000).
	MaxBatch int
	// Parallel is how many partitions' transactions run at once (default
	// 4); the Postgres pool needs as many connections.
	Parallel int
	// PollTimeout bounds one consumer poll (default 100ms).
	PollTimeout time.Duration
	// LedgerValues is what accepted_records keeps of each record's bytes
	// (default DefaultLedgerValues): KeepValues, or DropValues for
	// metadata-only rows with a Digest (FM72).
	LedgerValues LedgerValues
	// LeaseMetrics exports fencegate.materializer.fence.token, labelled
	// with the lease name, for at most LeaseMetricsLimit leases (default
	// telemetry.DefaultLeaseSeriesLimit), the first by name; the others
	// are counted in fencegate.materializer.fence.series.omitted. Off by
	// default: /metrics needs no credentials (FM41).
	LeaseMetrics      bool
	LeaseMetricsLimit int
	Hooks             Hooks
	Logger            *slog.Logger
	// MeterProvider receives the metrics (default: no-op).
	MeterProvider metric.MeterProvider
}

func (c *Config) fill() error {
	if err := c.Kafka.Validate(); err != nil {
		return fmt.Errorf("materializer: %w", err)
	}
	for k := range c.Consumer {
		if strings.HasPrefix(k, "ssl.") || strings.HasPrefix(k, "sasl.") || k == "security.protocol" || k == "bootstrap.servers" {
			return fmt.Errorf("materializer: Consumer may not set %q; use the Kafka connection settings", k)
		}
	}
	if c.GroupID == "" {
		c.GroupID = "fencegate-materializer"
	}
	if c.MaxBatch == 0 {
		c.MaxBatch = 2000
	}
	if c.Parallel == 0 {
		c.Parallel = DefaultParallel
	}
	if c.PollTimeout == 0 {
		c.PollTimeout = 100 * time.Millisecond
	}
	if c.LeaseMetricsLimit == 0 {
		c.LeaseMetricsLimit = telemetry.DefaultLeaseSeriesLimit
	}
	c.LedgerValues = cmp.Or(c.LedgerValues, DefaultLedgerValues)
	if err := checkValues(c.LedgerValues); err != nil {
		return err
	}
	if c.LeaseMetricsLimit < 0 {
		return fmt.Errorf("materializer: LeaseMetricsLimit %d must not be negative", c.LeaseMetricsLimit)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.MeterProvider == nil {
		c.MeterProvider = noop.NewMeterProvider()
	}
	return nil
}

// Materializer applies lease topics to the ledger.
type Materializer struct {
	pool   *pgxpool.Pool
	router *txnmap.Router
	signer *barrier.Signer
	cfg    Config
	log    *slog.Logger

	stmts    atomic.Int64
	verdicts sync.Map // Verdict -> *atomic.Int64
	kept     sync.Map // would-be Verdict of kept records -> *atomic.Int64
	lagMu    sync.Mutex
	lag      map[partitionKey]int64
	running  atomic.Bool
	met      *metrics
	// denied is the grants the cluster last refused (askDenied), hint a
	// refusal of librdkafka's not yet asked about (noteDenied).
	deniedMu sync.Mutex
	denied   *kafkaconn.MissingGrantError
	hint     atomic.Pointer[kafkaconn.MissingGrantError]
	fenceMu  sync.Mutex
	fences   map[string]int64 // lease -> highest token on any partition, as committed by this instance
	// ready serves /readyz from a cached Ready (FM43).
	ready *probe.Cache
	// trusted is the Kafka sink made by Trusted, if any.
	trusted *TrustedSink

	// copiedChunks counts chunks copied straight into the ledger,
	// copyFallbacks those whose COPY met a key applied before and went
	// through the stage instead.
	copiedChunks, copyFallbacks atomic.Int64
}

type partitionKey struct {
	topic     string
	partition int32
}

// DefaultParallel is Config.Parallel's default.
const DefaultParallel = 4

// New returns a Materializer for the topics of router's routes. pool is
// the ledger's database; nil for a materializer whose only sink is the
// trusted topic (Trusted), whose Run then fails.
func New(pool *pgxpool.Pool, router *txnmap.Router, cfg Config) (*Materializer, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	signer, err := barrier.NewSigner(cfg.BarrierKey, cfg.PreviousBarrierKeys...)
	if err != nil {
		return nil, fmt.Errorf("materializer: %w", err)
	}
	m := &Materializer{pool: pool, router: router, signer: signer, cfg: cfg, log: cfg.Logger,
		lag: map[partitionKey]int64{}, fences: map[string]int64{}}
	m.ready = probe.New(m.Ready, probe.Config{})
	for _, v := range Verdicts {
		m.verdicts.Store(v, new(atomic.Int64))
	}
	for _, v := range KeptVerdicts {
		m.kept.Store(v, new(atomic.Int64))
	}
	if m.met, err = newMetrics(cfg.MeterProvider, m); err != nil {
		return nil, fmt.Errorf("materializer: metrics: %w", err)
	}
	return m, nil
}

// Close releases the metric callbacks.
func (m *Materializer) Close() {
	if m.met.reg != nil {
		_ = m.met.reg.Unregister()
	}
}

// Fences returns, per lease, the highest fence on any of its partitions
// as committed by this instance.
func (m *Materializer) Fences() map[string]int64 {
	m.fenceMu.Lock()
	defer m.fenceMu.Unlock()
	out := make(map[string]int64, len(m.fences))
	for k, v := range m.fences {
		out[k] = v
	}
	return out
}

// Counts returns how many records got each verdict since start.
func (m *Materializer) Counts() map[Verdict]int64 {
	out := map[Verdict]int64{}
	m.verdicts.Range(func(k, v any) bool {
		out[k.(Verdict)] = v.(*atomic.Int64).Load()
		return true
	})
	return out
}

// Lag returns, per "topic/partition", the high watermark minus the next
// offset to apply, as last seen.
func (m *Materializer) Lag() map[string]int64 {
	m.lagMu.Lock()
	defer m.lagMu.Unlock()
	return lagByName(m.lag)
}

// lagByName is lag keyed "topic/partition", as /v1/status shows it.
func lagByName(lag map[partitionKey]int64) map[string]int64 {
	out := make(map[string]int64, len(lag))
	for k, v := range lag {
		out[fmt.Sprintf("%s/%d", k.topic, k.partition)] = v
	}
	return out
}

// Ready reports whether each sink is consuming: Run and Postgres
// answering when m has a ledger database, the trusted sink's Run when m
// has one.
func (m *Materializer) Ready(ctx context.Context) error {
	if t := m.trustedSink(); t != nil {
		if err := t.Ready(ctx); err != nil {
			return err
		}
	}
	if m.pool == nil {
		return nil
	}
	if !m.running.Load() {
		return errors.New("materializer not consuming")
	}
	if err := m.deniedErr(); err != nil {
		return err
	}
	return m.pool.Ping(ctx)
}

func (m *Materializer) trustedSink() *TrustedSink {
	m.fenceMu.Lock()
	defer m.fenceMu.Unlock()
	return m.trusted
}

func (m *Materializer) verdictCounter(v Verdict) *atomic.Int64 {
	c, _ := m.verdicts.Load(v)
	return c.(*atomic.Int64)
}

func (m *Materializer) keptCounter(v Verdict) *atomic.Int64 {
	c, _ := m.kept.Load(v)
	return c.(*atomic.Int64)
}

// KeptCounts returns how many records were kept since start, by the
// verdict they would have had (FM21).
func (m *Materializer) KeptCounts() map[Verdict]int64 {
	out := map[Verdict]int64{}
	for _, v := range KeptVerdicts {
		out[v] = m.keptCounter(v).Load()
	}
	return out
}

// mine reports whether this instance applies partition p.
func (m *Materializer) mine(p int32) bool {
	if len(m.cfg.Partitions) == 0 {
		return true
	}
	for _, q := range m.cfg.Partitions {
		if q == p {
			return true
		}
	}
	return false
}

func (m *Materializer) newConsumer() (*kafka.Consumer, error) {
	cm, err := m.cfg.Kafka.ConfigMap()
	if err != nil {
		return nil, err
	}
	for k, v := range (kafka.ConfigMap{"group.id": m.cfg.GroupID,
		"isolation.level": "read_committed", "enable.auto.commit": false,
		"auto.offset.reset": "earliest", "enable.metrics.push": false,
		"go.logs.channel.enable": false}) {
		cm[k] = v
	}
	for k, v := range m.cfg.Consumer {
		cm[k] = v
	}
	return kafka.NewConsumer(&cm)
}
