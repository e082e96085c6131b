package brokercheck

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/fencegate/fencegate/kafkaconn"
)

// TransactionStateTopic is the coordinator's log of transactions.
const TransactionStateTopic = "__transaction_state"

// Config says what to check and against which gateway settings.
type Config struct {
	Conn kafkaconn.Config
	// Topics are the routes' topics.
	Topics []string
	// TransactionTimeout is the gateway's transaction.timeout.ms (serve
	// --transaction-timeout); the fence checks' producers use it too.
	TransactionTimeout time.Duration
	// ParkAfter is how long a gateway producer may stay idle before it is
	// closed (serve --park-after); 0 or less: never.
	ParkAfter time.Duration
	// Prefix is the deployment's transactional_id_prefix: the fence
	// checks' ids live under it, as the gateway's ACL covers them.
	Prefix string
	// ScratchTopic, when set, is an existing topic the fence checks write
	// to and never create or delete (for a principal without Create);
	// empty: a topic of the run's own, created and deleted.
	ScratchTopic string
}

// The settings read from the cluster.
const (
	cfgUnclean      = "unclean.leader.election.enable"
	cfgMinISR       = "min.insync.replicas"
	cfgMaxTimeout   = "transaction.max.timeout.ms"
	cfgExpiration   = "transactional.id.expiration.ms"
	cfgVerification = "transaction.partition.verification.enable"
	cfgStateRF      = "transaction.state.log.replication.factor"
	cfgStateMinISR  = "transaction.state.log.min.isr"
)

// topicFacts is what the cluster says of one topic.
type topicFacts struct {
	name    string
	exists  bool
	rf      int // the smallest replica count of its partitions
	configs map[string]string
	// configErr is why its configs could not be read (nil: read).
	configErr error
}

// brokerFacts are the broker settings, one map per broker id.
type brokerFacts struct {
	configs map[int32]map[string]string
	err     error
}

// facts are the cluster's answers the settings rules judge.
type facts struct {
	topics []topicFacts // the routes' topics, then __transaction_state
	broker brokerFacts
	// txnVersion is the finalized transaction.version (-1: not reported).
	txnVersion    int16
	txnVersionErr error
	acls          aclFacts
}

// Settings reads the cluster's settings over cfg.Conn and judges each.
// A setting the credentials may not read is a WARN saying so.
func Settings(ctx context.Context, cfg Config) ([]Result, error) {
	opts, err := cfg.Conn.KgoOpts()
	if err != nil {
		return nil, err
	}
	watch := &kafkaconn.AuthWatch{}
	cl, err := kgo.NewClient(append(opts, kgo.WithHooks(watch))...)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	f, err := readFacts(ctx, cl, cfg)
	if err != nil {
		return nil, watch.Explain(cfg.Conn, err)
	}
	return judge(f, cfg), nil
}

func readFacts(ctx context.Context, cl *kgo.Client, cfg Config) (facts, error) {
	f := facts{txnVersion: -1}
	names := append(append([]string(nil), cfg.Topics...), TransactionStateTopic)
	meta, brokers, err := metadata(ctx, cl, names)
	if err != nil {
		return f, err
	}
	f.topics = meta
	readTopicConfigs(ctx, cl, f.topics)
	f.broker = readBrokerConfigs(ctx, cl, brokers)
	f.txnVersion, f.txnVersionErr = transactionVersion(ctx, cl)
	f.acls = readACLs(ctx, cl, cfg.Conn)
	return f, nil
}

// metadata returns each named topic's facts (without configs) and the
// brokers' ids.
func metadata(ctx context.Context, cl *kgo.Client, names []string) ([]topicFacts, []int32, error) {
	req := kmsg.NewPtrMetadataRequest()
	for _, n := range names {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(n)
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return nil, nil, fmt.Errorf("metadata: %w", err)
	}
	byName := map[string]kmsg.MetadataResponseTopic{}
	for _, t := range resp.Topics {
		if t.Topic != nil {
			byName[*t.Topic] = t
		}
	}
	out := make([]topicFacts, 0, len(names))
	for _, n := range names {
		tf := topicFacts{name: n}
		if t, ok := byName[n]; ok && t.ErrorCode == 0 && len(t.Partitions) > 0 {
			tf.exists, tf.rf = true, len(t.Partitions[0].Replicas)
			for _, p := range t.Partitions {
				tf.rf = min(tf.rf, len(p.Replicas))
			}
		}
		out = append(out, tf)
	}
	var ids []int32
	for _, b := range resp.Brokers {
		ids = append(ids, b.NodeID)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return out, ids, nil
}

// readTopicConfigs fills the configs of the topics that exist.
func readTopicConfigs(ctx context.Context, cl *kgo.Client, topics []topicFacts) {
	req := kmsg.NewPtrDescribeConfigsRequest()
	for _, t := range topics {
		if !t.exists {
			continue
		}
		r := kmsg.NewDescribeConfigsRequestResource()
		r.ResourceType, r.ResourceName = kmsg.ConfigResourceTypeTopic, t.name
		r.ConfigNames = []string{cfgUnclean, cfgMinISR}
		req.Resources = append(req.Resources, r)
	}
	if len(req.Resources) == 0 {
		return
	}
	got, err := describeConfigs(ctx, cl, req)
	for i := range topics {
		switch c, ok := got[topics[i].name]; {
		case err != nil:
			topics[i].configErr = err
		case !ok:
			topics[i].configErr = errors.New("not in the DescribeConfigs answer")
		case c.err != nil:
			topics[i].configErr = c.err
		default:
			topics[i].configs = c.values
		}
	}
}

type describedConfigs struct {
	values map[string]string
	err    error
}

// describeConfigs sends req to the brokers that answer for each resource
// and returns each resource's values by name.
func describeConfigs(ctx context.Context, cl *kgo.Client, req *kmsg.DescribeConfigsRequest) (map[string]describedConfigs, error) {
	out := map[string]describedConfigs{}
	for _, sh := range cl.RequestSharded(ctx, req) {
		if sh.Err != nil {
			return nil, sh.Err
		}
		for _, r := range sh.Resp.(*kmsg.DescribeConfigsResponse).Resources {
			d := describedConfigs{values: map[string]string{}}
			if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
				d.err = err
			}
			for _, c := range r.Configs {
				if c.Value != nil {
					d.values[c.Name] = *c.Value
				}
			}
			out[r.ResourceName] = d
		}
	}
	return out, nil
}

func readBrokerConfigs(ctx context.Context, cl *kgo.Client, ids []int32) brokerFacts {
	req := kmsg.NewPtrDescribeConfigsRequest()
	for _, id := range ids {
		r := kmsg.NewDescribeConfigsRequestResource()
		r.ResourceType, r.ResourceName = kmsg.ConfigResourceTypeBroker, strconv.Itoa(int(id))
		r.ConfigNames = []string{cfgMaxTimeout, cfgExpiration, cfgVerification, cfgStateRF, cfgStateMinISR}
		req.Resources = append(req.Resources, r)
	}
	got, err := describeConfigs(ctx, cl, req)
	if err != nil {
		return brokerFacts{err: err}
	}
	bf := brokerFacts{configs: map[int32]map[string]string{}}
	for _, id := range ids {
		c, ok := got[strconv.Itoa(int(id))]
		switch {
		case !ok:
			bf.err = fmt.Errorf("broker %d: not in the DescribeConfigs answer", id)
		case c.err != nil:
			bf.err = fmt.Errorf("broker %d: %w", id, c.err)
		default:
			bf.configs[id] = c.values
		}
	}
	return bf
}

// transactionVersion returns the cluster's finalized transaction.version
// (ApiVersions, KIP-584), -1 when the cluster reports none.
func transactionVersion(ctx context.Context, cl *kgo.Client) (int16, error) {
	req := kmsg.NewPtrApiVersionsRequest()
	req.ClientSoftwareName, req.ClientSoftwareVersion = "fencegate-verify-broker", "1"
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return -1, err
	}
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return -1, err
	}
	for _, f := range resp.FinalizedFeatures {
		if f.Name == "transaction.version" {
			return f.MaxVersionLevel, nil
		}
	}
	return -1, nil
}
