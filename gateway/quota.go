package gateway

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Defaults of the per-client quotas (Config). Each session holds a
// librdkafka instance while it is not parked (about 5 threads and 0.35 MB),
// so the total bounds the process and the per-client cap keeps one client
// from taking what the others need.
const (
	DefaultMaxSessions          = 5000
	DefaultMaxSessionsPerClient = 1000
	// DefaultMaxConcurrentHandovers bounds the librdkafka instances being
	// created at once (Config.MaxConcurrentHandovers).
	DefaultMaxConcurrentHandovers = 16
)

// roomFor refuses an acquire of name by caller when the caller already
// has MaxSessionsPerClient live sessions on this replica or the replica
// MaxSessions (FM46), before any grant. The lease's own session does not
// count: a new generation replaces it. Acquires in flight are not counted,
// so a burst may pass the cap by the client's handovers in flight and
// waiting (at most MaxConcurrentHandovers + MaxHandoverQueue).
func (g *Gateway) roomFor(caller *Client, name string) *Error {
	total, mine := g.sessionCounts(caller.name(), name)
	switch {
	case mine >= g.cfg.MaxSessionsPerClient:
		g.quotas.refused(caller.name(), "sessions_per_client")
		return errorf(CodeTooManyRequests, "client %q holds %d sessions on this replica, the most allowed (--max-sessions-per-client); release one or retry later", caller.name(), mine)
	case total >= g.cfg.MaxSessions:
		g.quotas.refused(caller.name(), "sessions")
		return errorf(CodeTooManyRequests, "this replica holds %d sessions, the most allowed (--max-sessions); retry later or elsewhere", total)
	}
	return nil
}

// sessionCounts returns the live sessions of this replica and those bound
// to client, leaving out the session of lease except.
func (g *Gateway) sessionCounts(client, except string) (total, mine int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for name, s := range g.sessions {
		if name == except || s.endedReason() != nil {
			continue
		}
		total++
		if s.client == client {
			mine++
		}
	}
	return total, mine
}

// perClient returns the live sessions of this replica per client.
func (g *Gateway) perClient() map[string]int64 {
	out := map[string]int64{}
	for _, s := range g.liveSessions() {
		out[s.client]++
	}
	return out
}

// quotaMetrics are the per-client series. Client names come from the
// config, never from a request, so their number is the config's.
type quotaMetrics struct {
	refusals metric.Int64Counter
	reg      metric.Registration
}

const attrClient = attribute.Key("fencegate.client")

func newQuotaMetrics(mp metric.MeterProvider, g *Gateway) (*quotaMetrics, error) {
	m := mp.Meter("github.com/fencegate/fencegate/gateway")
	refusals, err := m.Int64Counter("fencegate.quota.refusals", metric.WithUnit("{request}"),
		metric.WithDescription("Acquires refused 429 by a quota, by client and quota (sessions, sessions_per_client, handovers)."))
	if err != nil {
		return nil, err
	}
	sessions, err := m.Int64ObservableGauge("fencegate.client.sessions", metric.WithUnit("{session}"),
		metric.WithDescription("Live sessions on this replica per API client."))
	if err != nil {
		return nil, err
	}
	reg, err := m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		for client, n := range g.perClient() {
			o.ObserveInt64(sessions, n, metric.WithAttributes(attrClient.String(client)))
		}
		return nil
	}, sessions)
	if err != nil {
		return nil, err
	}
	return &quotaMetrics{refusals: refusals, reg: reg}, nil
}

func (q *quotaMetrics) refused(client, quota string) {
	q.refusals.Add(context.Background(), 1, metric.WithAttributes(attrClient.String(client), attribute.String("quota", quota)))
}

func (q *quotaMetrics) close() { _ = q.reg.Unregister() }
