package gateway

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/fencegate/fencegate/leasestore"
)

// timedStore records how long each lease-store call on a worker's path
// takes (fencegate.store.duration by op), so that an operator can tell the
// time a renewal or a handover spent in Postgres from the time it spent in
// the gateway. The calls an operator does not wait on (List, Events, Get
// and the replica registry) pass through untimed.
type timedStore struct {
	LeaseStore
	dur metric.Float64Histogram
}

func (t timedStore) since(ctx context.Context, op string, start time.Time) {
	t.dur.Record(ctx, time.Since(start).Seconds(), metric.WithAttributes(attribute.String("op", op)))
}

func (t timedStore) Acquire(ctx context.Context, name, owner string, ttl time.Duration, holder, client, gate string) (leasestore.Lease, error) {
	defer t.since(ctx, "acquire", time.Now())
	return t.LeaseStore.Acquire(ctx, name, owner, ttl, holder, client, gate)
}

func (t timedStore) Regenerate(ctx context.Context, name, owner string, token int64, ttl time.Duration, holder, client, gate string) (leasestore.Lease, error) {
	defer t.since(ctx, "regenerate", time.Now())
	return t.LeaseStore.Regenerate(ctx, name, owner, token, ttl, holder, client, gate)
}

func (t timedStore) Activate(ctx context.Context, name string, token, producerID int64, epoch int16) (leasestore.Lease, error) {
	defer t.since(ctx, "activate", time.Now())
	return t.LeaseStore.Activate(ctx, name, token, producerID, epoch)
}

func (t timedStore) Renew(ctx context.Context, name, owner string, token int64, ttl time.Duration, gate string) (leasestore.Lease, error) {
	defer t.since(ctx, "renew", time.Now())
	return t.LeaseStore.Renew(ctx, name, owner, token, ttl, gate)
}

func (t timedStore) Release(ctx context.Context, name, owner string, token int64) (leasestore.Lease, error) {
	defer t.since(ctx, "release", time.Now())
	return t.LeaseStore.Release(ctx, name, owner, token)
}

func (t timedStore) Abandon(ctx context.Context, name string, token int64) error {
	defer t.since(ctx, "abandon", time.Now())
	return t.LeaseStore.Abandon(ctx, name, token)
}

func (t timedStore) Heartbeat(ctx context.Context, replica, url string) error {
	defer t.since(ctx, "heartbeat", time.Now())
	return t.LeaseStore.Heartbeat(ctx, replica, url)
}
