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
	}, fence, omitted, lag)
	return &x, err
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
