package gateway

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/fencegate/fencegate/internal/telemetry"
)

// Handover stages, as metric and span names (docs/observability.md).
const (
	stagePGGrant  = "pg_grant"
	stageConnect  = "connect"
	stageInit     = "init_transactions"
	stageIdentify = "identify"
	stageBarrier  = "barrier"
	stageActivate = "activate"
	stageTotal    = "total"
)

// Batch outcomes. stale_token, expired and fenced are former owners
// writing; misrouted is a request sent to a replica that does not hold the
// lease (421 misdirected, 409 not_holder), ordinary after a restart.
const (
	outcomeCommitted  = "committed"
	outcomeStaleToken = "stale_token"
	outcomeFencedOut  = "fenced"
	outcomeExpired    = "expired"
	outcomeMisrouted  = "misrouted"
	outcomeAborted    = "aborted"
	outcomeInvalid    = "invalid"
	// outcomeParked: a batch for a parked session, refused not_holder so
	// that its worker resumes the lease as a new generation.
	outcomeParked = "parked"
)

// batchOutcomes lists every batch outcome. Each series exists at 0 from
// the start: an alert on increase() cannot see the first refusal of a
// series that is born at 1.
var batchOutcomes = []string{outcomeCommitted, outcomeStaleToken, outcomeFencedOut, outcomeExpired,
	outcomeMisrouted, outcomeAborted, outcomeInvalid, outcomeParked}

// renewOutcomes are the outcomes Renew counts, present at 0 from the start
// for the same reason.
var renewOutcomes = []string{"ok", "lost", "misrouted", "unavailable"}

// renewOutcome names the outcome of a renewal: a renewal sent to a replica
// without the session (misdirected, not_holder: routing after a restart or
// a drain) is misrouted, not lost.
func renewOutcome(err error) string {
	if err == nil {
		return "ok"
	}
	switch toError(err).Code {
	case CodeStoreUnavailable:
		return "unavailable"
	case CodeMisdirected, CodeNotHolder:
		return outcomeMisrouted
	}
	return "lost"
}

// Attribute keys shared by metrics, spans and logs.
const (
	attrLease = attribute.Key("fencegate.lease")
	attrToken = attribute.Key("fencegate.token")
	attrEpoch = attribute.Key("messaging.kafka.producer.epoch")
)

// metrics are the gateway's instruments, created once per Gateway.
type metrics struct {
	handover  metric.Float64Histogram
	bumps     metric.Int64Counter
	fenced    metric.Int64Counter
	fatal     metric.Int64Counter
	refused   metric.Int64Counter
	batches   metric.Int64Counter
	records   metric.Int64Counter
	commit    metric.Float64Histogram
	renewals  metric.Int64Counter
	parks     metric.Int64Counter
	resumes   metric.Int64Counter
	httpDur   metric.Float64Histogram
	store     metric.Float64Histogram
	forward   metric.Float64Histogram
	observers metric.Registration
}

func newMetrics(mp metric.MeterProvider, g *Gateway) (*metrics, error) {
	m := mp.Meter("github.com/fencegate/fencegate/gateway")
	var (
		x   metrics
		err error
	)
	seconds := metric.WithExplicitBucketBoundaries(.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10)
	try := func(f func() error) {
		if err == nil {
			err = f()
		}
	}
	try(func() (e error) {
		x.handover, e = m.Float64Histogram("fencegate.handover.duration", metric.WithUnit("s"), seconds,
			metric.WithDescription("Duration of a handover by stage (pg_grant, init_transactions, barrier, activate) and in total."))
		return
	})
	try(func() (e error) {
		x.bumps, e = m.Int64Counter("fencegate.epoch.bumps", metric.WithUnit("{bump}"),
			metric.WithDescription("Producer epochs bumped by InitTransactions at handovers."))
		return
	})
	try(func() (e error) {
		x.fenced, e = m.Int64Counter("fencegate.producers.fenced", metric.WithUnit("{producer}"),
			metric.WithDescription("Producers whose generation was fenced by a later epoch."))
		return
	})
	try(func() (e error) {
		x.fatal, e = m.Int64Counter("fencegate.producers.fatal", metric.WithUnit("{producer}"),
			metric.WithDescription("Producers ended by a fatal error that is not a fence (authorisation, idempotence): the generation ended, the lease may still be the worker's."))
		return
	})
	try(func() (e error) {
		x.refused, e = m.Int64Counter("fencegate.kafka.refused", metric.WithUnit("{handover}"),
			metric.WithDescription("Handovers the cluster refused to the gateway's principal, by reason: login (TLS, SASL or the OAUTHBEARER token endpoint) or acl (an ACL docs/security.md lists is missing; FM106, FM108)."))
		return
	})
	try(func() (e error) {
		x.batches, e = m.Int64Counter("fencegate.batches", metric.WithUnit("{batch}"),
			metric.WithDescription("Produce batches by outcome (committed, stale_token, fenced, expired, misrouted, aborted, invalid)."))
		return
	})
	try(func() (e error) {
		x.records, e = m.Int64Counter("fencegate.records", metric.WithUnit("{record}"),
			metric.WithDescription("Records of produce batches by outcome."))
		return
	})
	try(func() (e error) {
		x.commit, e = m.Float64Histogram("fencegate.batch.commit.duration", metric.WithUnit("s"), seconds,
			metric.WithDescription("CommitTransaction latency of committed batches."))
		return
	})
	try(func() (e error) {
		x.renewals, e = m.Int64Counter("fencegate.renewals", metric.WithUnit("{renewal}"),
			metric.WithDescription("Lease renewals by outcome (ok, lost, misrouted, unavailable)."))
		return
	})
	try(func() (e error) {
		x.parks, e = m.Int64Counter("fencegate.sessions.parks", metric.WithUnit("{session}"),
			metric.WithDescription("Sessions parked after idling: their producer closed, the session kept."))
		return
	})
	try(func() (e error) {
		x.resumes, e = m.Int64Counter("fencegate.sessions.resumes", metric.WithUnit("{session}"),
			metric.WithDescription("New generations that replaced a parked session on this replica (each is also a handover)."))
		return
	})
	try(func() (e error) {
		x.httpDur, e = m.Float64Histogram("http.server.request.duration", metric.WithUnit("s"), seconds,
			metric.WithDescription("HTTP request duration by route and status."))
		return
	})
	try(func() (e error) {
		x.store, e = m.Float64Histogram("fencegate.store.duration", metric.WithUnit("s"), seconds,
			metric.WithDescription("Duration of lease-store (Postgres) calls on a worker's path by op (acquire, regenerate, activate, renew, release, abandon, heartbeat)."))
		return
	})
	try(func() (e error) {
		x.forward, e = m.Float64Histogram("fencegate.forward.duration", metric.WithUnit("s"), seconds,
			metric.WithDescription("Duration of requests forwarded to the lease's holder by outcome (answered: the holder's answer passed on; unreachable: nothing sent, 421; unknown: sent and not answered, 502 forward_failed)."))
		return
	})
	try(func() error { return x.observe(m, g) })
	if err == nil {
		x.zero()
	}
	return &x, err
}

// zero creates every counter series an alert or a panel reads at 0, so
// that the first event is an increase from 0 that increase() and rate()
// see, and a panel shows 0 rather than no data before anything happened.
func (x *metrics) zero() {
	ctx := context.Background()
	for _, o := range batchOutcomes {
		set := metric.WithAttributes(attribute.String("outcome", o))
		x.batches.Add(ctx, 0, set)
		x.records.Add(ctx, 0, set)
	}
	for _, o := range renewOutcomes {
		x.renewals.Add(ctx, 0, metric.WithAttributes(attribute.String("outcome", o)))
	}
	x.bumps.Add(ctx, 0)
	x.fenced.Add(ctx, 0)
	x.fatal.Add(ctx, 0)
	for _, r := range refusedReasons {
		x.refused.Add(ctx, 0, metric.WithAttributes(attribute.String("reason", r)))
	}
	x.parks.Add(ctx, 0)
	x.resumes.Add(ctx, 0)
}

// observe registers the gauges read from the live sessions: the active
// count, and, with Config.LeaseMetrics, per lease the current token and
// producer epoch. Those are bounded by Config.LeaseMetricsLimit and vanish
// when a session ends.
func (x *metrics) observe(m metric.Meter, g *Gateway) error {
	active, err := m.Int64ObservableGauge("fencegate.sessions.active", metric.WithUnit("{session}"),
		metric.WithDescription("Live lease sessions on this replica."))
	if err != nil {
		return err
	}
	token, err := m.Int64ObservableGauge("fencegate.lease.token", metric.WithUnit("{token}"),
		metric.WithDescription("Current fencing token per lease held on this replica."))
	if err != nil {
		return err
	}
	epoch, err := m.Int64ObservableGauge("fencegate.lease.producer.epoch", metric.WithUnit("{epoch}"),
		metric.WithDescription("Producer epoch per lease held on this replica."))
	if err != nil {
		return err
	}
	parked, err := m.Int64ObservableGauge("fencegate.sessions.parked", metric.WithUnit("{session}"),
		metric.WithDescription("Live sessions on this replica whose producer is parked (closed after idling); included in fencegate.sessions.active."))
	if err != nil {
		return err
	}
	omitted, err := m.Int64ObservableGauge("fencegate.lease.series.omitted", metric.WithUnit("{lease}"),
		metric.WithDescription("Live sessions on this replica left out of the per-lease gauges by the lease metrics limit (with --lease-metrics)."))
	if err != nil {
		return err
	}
	x.observers, err = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		live := g.liveSessions()
		o.ObserveInt64(active, int64(len(live)))
		o.ObserveInt64(parked, int64(countParked(live)))
		if !g.cfg.LeaseMetrics {
			return nil
		}
		byName := make(map[string]*session, len(live))
		names := make([]string, 0, len(live))
		for _, s := range live {
			byName[s.name] = s
			names = append(names, s.name)
		}
		names, left := telemetry.LeaseSeries(names, g.cfg.LeaseMetricsLimit)
		o.ObserveInt64(omitted, int64(left))
		for _, n := range names {
			s := byName[n]
			set := metric.WithAttributes(attrLease.String(s.name))
			o.ObserveInt64(token, s.token, set)
			o.ObserveInt64(epoch, int64(s.epoch), set)
		}
		return nil
	}, active, token, epoch, parked, omitted)
	return err
}

func (x *metrics) stage(ctx context.Context, stage string, since time.Time) {
	x.handover.Record(ctx, time.Since(since).Seconds(), metric.WithAttributes(attribute.String("stage", stage)))
}

func (x *metrics) batch(ctx context.Context, outcome string, records int) {
	set := metric.WithAttributes(attribute.String("outcome", outcome))
	x.batches.Add(ctx, 1, set)
	x.records.Add(ctx, int64(records), set)
}
