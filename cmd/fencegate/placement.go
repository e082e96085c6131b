package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/fencegate/fencegate/brokercheck"
	"github.com/fencegate/fencegate/kafkaconn"
	"github.com/fencegate/fencegate/leasestore"
	"github.com/fencegate/fencegate/txnmap"
)

// probeTimeout bounds each check of the cluster at start.
const probeTimeout = 10 * time.Second

// checkKafka refuses to start on a connection the cluster refuses
// (probeKafka) or on a route whose partition count its topic does not
// have (FM31): with more, the first acquire of a lease beyond the topic
// fails at Kafka ("Unknown partition"); with fewer, partitions stay
// unused and the materializer never reads them. A cluster not reachable
// yet is logged and the counts go unchecked. grants, when not nil, runs
// between the two: a principal without a grant is named before a topic it
// may not describe reads as a missing topic.
func checkKafka(ctx context.Context, conn kafkaconn.Config, router *txnmap.Router, grants func(context.Context) error, log *slog.Logger) (reachable bool, err error) {
	reachable, err = probeKafka(ctx, conn, log)
	if err != nil || !reachable {
		return reachable, err
	}
	if grants != nil {
		if err := grants(ctx); err != nil {
			return true, err
		}
	}
	return true, checkTopics(ctx, conn, router)
}

// gatewayGrants is serve's check of its grants at start (FM112): it
// refuses to start, naming the principal and each grant the cluster
// refused (brokercheck.Grants), rather than start and answer every
// acquire 503. A cluster that gives no answer about rights is logged; the
// gateway's readiness asks again (FM106).
func gatewayGrants(conn kafkaconn.Config, router *txnmap.Router, log *slog.Logger) func(context.Context) error {
	return func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, probeTimeout)
		defer cancel()
		err := brokercheck.Grants(ctx, brokerConfig(conn, router, 0, 0))
		switch {
		case errors.Is(err, kafkaconn.ErrMissingGrant):
			return fmt.Errorf("refusing to start: %w", err)
		case errors.Is(err, kafkaconn.ErrHandshake):
			return err
		case err != nil:
			log.Warn("the gateway's grants not checked; readiness asks again", "error", err)
		}
		return nil
	}
}

// checkTopics compares every route's partition count with its topic's.
func checkTopics(ctx context.Context, conn kafkaconn.Config, router *txnmap.Router) error {
	for _, r := range router.Routes() {
		n, err := topicPartitions(ctx, conn, r.Topic)
		if err != nil {
			return fmt.Errorf("route %q: %w", r.Pattern, err)
		}
		if err := r.CheckPartitions(n); err != nil {
			return fmt.Errorf("%w: set partitions: %d in the config (to grow the topic, see the RUNBOOK: growing a topic's partitions)", err, n)
		}
	}
	return nil
}

func topicPartitions(ctx context.Context, conn kafkaconn.Config, topic string) (int32, error) {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	return conn.TopicPartitions(ctx, topic)
}

// setPartitionsHint names the command that changes a route's partitions.
const setPartitionsHint = "fencegate routes set-partitions --config F --pattern P --partitions N"

// checkPlacements records each route's placement on first start and
// refuses a config whose partition count differs from the recorded one:
// changing it is `fencegate routes set-partitions` (FM31).
func checkPlacements(ctx context.Context, store *leasestore.Store, router *txnmap.Router) error {
	recorded, err := store.Placements(ctx)
	if err != nil {
		return fmt.Errorf("%w (route_placements comes with lease-store migration 5: run `fencegate migrate` or serve --migrate)", err)
	}
	for _, r := range router.Routes() {
		p, ok := recorded[r.Pattern]
		if !ok {
			if err := store.RecordFirstPlacement(ctx, r.Pattern, r.Topic, r.Partitions); err != nil {
				return err
			}
			continue
		}
		if p.Partitions != r.Partitions {
			return fmt.Errorf("route %q names %d partitions but its recorded placement (version %d, %s) has %d: "+
				"a route's partitions change only with `%s` (RUNBOOK: growing a topic's partitions)",
				r.Pattern, r.Partitions, p.Version, p.RecordedAt.Format(time.RFC3339), p.Partitions, setPartitionsHint)
		}
	}
	return nil
}

// errRefused marks a set-partitions the state of the system refuses
// (live leases, a ledger behind, a topic of another size).
var errRefused = errors.New("refused")
