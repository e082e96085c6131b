package kafkadev

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/fencegate/fencegate/kafkaconn"
)

// TransactionStateTopic is Kafka's internal topic of the transaction
// coordinators: a coordinator is the leader of its partition.
const TransactionStateTopic = "__transaction_state"

// Admin asks the cluster who does what: which node coordinates a
// transactional id, leads a partition, leads the KRaft quorum, and
// whether every partition is led with its full ISR.
type Admin struct {
	cl *kgo.Client
}

// NewAdmin connects to the cluster's brokers; Close closes it.
func (c *Cluster) NewAdmin() (*Admin, error) {
	opts, err := kafkaconn.Config{Brokers: c.Brokers}.KgoOpts()
	if err != nil {
		return nil, err
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, err
	}
	return &Admin{cl: cl}, nil
}

// Close closes the admin's connections.
func (a *Admin) Close() { a.cl.Close() }

// Coordinator returns the node coordinating transactional id id
// (FindCoordinator).
func (a *Admin) Coordinator(ctx context.Context, id string) (int, error) {
	return a.coordinator(ctx, 1, id)
}

// GroupCoordinator returns the node coordinating consumer group group
// (FindCoordinator): where its offsets, transactional ones included,
// are committed.
func (a *Admin) GroupCoordinator(ctx context.Context, group string) (int, error) {
	return a.coordinator(ctx, 0, group)
}

// coordinator asks FindCoordinator of kind typ (0: group, 1:
// transaction) for key, again while the answer is retriable (the first
// question about a group makes __consumer_offsets: not available yet)
// and ctx lasts.
func (a *Admin) coordinator(ctx context.Context, typ int8, key string) (int, error) {
	for {
		n, err := a.askCoordinator(ctx, typ, key)
		if !kerr.IsRetriable(err) {
			return n, err
		}
		select {
		case <-ctx.Done():
			return 0, err
		case <-time.After(200 * time.Millisecond): // between two questions
		}
	}
}

func (a *Admin) askCoordinator(ctx context.Context, typ int8, key string) (int, error) {
	req := kmsg.NewPtrFindCoordinatorRequest()
	req.CoordinatorType, req.CoordinatorKeys = typ, []string{key}
	resp, err := req.RequestWith(ctx, a.cl)
	if err != nil {
		return 0, err
	}
	if len(resp.Coordinators) != 1 {
		return 0, fmt.Errorf("find coordinator of %s: %d answers", key, len(resp.Coordinators))
	}
	if err := kerr.ErrorForCode(resp.Coordinators[0].ErrorCode); err != nil {
		return 0, fmt.Errorf("find coordinator of %s: %w", key, err)
	}
	return int(resp.Coordinators[0].NodeID), nil
}

// Leader returns the node leading partition p of topic.
func (a *Admin) Leader(ctx context.Context, topic string, p int32) (int, error) {
	parts, err := a.partitions(ctx, topic)
	if err != nil {
		return 0, err
	}
	for _, mp := range parts {
		if mp.Partition == p && mp.Leader >= 1 {
			return int(mp.Leader), nil
		}
	}
	return 0, fmt.Errorf("partition %d of %s has no leader", p, topic)
}

// ActiveController returns the node that leads the KRaft quorum.
func (a *Admin) ActiveController(ctx context.Context) (int, error) {
	req := kmsg.NewPtrDescribeQuorumRequest()
	rt := kmsg.NewDescribeQuorumRequestTopic()
	rt.Topic = "__cluster_metadata"
	rt.Partitions = append(rt.Partitions, kmsg.NewDescribeQuorumRequestTopicPartition())
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, a.cl)
	if err != nil {
		return 0, err
	}
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		return 0, errors.New("describe quorum: no partition in the answer")
	}
	return int(resp.Topics[0].Partitions[0].LeaderID), nil
}

// Unhealthy says what keeps the cluster from being whole (empty: it is):
// a node that does not answer, a node missing from a node's metadata, or
// a partition of topics or of __transaction_state without a leader or
// with a replica out of its ISR. Every node is asked directly (at most 5
// s a question) and each must say it is whole: a KRaft leader just back
// from a cut-off answers from the metadata it had before the cut, in
// which the cluster was whole, for a few hundred ms (it listed all three
// nodes while the others listed two; asked through the client, which may
// pick it, the cluster was "whole" 9 ms after the cut was healed).
func (a *Admin) Unhealthy(ctx context.Context, nodes int, topics ...string) string {
	for m := 1; m <= nodes; m++ {
		if why := a.unhealthyAt(ctx, m, nodes, topics); why != "" {
			return fmt.Sprintf("node %d: %s", m, why)
		}
	}
	return ""
}

// unhealthyAt says what keeps the cluster from being whole as node m
// sees it.
func (a *Admin) unhealthyAt(ctx context.Context, m, nodes int, topics []string) string {
	req := kmsg.NewPtrMetadataRequest()
	for _, t := range append(topics, TransactionStateTopic) {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(t)
		req.Topics = append(req.Topics, rt)
	}
	resp, err := a.metadataAt(ctx, m, req)
	if err != nil {
		return err.Error()
	}
	if len(resp.Brokers) < nodes {
		return fmt.Sprintf("%d of %d nodes in the metadata", len(resp.Brokers), nodes)
	}
	for _, t := range resp.Topics {
		if why := topicUnhealthy(t); why != "" {
			return why
		}
	}
	return ""
}

// topicUnhealthy says what keeps topic t from being whole: an error, a
// partition without a leader or with a replica out of its ISR.
func topicUnhealthy(t kmsg.MetadataResponseTopic) string {
	name := ""
	if t.Topic != nil {
		name = *t.Topic
	}
	if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
		if name == TransactionStateTopic && errors.Is(err, kerr.UnknownTopicOrPartition) {
			return "" // no transaction yet: nothing to coordinate
		}
		return fmt.Sprintf("%s: %v", name, err)
	}
	for _, p := range t.Partitions {
		if p.Leader < 0 || len(p.ISR) < len(p.Replicas) {
			return fmt.Sprintf("%s partition %d: leader %d, ISR %v of replicas %v", name, p.Partition, p.Leader, p.ISR, p.Replicas)
		}
	}
	return ""
}

// WaitHealthy polls Unhealthy until the cluster is whole or ctx ends (an
// error saying what was still missing). The caller bounds ctx by what its
// property bounds, not by a guess at how fast a JVM restarts.
func (a *Admin) WaitHealthy(ctx context.Context, nodes int, topics ...string) error {
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		why := a.Unhealthy(ctx, nodes, topics...)
		if why == "" {
			return nil
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return fmt.Errorf("the cluster is not whole: %s", why)
		}
	}
}

func (a *Admin) partitions(ctx context.Context, topic string) ([]kmsg.MetadataResponseTopicPartition, error) {
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, a.cl)
	if err != nil {
		return nil, err
	}
	if len(resp.Topics) != 1 {
		return nil, fmt.Errorf("metadata of %s: %d topics", topic, len(resp.Topics))
	}
	return resp.Topics[0].Partitions, kerr.ErrorForCode(resp.Topics[0].ErrorCode)
}

// WaitDropped asks each node but n directly (a question routed to n, cut
// off or dead, would hang), at most 5 s a question, until every one
// answers metadata without n (the quorum fenced it: it missed its
// heartbeats), and returns how long that took; or ctx's end (an error
// naming what each node listed last).
func (a *Admin) WaitDropped(ctx context.Context, n, nodes int) (time.Duration, error) {
	start := time.Now()
	var seen map[int][]int32
	for {
		seen = map[int][]int32{}
		for m := 1; m <= nodes; m++ {
			if m != n {
				seen[m] = a.nodesSeenBy(ctx, m)
			}
		}
		if dropped(seen, n) {
			return time.Since(start), nil
		}
		select {
		case <-ctx.Done():
			return time.Since(start), fmt.Errorf("node %d not dropped: the other nodes list %v (nil: no answer)", n, seen)
		case <-time.After(200 * time.Millisecond): // between two rounds of questions
		}
	}
}

// dropped reports whether every node answered, without node n.
func dropped(seen map[int][]int32, n int) bool {
	for _, ids := range seen {
		if ids == nil || slices.Contains(ids, int32(n)) {
			return false
		}
	}
	return true
}

// nodesSeenBy returns the nodes node m's metadata names (nil: no answer
// within 5 s).
func (a *Admin) nodesSeenBy(ctx context.Context, m int) []int32 {
	resp, err := a.metadataAt(ctx, m, kmsg.NewPtrMetadataRequest())
	if err != nil {
		return nil
	}
	ids := []int32{}
	for _, b := range resp.Brokers {
		ids = append(ids, b.NodeID)
	}
	return ids
}

// metadataAt asks node m itself, at most 5 s: a question the client
// routes may go to a node cut off (it hangs) or just back (it answers
// from old metadata).
func (a *Admin) metadataAt(ctx context.Context, m int, req *kmsg.MetadataRequest) (*kmsg.MetadataResponse, error) {
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := a.cl.Broker(m).Request(qctx, req)
	if err != nil {
		return nil, err
	}
	return resp.(*kmsg.MetadataResponse), nil
}
