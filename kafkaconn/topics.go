package kafkaconn

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ErrNoTopic is returned (wrapped) by TopicPartitions for a topic the
// cluster does not have.
var ErrNoTopic = errors.New("kafka: no such topic")

// TopicPartitions returns how many partitions topic has, from one
// metadata request that never creates the topic.
func (c Config) TopicPartitions(ctx context.Context, topic string) (int32, error) {
	var n int32
	err := c.withClient(func(cl *kgo.Client) error {
		req := kmsg.NewPtrMetadataRequest()
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(topic)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			return err
		}
		for _, t := range resp.Topics {
			if t.Topic == nil || *t.Topic != topic {
				continue
			}
			if errors.Is(kerr.ErrorForCode(t.ErrorCode), kerr.UnknownTopicOrPartition) {
				return fmt.Errorf("%w: %s", ErrNoTopic, topic)
			}
			if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
				return fmt.Errorf("kafka: metadata of %s: %w", topic, err)
			}
			n = int32(len(t.Partitions))
			return nil
		}
		return fmt.Errorf("%w: %s (not in the metadata answer)", ErrNoTopic, topic)
	})
	return n, err
}

// LastStableOffsets returns the last stable offset of partitions 0 to
// partitions-1 of topic: what a read_committed reader such as the
// materializer can read up to.
func (c Config) LastStableOffsets(ctx context.Context, topic string, partitions int32) ([]int64, error) {
	parts := make([]int32, partitions)
	for p := range partitions {
		parts[p] = p
	}
	out := make([]int64, partitions)
	err := c.withClient(func(cl *kgo.Client) error {
		lso, err := LastStable(ctx, cl, topic, parts)
		for p, off := range lso {
			out[p] = off
		}
		return err
	})
	return out, err
}

// LastStable returns, with client cl, the last stable offset of each of
// parts of topic: what a read_committed reader can read up to. Every
// partition asked is answered, or it returns an error.
func LastStable(ctx context.Context, cl *kgo.Client, topic string, parts []int32) (map[int32]int64, error) {
	req := kmsg.NewPtrListOffsetsRequest()
	req.IsolationLevel = 1 // read_committed: the last stable offset
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	for _, p := range parts {
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition, rp.Timestamp = p, -1 // -1: the end
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	out := make(map[int32]int64, len(parts))
	for _, sh := range cl.RequestSharded(ctx, req) {
		if sh.Err != nil {
			return nil, sh.Err
		}
		for _, t := range sh.Resp.(*kmsg.ListOffsetsResponse).Topics {
			for _, p := range t.Partitions {
				if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
					return nil, fmt.Errorf("kafka: last stable offset of %s/%d: %w", topic, p.Partition, err)
				}
				out[p.Partition] = p.Offset
			}
		}
	}
	for _, p := range parts {
		if _, ok := out[p]; !ok {
			return nil, fmt.Errorf("kafka: last stable offset of %s/%d: not answered", topic, p)
		}
	}
	return out, nil
}

// withClient runs fn with a franz-go client of the connection, closed
// after; its error is explained as Probe's is.
func (c Config) withClient(fn func(*kgo.Client) error) error {
	opts, err := c.KgoOpts()
	if err != nil {
		return err
	}
	watch := &AuthWatch{}
	cl, err := kgo.NewClient(append(opts, kgo.WithHooks(watch))...)
	if err != nil {
		return err
	}
	defer cl.Close()
	return watch.Explain(c, fn(cl))
}

// WaitTopicReady polls the metadata until topic has partitions
// partitions, each with a leader, or ctx ends. Apache Kafka creates a
// topic asynchronously: CreateTopics answers before every broker knows the
// partitions, and a client that reads or writes at once is told "unknown
// partition" (FM75; the embedded broker creates them at once).
func (c Config) WaitTopicReady(ctx context.Context, topic string, partitions int32) error {
	return c.withClient(func(cl *kgo.Client) error {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			why := leaders(ctx, cl, topic, partitions)
			if why == "" {
				return nil
			}
			select {
			case <-tick.C:
			case <-ctx.Done():
				return fmt.Errorf("kafka: topic %s not ready: %s: %w", topic, why, ctx.Err())
			}
		}
	})
}

// leaders returns "" when every partition of topic up to partitions has a
// leader, or why not.
func leaders(ctx context.Context, cl *kgo.Client, topic string, partitions int32) string {
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return err.Error()
	}
	if len(resp.Topics) != 1 {
		return "no metadata"
	}
	mt := resp.Topics[0]
	if err := kerr.ErrorForCode(mt.ErrorCode); err != nil {
		return err.Error()
	}
	if int32(len(mt.Partitions)) != partitions {
		return fmt.Sprintf("%d of %d partitions", len(mt.Partitions), partitions)
	}
	for _, p := range mt.Partitions {
		if p.Leader < 0 || p.ErrorCode != 0 {
			return fmt.Sprintf("partition %d has no leader", p.Partition)
		}
	}
	return ""
}

// CreateTopic creates topic with partitions partitions, the brokers'
// default replication and configs (nil: the brokers' defaults), and waits
// until it is ready (WaitTopicReady). A topic that exists already is no
// error; the caller checks its partitions when they matter.
func (c Config) CreateTopic(ctx context.Context, topic string, partitions int32, configs map[string]string) error {
	err := c.withClient(func(cl *kgo.Client) error {
		req := kmsg.NewPtrCreateTopicsRequest()
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topic, partitions, -1
		for k, v := range configs {
			cfg := kmsg.NewCreateTopicsRequestTopicConfig()
			cfg.Name, cfg.Value = k, kmsg.StringPtr(v)
			rt.Configs = append(rt.Configs, cfg)
		}
		req.Topics, req.TimeoutMillis = append(req.Topics, rt), 30000
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			return err
		}
		for _, rt := range resp.Topics {
			if err := kerr.ErrorForCode(rt.ErrorCode); err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("kafka: create topic %s: %w", topic, err)
	}
	return c.WaitTopicReady(ctx, topic, partitions)
}

// OpenTransaction is a transaction open on a partition: the producer
// holding it and its transactional id ("": the cluster did not name it to
// this principal, which lacks Describe on it).
type OpenTransaction struct {
	Partition       int32
	ProducerID      int64
	TransactionalID string
}

// OpenTransactions returns the transactions open on partitions 0 to
// partitions-1 of topic (DescribeProducers, KIP-664), each named by its
// transactional id where the cluster lists it (ListTransactions).
func (c Config) OpenTransactions(ctx context.Context, topic string, partitions int32) ([]OpenTransaction, error) {
	var open []OpenTransaction
	err := c.withClient(func(cl *kgo.Client) error {
		var err error
		if open, err = openOn(ctx, cl, topic, partitions); err != nil || len(open) == 0 {
			return err
		}
		ids, err := transactionalIDs(ctx, cl)
		for i := range open {
			open[i].TransactionalID = ids[open[i].ProducerID]
		}
		return err
	})
	return open, err
}

// openOn asks every partition of topic for its producers with a
// transaction open.
func openOn(ctx context.Context, cl *kgo.Client, topic string, partitions int32) ([]OpenTransaction, error) {
	req := kmsg.NewPtrDescribeProducersRequest()
	rt := kmsg.NewDescribeProducersRequestTopic()
	rt.Topic = topic
	for p := range partitions {
		rt.Partitions = append(rt.Partitions, p)
	}
	req.Topics = append(req.Topics, rt)
	var open []OpenTransaction
	for _, sh := range cl.RequestSharded(ctx, req) {
		if sh.Err != nil {
			return nil, sh.Err
		}
		for _, t := range sh.Resp.(*kmsg.DescribeProducersResponse).Topics {
			for _, p := range t.Partitions {
				if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
					return nil, fmt.Errorf("kafka: producers of %s/%d: %w", topic, p.Partition, err)
				}
				for _, ap := range p.ActiveProducers {
					if ap.CurrentTxnStartOffset >= 0 {
						open = append(open, OpenTransaction{Partition: p.Partition, ProducerID: ap.ProducerID})
					}
				}
			}
		}
	}
	return open, nil
}

// transactionalIDs lists the cluster's transactional ids by producer id.
func transactionalIDs(ctx context.Context, cl *kgo.Client) (map[int64]string, error) {
	ids := map[int64]string{}
	for _, sh := range cl.RequestSharded(ctx, kmsg.NewPtrListTransactionsRequest()) {
		if sh.Err != nil {
			return nil, sh.Err
		}
		resp := sh.Resp.(*kmsg.ListTransactionsResponse)
		if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
			return nil, fmt.Errorf("kafka: list transactions: %w", err)
		}
		for _, s := range resp.TransactionStates {
			ids[s.ProducerID] = s.TransactionalID
		}
	}
	return ids, nil
}

// DeleteTopic deletes topic; one already gone is no error.
func (c Config) DeleteTopic(ctx context.Context, topic string) error {
	err := c.withClient(func(cl *kgo.Client) error {
		req := kmsg.NewPtrDeleteTopicsRequest()
		rt := kmsg.NewDeleteTopicsRequestTopic()
		rt.Topic = kmsg.StringPtr(topic)
		req.Topics, req.TopicNames, req.TimeoutMillis = append(req.Topics, rt), []string{topic}, 30000
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			return err
		}
		for _, rt := range resp.Topics {
			if err := kerr.ErrorForCode(rt.ErrorCode); err != nil && !errors.Is(err, kerr.UnknownTopicOrPartition) {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("kafka: delete topic %s: %w", topic, err)
	}
	return nil
}
