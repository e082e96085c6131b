package materializer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// errPositionMoved: the stored position is not the one this instance
// expected; another instance applied the range (FM14).
var errPositionMoved = errors.New("consumer position moved")

// Run consumes until ctx ends (nil) or a failure stops it (error). A
// failure leaves Postgres as the last committed transaction left it; the
// next Run resumes from consumer_positions.
func (m *Materializer) Run(ctx context.Context) error {
	err := m.run(ctx)
	if ctx.Err() != nil {
		return nil // stopped: whatever failed was cut off by the stop
	}
	return err
}

func (m *Materializer) run(ctx context.Context) error {
	if m.pool == nil {
		return errors.New("materializer: no ledger database: the postgres sink needs one")
	}
	if err := claimDatabase(ctx, m.pool, ownerLedger); err != nil {
		return err
	}
	c, err := m.newConsumer()
	if err != nil {
		return err
	}
	defer c.Close()
	next, err := m.assign(ctx, c)
	if err != nil {
		return err
	}
	m.running.Store(true)
	defer m.running.Store(false)
	m.askDenied(ctx)
	asked := time.Now()
	for ctx.Err() == nil {
		chunks, err := m.poll(c, next)
		if err != nil {
			return err
		}
		if m.askDue(asked) {
			m.askDenied(ctx)
			asked = time.Now()
		}
		if err := m.applyChunks(ctx, c, next, chunks); err != nil {
			return err
		}
		if len(chunks) == 0 {
			if err := m.skipMarkers(ctx, c, next); err != nil {
				return err
			}
		}
		m.updateLag(c, next)
	}
	return nil
}

// assign starts every routed partition at its stored position.
func (m *Materializer) assign(ctx context.Context, c *kafka.Consumer) (map[partitionKey]int64, error) {
	next := map[partitionKey]int64{}
	var tps []kafka.TopicPartition
	seen := map[string]bool{}
	for _, r := range m.router.Routes() {
		if seen[r.Topic] {
			continue
		}
		seen[r.Topic] = true
		for p := range r.Partitions {
			if !m.mine(p) {
				continue
			}
			key := partitionKey{r.Topic, p}
			off, err := m.position(ctx, key)
			if err != nil {
				return nil, err
			}
			next[key] = off
			topic := r.Topic
			tps = append(tps, kafka.TopicPartition{Topic: &topic, Partition: p, Offset: kafka.Offset(off)})
		}
	}
	return next, c.Assign(tps)
}

func (m *Materializer) position(ctx context.Context, key partitionKey) (int64, error) {
	if _, err := m.pool.Exec(ctx, qEnsurePosition, key.topic, key.partition); err != nil {
		return 0, fmt.Errorf("position: %w", err)
	}
	var off int64
	if err := m.pool.QueryRow(ctx, qReadPosition, key.topic, key.partition).Scan(&off); err != nil {
		return 0, fmt.Errorf("position: %w", err)
	}
	return off, nil
}

// poll gathers what the consumer has buffered, grouped by partition in
// offset order, skipping records below a partition's expected position:
// at most MaxBatch records of one partition and MaxBatch x Parallel in
// all.
func (m *Materializer) poll(c *kafka.Consumer, next map[partitionKey]int64) (map[partitionKey][]*kafka.Message, error) {
	out := map[partitionKey][]*kafka.Message{}
	timeout := int(m.cfg.PollTimeout.Milliseconds())
	for n := 0; n < m.cfg.MaxBatch*m.cfg.Parallel; n++ {
		ev := c.Poll(timeout)
		if ev == nil {
			break
		}
		timeout = 0 // drain what is buffered, then apply
		switch e := ev.(type) {
		case *kafka.Message:
			// librdkafka hands a partition's fetch error over as a
			// message carrying it, not a record.
			if err := e.TopicPartition.Error; err != nil {
				var kerr kafka.Error
				if !errors.As(err, &kerr) || !m.noteDenied(kerr, topicName(e.TopicPartition.Topic)) {
					m.log.Warn("consumer error", "error", err)
				}
				continue
			}
			key := partitionKey{*e.TopicPartition.Topic, e.TopicPartition.Partition}
			if int64(e.TopicPartition.Offset) >= next[key] {
				out[key] = append(out[key], e)
			}
			if len(out[key]) == m.cfg.MaxBatch {
				return out, nil
			}
		case kafka.Error:
			if e.IsFatal() {
				return nil, e
			}
			if m.noteDenied(e, "") {
				continue
			}
			m.log.Warn("consumer error", "error", e)
		}
	}
	return out, nil
}

// applied is the outcome of one partition's chunk.
type applied struct {
	key     partitionKey
	newNext int64
	err     error
}

// applyChunks applies each partition's chunk in a transaction of its own,
// up to Parallel at once, then settles every outcome; it returns the
// first failure.
func (m *Materializer) applyChunks(ctx context.Context, c *kafka.Consumer, next map[partitionKey]int64, chunks map[partitionKey][]*kafka.Message) error {
	out := make(chan applied, len(chunks))
	slots := make(chan struct{}, m.cfg.Parallel)
	for key, recs := range chunks {
		slots <- struct{}{}
		go func(expected, newNext int64) {
			defer func() { <-slots }()
			out <- applied{key, newNext, m.apply(ctx, key, expected, newNext, recs)}
		}(next[key], int64(recs[len(recs)-1].TopicPartition.Offset)+1)
	}
	var first error
	for range len(chunks) {
		if err := m.settle(ctx, c, next, <-out); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// applyUpTo applies recs and moves the partition's position to newNext.
func (m *Materializer) applyUpTo(ctx context.Context, c *kafka.Consumer, next map[partitionKey]int64, key partitionKey, newNext int64, recs []*kafka.Message) error {
	return m.settle(ctx, c, next, applied{key, newNext, m.apply(ctx, key, next[key], newNext, recs)})
}

// settle records an applied chunk's new position; when another instance
// moved the position, it re-reads it and seeks there.
func (m *Materializer) settle(ctx context.Context, c *kafka.Consumer, next map[partitionKey]int64, a applied) error {
	if a.err == nil {
		next[a.key] = a.newNext
		return nil
	}
	if !errors.Is(a.err, errPositionMoved) {
		return a.err
	}
	off, err := m.position(ctx, a.key)
	if err != nil {
		return err
	}
	m.log.Info("position moved by another instance; seeking", "topic", a.key.topic, "partition", a.key.partition, "offset", off)
	next[a.key] = off
	topic := a.key.topic
	return c.Seek(kafka.TopicPartition{Topic: &topic, Partition: a.key.partition, Offset: kafka.Offset(off)}, 0)
}

// skipMarkers, when idle, moves stored positions past what read_committed
// never delivers (transaction markers, aborted records), so that a caught-up
// partition has no lag. Same compare-and-set as any apply.
func (m *Materializer) skipMarkers(ctx context.Context, c *kafka.Consumer, next map[partitionKey]int64) error {
	var tps []kafka.TopicPartition
	for key := range next {
		topic := key.topic
		tps = append(tps, kafka.TopicPartition{Topic: &topic, Partition: key.partition})
	}
	pos, err := c.Position(tps)
	if err != nil {
		return nil // positions unknown yet; try again when idle next
	}
	for _, tp := range pos {
		key := partitionKey{*tp.Topic, tp.Partition}
		if off := int64(tp.Offset); off > next[key] {
			if err := m.applyUpTo(ctx, c, next, key, off, nil); err != nil {
				return err
			}
		}
	}
	return nil
}

func (m *Materializer) updateLag(c *kafka.Consumer, next map[partitionKey]int64) {
	m.lagMu.Lock()
	defer m.lagMu.Unlock()
	for key, off := range next {
		_, high, err := c.GetWatermarkOffsets(key.topic, key.partition)
		if err == nil && high >= 0 {
			m.lag[key] = max(high-off, 0)
		}
	}
}

// topicName is *topic, "" when librdkafka gave none.
func topicName(topic *string) string {
	if topic == nil {
		return ""
	}
	return *topic
}
