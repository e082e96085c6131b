package materializer

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/fencegate/fencegate/internal/telemetry"
)

// metrics are the materializer's instruments, created once.
type metrics struct {
	records metric.Int64Counter
	kept    metric.Int64Counter
	txn     metric.Float64Histogram
	prunes  metric.Int64Counter
	pruned  metric.Int64Counter
	refused metric.Int64Counter
	reg     metric.Registration
}

func newMetrics(mp metric.MeterProvider, m *Materializer) (*metrics, error) {
	meter := mp.Meter("github.com/fencegate/fencegate/materializer")
	var x metrics
	var err error
	if x.records, err = meter.Int64Counter("fencegate.materializer.records", metric.WithUnit("{record}"),
		metric.WithDescription("Records by verdict (accepted, barrier, stale, unfenced, duplicate, bad_barrier, malformed, kept, marker).")); err != nil {
		return nil, err
	}
	if x.kept, err = meter.Int64Counter("fencegate.materializer.kept", metric.WithUnit("{record}"),
		metric.WithDescription("Records kept in kept_records while their pattern was in observe or gated, by the verdict they would have had (stale, unfenced, malformed).")); err != nil {
		return nil, err
	}
	if x.txn, err = meter.Float64Histogram("fencegate.materializer.transaction.duration", metric.WithUnit("s"),
		metric.WithExplicitBucketBoundaries(.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5),
		metric.WithDescription("Duration of one apply transaction.")); err != nil {
		return nil, err
	}
	if x.prunes, err = meter.Int64Counter("fencegate.materializer.prunes", metric.WithUnit("{prune}"),
		metric.WithDescription("Ledger prunes of the retention loop, by outcome (ok, failed).")); err != nil {
		return nil, err
	}
	if x.pruned, err = meter.Int64Counter("fencegate.materializer.pruned.rows", metric.WithUnit("{row}"),
		metric.WithDescription("Ledger rows deleted by the retention loop, by table (accepted_records, rejected_records, kept_records).")); err != nil {
		return nil, err
	}
	if x.refused, err = meter.Int64Counter("fencegate.materializer.kafka.refused", metric.WithUnit("{error}"),
		metric.WithDescription("The cluster's answers refusing the materializer's principal a grant docs/security.md lists: one at start and one at each recheck while refused (FM107, FM110).")); err != nil {
		return nil, err
	}
	x.refused.Add(context.Background(), 0)
	fence, err := meter.Int64ObservableGauge("fencegate.materializer.fence.token", metric.WithUnit("{token}"),
		metric.WithDescription("Token of the generation in force per lease, as applied by this instance."))
	if err != nil {
		return nil, err
	}
	omitted, err := meter.Int64ObservableGauge("fencegate.materializer.fence.series.omitted", metric.WithUnit("{lease}"),
		metric.WithDescription("Leases left out of fencegate.materializer.fence.token by the lease metrics limit (with --lease-metrics)."))
	if err != nil {
		return nil, err
	}
	lag, err := meter.Int64ObservableGauge("fencegate.materializer.lag", metric.WithUnit("{record}"),
		metric.WithDescription("High watermark minus the next offset to apply, per partition."))
	if err != nil {
		return nil, err
	}
	missing, err := meter.Int64ObservableGauge("fencegate.materializer.kafka.missing_grant", metric.WithUnit("{grant}"),
		metric.WithDescription("1 for each grant docs/security.md lists that the cluster's last answer refused the materializer's principal, 0 for the others (FM107, FM110)."))
	if err != nil {
		return nil, err
	}
	// Every verdict exists at 0 from the start: the page on the first
	// refused record is an increase() that cannot see a series born at 1.
	for _, v := range Verdicts {
		x.records.Add(context.Background(), 0, metric.WithAttributes(attribute.String("verdict", string(v))))
	}
	for _, v := range KeptVerdicts {
		x.kept.Add(context.Background(), 0, metric.WithAttributes(attribute.String("verdict", string(v))))
	}
	x.reg, err = meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		if m.cfg.LeaseMetrics {
			fences := m.Fences()
			names, left := telemetry.LeaseSeries(slices.Collect(maps.Keys(fences)), m.cfg.LeaseMetricsLimit)
			o.ObserveInt64(omitted, int64(left))
			for _, lease := range names {
				o.ObserveInt64(fence, fences[lease], metric.WithAttributes(attribute.String("fencegate.lease", lease)))
			}
		}
		m.observeMissing(o, missing)
		if t := m.trustedSink(); t != nil {
			t.mu.Lock()
			for k, v := range t.lag {
				o.ObserveInt64(lag, v, metric.WithAttributes(lagAttrs(k, sinkKafka)...))
			}
			t.mu.Unlock()
		}
		m.lagMu.Lock()
		defer m.lagMu.Unlock()
		for k, v := range m.lag {
			o.ObserveInt64(lag, v, metric.WithAttributes(lagAttrs(k)...))
		}
		return nil
	}, fence, omitted, lag, missing)
	return &x, err
}

// observeMissing observes 1 for each of the ledger sink's grants the
// cluster refused, 0 for the others.
func (m *Materializer) observeMissing(o metric.Observer, g metric.Int64ObservableGauge) {
	if m.pool == nil {
		return // no ledger sink
	}
	refused := m.deniedErr()
	for _, want := range m.grants() {
		v := int64(0)
		if refused != nil && slices.Contains(refused.Grants, want) {
			v = 1
		}
		o.ObserveInt64(g, v, metric.WithAttributes(attribute.String("grant", want.String())))
	}
}

// lagAttrs are the lag gauge's attributes of partition k, and extra.
func lagAttrs(k partitionKey, extra ...attribute.KeyValue) []attribute.KeyValue {
	return append([]attribute.KeyValue{attribute.String("messaging.destination.name", k.topic),
		attribute.String("messaging.destination.partition.id", fmt.Sprint(k.partition))}, extra...)
}

func (x *metrics) verdicts(ctx context.Context, v Verdict, n int64) {
	x.records.Add(ctx, n, metric.WithAttributes(attribute.String("verdict", string(v))))
}

// sinkKafka is the fencegate.sink attribute of the trusted sink's
// verdicts and lag; the ledger's carry none (their series are as before
// it).
var sinkKafka = attribute.String("fencegate.sink", "kafka")

// trustedVerdicts counts the trusted sink's verdicts in the same
// instrument as the ledger's, so every alert on verdicts sees both.
func (x *metrics) trustedVerdicts(ctx context.Context, v Verdict, n int64) {
	x.records.Add(ctx, n, metric.WithAttributes(attribute.String("verdict", string(v)), sinkKafka))
}

func (x *metrics) keptAs(ctx context.Context, v Verdict, n int64) {
	x.kept.Add(ctx, n, metric.WithAttributes(attribute.String("verdict", string(v))))
}

func (x *metrics) transaction(ctx context.Context, since time.Time) {
	x.txn.Record(ctx, time.Since(since).Seconds())
}

// pruneOutcomes and prunedTableNames are the attribute values of the
// prune counters.
var (
	pruneOutcomes    = []string{"ok", "failed"}
	prunedTableNames = []string{"accepted_records", "rejected_records", "kept_records"}
)

// prunesFromZero creates the prune series at 0, when a retention loop
// starts: a materializer that never prunes has none, so the ticket on a
// ledger left unpruned sees only those that should.
func (x *metrics) prunesFromZero(ctx context.Context) {
	for _, o := range pruneOutcomes {
		x.prunes.Add(ctx, 0, metric.WithAttributes(attribute.String("outcome", o)))
	}
	for _, t := range prunedTableNames {
		x.pruned.Add(ctx, 0, metric.WithAttributes(attribute.String("table", t)))
	}
}

// prunedOnce counts one prune of the retention loop and the rows it deleted.
func (x *metrics) prunedOnce(ctx context.Context, rep PruneReport, err error) {
	outcome := "ok"
	if err != nil {
		outcome = "failed"
	}
	x.prunes.Add(ctx, 1, metric.WithAttributes(attribute.String("outcome", outcome)))
	for i, n := range []int64{rep.Accepted, rep.Rejected, rep.Kept} {
		x.pruned.Add(ctx, n, metric.WithAttributes(attribute.String("table", prunedTableNames[i])))
	}
}
