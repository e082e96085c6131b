package materializer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"golang.org/x/sync/errgroup"
)

// rebalance takes the partitions assigned to this instance and lets go of
// the revoked ones (cooperative: only the partitions that move). A
// failure to take one stops Run.
func (t *TrustedSink) rebalance(ctx context.Context, c *kafka.Consumer, ev kafka.Event) error {
	switch e := ev.(type) {
	case kafka.AssignedPartitions:
		member := c.String()
		t.log.Info("trusted sink: partitions assigned", "member", member, "partitions", len(e.Partitions))
		if err := t.takeAll(ctx, member, e.Partitions); err != nil {
			t.fail(err)
			return err
		}
		t.seedNext(c, e.Partitions)
		take := make([]kafka.TopicPartition, len(e.Partitions))
		for i, tp := range e.Partitions {
			tp.Offset = kafka.OffsetStored
			take[i] = tp
		}
		return c.IncrementalAssign(take)
	case kafka.RevokedPartitions:
		member := c.String()
		t.log.Info("trusted sink: partitions revoked", "member", member, "partitions", len(e.Partitions), "lost", c.AssignmentLost())
		for _, tp := range e.Partitions {
			t.drop(partitionKey{*tp.Topic, tp.Partition})
		}
		return c.IncrementalUnassign(e.Partitions)
	}
	return nil
}

// takeParallel is how many partitions one rebalance takes at once: each
// waits on an InitTransactions and a read of its state.
const takeParallel = 8

// takeAll takes the partitions, takeParallel at a time, and returns the
// first failure.
func (t *TrustedSink) takeAll(ctx context.Context, member string, tps []kafka.TopicPartition) error {
	var g errgroup.Group
	g.SetLimit(takeParallel)
	for _, tp := range tps {
		key := partitionKey{*tp.Topic, tp.Partition}
		g.Go(func() error { return t.take(ctx, member, key) })
	}
	return g.Wait()
}

func (t *TrustedSink) fail(err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.failed == nil {
		t.failed = err
	}
}

// take makes this instance the partition's one writer: InitTransactions
// of the partition's transactional id fences any earlier owner and
// aborts its open transaction before it returns; only then is the state
// read to its end, so it is the state of the last committed transaction,
// the one that committed the offset the consumer starts from.
func (t *TrustedSink) take(ctx context.Context, member string, key partitionKey) error {
	p, err := t.newProducer(key)
	if err != nil {
		return err
	}
	ictx, cancel := context.WithTimeout(ctx, t.cfg.TransactionTimeout)
	defer cancel()
	if err := p.InitTransactions(ictx); err != nil {
		p.Close()
		return fmt.Errorf("trusted sink: %s/%d: init transactions: %w", key.topic, key.partition, err)
	}
	state, err := t.restore(ctx, key)
	if err == nil {
		err = t.mirror(ctx, key, state.all(), -1)
	}
	if err != nil {
		p.Close()
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.parts[key] = &trustedPart{key: key, p: p, state: state}
	t.log.Info("trusted sink: partition taken", "member", member, "topic", key.topic, "partition", key.partition,
		"leases", len(state.fences), "window_leases", len(state.leases))
	return nil
}

// drop lets go of a revoked partition. No chunk is in flight: chunks run
// between polls, and rebalances run inside a poll.
func (t *TrustedSink) drop(key partitionKey) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if tp := t.parts[key]; tp != nil {
		tp.close()
		delete(t.parts, key)
	}
	delete(t.lag, key)
}

func (t *TrustedSink) newProducer(key partitionKey) (*kafka.Producer, error) {
	cm, err := t.m.cfg.Kafka.ConfigMap()
	if err != nil {
		return nil, err
	}
	for k, v := range (kafka.ConfigMap{
		"transactional.id":       t.transactionalID(key),
		"transaction.timeout.ms": int(t.cfg.TransactionTimeout.Milliseconds()),
		"enable.idempotence":     true,
		"linger.ms":              5,
		"go.delivery.reports":    false,
		// The Go client's channels default to 1,000,000 entries (8 MB
		// each, allocated per producer): with a producer per partition
		// they were most of the process's memory (1.2 GiB at 32
		// partitions, BENCHMARKS.md). Produce() is called directly and
		// errors surface on the transactional calls.
		"go.produce.channel.size": 0,
		"go.events.channel.size":  64,
		"go.logs.channel.enable":  false,
		"enable.metrics.push":     false,
	}) {
		cm[k] = v
	}
	p, err := kafka.NewProducer(&cm)
	if err != nil {
		return nil, err
	}
	go func() {
		for range p.Events() {
		}
	}()
	return p, nil
}

// restore reads the partition's state to its end (read_committed; no
// transaction is open on it once take has initialised its producer).
func (t *TrustedSink) restore(ctx context.Context, key partitionKey) (*partState, error) {
	s := newPartState(t.m, key, t.cfg.DedupWindow)
	_, _, stateTopic := t.Topics(key.topic)
	cm, err := t.m.cfg.Kafka.ConfigMap()
	if err != nil {
		return nil, err
	}
	for k, v := range (kafka.ConfigMap{"group.id": t.GroupID() + "-restore", "isolation.level": "read_committed",
		"enable.auto.commit": false, "enable.metrics.push": false, "go.logs.channel.enable": false}) {
		cm[k] = v
	}
	c, err := kafka.NewConsumer(&cm)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	deadline := time.Now().Add(t.cfg.RestoreTimeout)
	high, err := stateEnd(c, stateTopic, key.partition, deadline, t.onceRefused(key))
	if err != nil {
		return nil, fmt.Errorf("trusted sink: state %s/%d: %w", stateTopic, key.partition, err)
	}
	if high > 0 {
		if err := t.readState(ctx, c, s, stateTopic, key.partition, high, deadline); err != nil {
			return nil, err
		}
	}
	s.restored()
	return s, nil
}

// stateAsk bounds one question of stateEnd: a question to a broker that
// is gone is asked again, of whichever broker leads the partition then.
const stateAsk = 5 * time.Second

// stateEnd returns the high watermark of the state partition, asking
// again until deadline while the answer says the partition's leader is
// moving or its broker is gone for now: Apache Kafka elects a new topic's
// leaders after CreateTopics answers and moves them (FM75), and a broker
// killed under the sink takes its partitions' leadership with it (FM116).
// refused, when not nil, is told each answer asked again.
func stateEnd(c *kafka.Consumer, topic string, partition int32, deadline time.Time, refused func(error)) (int64, error) {
	for {
		wait := min(time.Until(deadline), stateAsk)
		_, high, err := c.QueryWatermarkOffsets(topic, partition, int(max(wait, time.Millisecond).Milliseconds()))
		if err == nil || !askAgain(err) || time.Until(deadline) <= 0 {
			return high, err
		}
		if refused != nil {
			refused(err)
		}
		time.Sleep(50 * time.Millisecond) // a backoff between two questions
	}
}

// askAgain reports whether err says a partition's leader is not known or
// not settled yet, or that the broker asked is gone for now (killed,
// cut off, or dropped from the cluster's metadata): a state worth asking
// again about. Any other answer (a refused grant, a fatal error) is final.
func askAgain(err error) bool {
	var kerr kafka.Error
	if !errors.As(err, &kerr) {
		return false
	}
	switch kerr.Code() {
	case kafka.ErrNotLeaderForPartition, kafka.ErrLeaderNotAvailable, kafka.ErrUnknownPartition,
		kafka.ErrUnknownTopicOrPart, kafka.ErrUnknownTopic,
		kafka.ErrTransport, kafka.ErrAllBrokersDown, kafka.ErrDestroyBroker,
		kafka.ErrTimedOut, kafka.ErrTimedOutQueue:
		return true
	}
	return false
}

// onceRefused returns a refused hook for stateEnd that logs the first
// answer asked again while key is taken.
func (t *TrustedSink) onceRefused(key partitionKey) func(error) {
	var told bool
	return func(err error) {
		if !told {
			told = true
			t.log.Warn("trusted sink: state read refused, asking again", "topic", key.topic, "partition", key.partition, "err", err)
		}
	}
}

// readState applies the state records of stateTopic/partition below high.
func (t *TrustedSink) readState(ctx context.Context, c *kafka.Consumer, s *partState, topic string, partition int32, high int64, deadline time.Time) error {
	tp := kafka.TopicPartition{Topic: &topic, Partition: partition, Offset: kafka.OffsetBeginning}
	if err := c.Assign([]kafka.TopicPartition{tp}); err != nil {
		return err
	}
	for {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("trusted sink: state %s/%d not read to offset %d within %s", topic, partition, high, t.cfg.RestoreTimeout)
		}
		switch e := c.Poll(100).(type) {
		case *kafka.Message:
			if err := s.restore(e.Key, e.Value); err != nil {
				return fmt.Errorf("trusted sink: %s/%d offset %d: %w", topic, partition, e.TopicPartition.Offset, err)
			}
		case kafka.Error:
			if e.IsFatal() {
				return e
			}
		}
		pos, err := c.Position([]kafka.TopicPartition{{Topic: &topic, Partition: partition}})
		if err == nil && len(pos) == 1 && int64(pos[0].Offset) >= high {
			return nil
		}
	}
}
