// Package rollout moves a route pattern's fleet onto the gateway
// (docs/rollout.md#rollout, FM21): it changes the pattern's rollout state
// in the lease store (observe, gated, enforced) and, in the same step,
// writes a signed rollout marker to every partition of the pattern's
// topic, from which the materializer judges what it keeps; it reports
// where each pattern stands and plans the removal of direct writers'
// Kafka ACLs at enforce.
//
// It is shared by `fencegate rollout` and the gateway's admin API, so
// that both take the same step.
//
// It must never record a state whose markers did not commit: the markers
// go to Kafka first, under the pattern's row lock, and a failed marker
// transaction records nothing (ErrMarkersUnknown when that is not known).
package rollout

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/fencegate/fencegate/barrier"
	"github.com/fencegate/fencegate/kafkaconn"
	"github.com/fencegate/fencegate/leasestore"
	"github.com/fencegate/fencegate/txnmap"
)

// Store is what a rollout needs of the lease store.
type Store interface {
	SetRollout(ctx context.Context, ch leasestore.RolloutChange, during func(context.Context, leasestore.Rollout) error) (leasestore.Rollout, error)
	RolloutOf(ctx context.Context, pattern string) (leasestore.Rollout, error)
	DirectLeases(ctx context.Context, pattern string, clients []string, patternOf func(string) (string, bool)) ([]leasestore.Lease, error)
}

// Rollouts takes rollout steps for one deployment.
type Rollouts struct {
	Store  Store
	Router *txnmap.Router
	Signer *barrier.Signer
	Kafka  kafkaconn.Config
	// DirectClients names the config's clients of kind direct.
	DirectClients []string
	// Timeout bounds the markers' Kafka transaction (default 30s).
	Timeout time.Duration
}

// DefaultTimeout is Rollouts.Timeout's default.
const DefaultTimeout = 30 * time.Second

// ErrMarkersUnknown: the markers' transaction may have committed, but the
// lease store did not record the state. Take the step again: the next
// markers carry a newer version and supersede these everywhere.
var ErrMarkersUnknown = errors.New("rollout markers may be on the topic, but the state was not recorded")

// Step moves pattern to ch.To: the lease store checks the step and, under
// the pattern's row lock, the markers are committed to every partition of
// the pattern's topic in one Kafka transaction before the state is
// recorded. A failed marker transaction records nothing.
func (r *Rollouts) Step(ctx context.Context, ch leasestore.RolloutChange) (leasestore.Rollout, error) {
	route, err := r.route(ch.Pattern)
	if err != nil {
		return leasestore.Rollout{}, err
	}
	ch.DirectClients, ch.PatternOf = r.DirectClients, r.Router.PatternOf
	wrote := false
	out, err := r.Store.SetRollout(ctx, ch, func(ctx context.Context, st leasestore.Rollout) error {
		wrote = true
		return r.writeMarkers(ctx, route, st)
	})
	if err != nil && wrote && !isStepOrInvalid(err) {
		return out, fmt.Errorf("%w: %v", ErrMarkersUnknown, err)
	}
	return out, err
}

// route returns the route whose pattern is pattern exactly.
func (r *Rollouts) route(pattern string) (txnmap.Route, error) {
	for _, rt := range r.Router.Routes() {
		if rt.Pattern == pattern {
			return rt, nil
		}
	}
	return txnmap.Route{}, &leasestore.InvalidError{Field: "pattern", Message: fmt.Sprintf("%q is no route's pattern in the config", pattern)}
}

func isStepOrInvalid(err error) bool {
	var step *leasestore.StepError
	var inv *leasestore.InvalidError
	return errors.As(err, &step) || errors.As(err, &inv)
}

// TransactionalID is the transactional id of a pattern's markers: under
// the deployment's prefix, with a '~' no lease name holds, so it never
// fences a lease's producer.
func TransactionalID(prefix, pattern string) string {
	return txnmap.IDPrefix(prefix) + "~rollout:" + pattern
}

// writeMarkers commits one marker of st to each partition of route's
// topic in one transaction.
func (r *Rollouts) writeMarkers(ctx context.Context, route txnmap.Route, st leasestore.Rollout) error {
	cm, err := r.Kafka.ConfigMap()
	if err != nil {
		return err
	}
	timeout := r.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	cm["transactional.id"] = TransactionalID(r.Router.Prefix(), route.Pattern)
	cm["transaction.timeout.ms"] = int(timeout.Milliseconds())
	cm["go.logs.channel.enable"], cm["enable.metrics.push"] = false, false
	p, err := kafka.NewProducer(&cm)
	if err != nil {
		return err
	}
	defer p.Close()
	go drain(p)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := p.InitTransactions(ctx); err != nil {
		return fmt.Errorf("rollout markers: init: %w", err)
	}
	if err := p.BeginTransaction(); err != nil {
		return err
	}
	if err := r.produceMarkers(p, route, st); err != nil {
		_ = p.AbortTransaction(ctx)
		return err
	}
	if err := p.CommitTransaction(ctx); err != nil {
		return fmt.Errorf("rollout markers: commit: %w", err)
	}
	return nil
}

func (r *Rollouts) produceMarkers(p *kafka.Producer, route txnmap.Route, st leasestore.Rollout) error {
	topic := route.Topic
	for part := range route.Partitions {
		v, err := r.Signer.SealMarker(barrier.Marker{Pattern: route.Pattern, State: string(st.State), Version: st.Version,
			Topic: topic, Partition: part, IssuedAt: time.Now().UTC()})
		if err != nil {
			return err
		}
		m := &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: part},
			Value: v, Headers: barrier.MarkerHeaders()}
		if err := p.Produce(m, nil); err != nil {
			return fmt.Errorf("rollout markers: produce to %s/%d: %w", topic, part, err)
		}
	}
	return nil
}

// drain reads the producer's events until it closes; delivery errors
// surface in CommitTransaction.
func drain(p *kafka.Producer) {
	for range p.Events() {
	}
}
