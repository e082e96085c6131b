package materializer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/fencegate/fencegate/kafkaconn"
)

// DefaultTrustedName is TrustedConfig.Name's default.
const DefaultTrustedName = "trusted"

// TrustedConfig configures the Kafka sink (docs/design.md, "The trusted
// topic"). Zero fields take the defaults noted.
type TrustedConfig struct {
	// Name names the sink's topics (T.Name, T.Name.receipts,
	// T.Name.state for each lease topic T), its consumer group
	// (fencegate-Name) and its producers' transactional ids (default
	// "trusted"). A rebuild from offset 0 is a sink of another name.
	Name string
	// DedupWindow is how many batches per lease and partition the sink
	// remembers for dedup (default DefaultDedupWindow).
	DedupWindow int
	// TransactionTimeout of each partition's producer (default 60s).
	TransactionTimeout time.Duration
	// RestoreTimeout bounds reading one partition's state (default 2m).
	RestoreTimeout time.Duration
	// InstanceID, when set, is the consumer's group.instance.id (static
	// membership, KIP-345): an instance restarted under the same id takes
	// its partitions back at once instead of after the dead one's session
	// timeout (45 s). A stable name per instance (a StatefulSet pod's, a
	// host's); two live processes with one id: the broker fences the
	// older. Empty: a dynamic member.
	InstanceID string
	// Mirror, when set, is the ledger database whose fences and
	// checkpoints the sink keeps from its state, for checkpoint reads,
	// when no Postgres ledger runs (trusted_mirror.go). Nil: none. Run
	// claims it for the mirror and refuses a database a Postgres ledger
	// keeps (ErrDatabaseTaken, FM85).
	Mirror *pgxpool.Pool
	// Hooks are named points for tests.
	Hooks TrustedHooks
}

// TrustedHooks are named points for tests.
type TrustedHooks struct {
	// BeforeCommit runs after a chunk's records and offsets are sent in
	// its transaction, before the commit; an error stops Run there, the
	// transaction left open as a killed process would leave it.
	BeforeCommit func(topic string, partition int32) error
}

func (c *TrustedConfig) fill() error {
	if c.Name == "" {
		c.Name = DefaultTrustedName
	}
	if c.DedupWindow == 0 {
		c.DedupWindow = DefaultDedupWindow
	}
	if c.DedupWindow < 0 {
		return fmt.Errorf("materializer: DedupWindow %d must not be negative", c.DedupWindow)
	}
	if c.TransactionTimeout == 0 {
		c.TransactionTimeout = time.Minute
	}
	if c.RestoreTimeout == 0 {
		c.RestoreTimeout = 2 * time.Minute
	}
	return nil
}

// TrustedSink writes the trusted output of the lease topics to Kafka: one
// consume-transform-produce transaction per chunk of one partition
// (docs/ledger.md, "The trusted topic").
type TrustedSink struct {
	m   *Materializer
	cfg TrustedConfig
	log *slog.Logger // m's, with the sink's name

	mu    sync.Mutex
	parts map[partitionKey]*trustedPart
	// lag is, per owned partition, its high watermark as last seen minus
	// the next offset to apply (updateLag).
	lag map[partitionKey]int64
	// failed is the first error of a rebalance callback; Run stops on it.
	failed error

	running  atomic.Bool
	verdicts sync.Map // Verdict -> *atomic.Int64
}

// trustedPart is an input partition this instance owns: its producer
// (transactional id bound to the partition) and its state.
type trustedPart struct {
	key partitionKey
	p   *kafka.Producer
	// abandoned: a call wedged in p (FM119); p is closed when that call
	// returns, by its own goroutine, and by nothing else.
	abandoned atomic.Bool
	state     *partState
	// next is the group's input offset: the one this instance last
	// committed, or the group's when it took the partition (0: none).
	next int64
}

// Trusted returns the Kafka sink of m's routes (one per Materializer: its
// readiness and status are m's).
func (m *Materializer) Trusted(cfg TrustedConfig) (*TrustedSink, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	t := &TrustedSink{m: m, cfg: cfg, log: m.log.With("sink", cfg.Name), parts: map[partitionKey]*trustedPart{},
		lag: map[partitionKey]int64{}}
	for _, v := range Verdicts {
		t.verdicts.Store(v, new(atomic.Int64))
		m.met.trustedVerdicts(context.Background(), v, 0) // every series from 0, as the ledger's
	}
	m.fenceMu.Lock()
	defer m.fenceMu.Unlock()
	if m.trusted != nil {
		return nil, errors.New("materializer: a trusted sink exists already")
	}
	m.trusted = t
	return t, nil
}

// Topics are the sink's output topics for lease topic: trusted records,
// receipts, state.
func (t *TrustedSink) Topics(topic string) (trusted, receipts, state string) {
	base := topic + "." + t.cfg.Name
	return base, base + ".receipts", base + ".state"
}

// GroupID is the sink's consumer group.
func (t *TrustedSink) GroupID() string { return "fencegate-" + t.cfg.Name }

// TransactionalIDPrefix is what every transactional id of the sink's
// producers starts with, "fencegate-trusted/<transactional_id_prefix>/":
// outside the gateways' prefix (txnmap.IDPrefix), so a prefixed ACL gives
// the materializer principal these ids and the gateways none of them.
func (t *TrustedSink) TransactionalIDPrefix() string {
	return "fencegate-trusted/" + t.m.router.Prefix() + "/"
}

// transactionalID is the id of the producer of one input partition:
// bound to the sink's name, the topic and the partition, so each input
// partition has one writer, fenced at every change of owner.
func (t *TrustedSink) transactionalID(key partitionKey) string {
	return fmt.Sprintf("%s%s/%s/%d", t.TransactionalIDPrefix(), t.cfg.Name, key.topic, key.partition)
}

// Counts returns how many records got each verdict since start.
func (t *TrustedSink) Counts() map[Verdict]int64 {
	out := map[Verdict]int64{}
	t.verdicts.Range(func(k, v any) bool {
		out[k.(Verdict)] = v.(*atomic.Int64).Load()
		return true
	})
	return out
}

// Ready reports whether Run is consuming.
func (t *TrustedSink) Ready(context.Context) error {
	if !t.running.Load() {
		return errors.New("trusted sink not consuming")
	}
	return nil
}

// Run consumes until ctx ends (nil) or a failure stops it (error). A
// failure leaves Kafka as the last committed transaction left it; the
// next Run, here or on another instance, resumes from there.
func (t *TrustedSink) Run(ctx context.Context) error {
	err := t.run(ctx)
	if ctx.Err() != nil {
		return nil
	}
	return err
}

func (t *TrustedSink) run(ctx context.Context) error {
	if t.cfg.Mirror != nil {
		if err := claimDatabase(ctx, t.cfg.Mirror, ownerMirror); err != nil {
			return err
		}
	}
	if err := t.checkGrants(ctx, t.inputGrants()); err != nil {
		return err
	}
	topics, err := t.ensureTopics(ctx)
	if err != nil {
		return err
	}
	if err := t.checkGrants(ctx, t.outputGrants()); err != nil {
		return err
	}
	c, err := t.newConsumer()
	if err != nil {
		return err
	}
	defer t.closeParts()
	defer c.Close()
	rebalance := func(c *kafka.Consumer, ev kafka.Event) error { return t.rebalance(ctx, c, ev) }
	if err := c.SubscribeTopics(topics, rebalance); err != nil {
		return err
	}
	t.running.Store(true)
	defer t.running.Store(false)
	for ctx.Err() == nil {
		chunks, err := t.poll(c)
		if err != nil {
			return err
		}
		err = t.commitChunks(ctx, c, chunks)
		if err == nil && len(chunks) == 0 {
			err = t.skipMarkers(ctx, c)
		}
		if err != nil && fatal(err) {
			err = t.rejoin(c, topics, rebalance, err)
		}
		if err != nil {
			return err
		}
		t.updateLag(c)
	}
	return nil
}

// rejoin is the answer to a producer fenced for good (fatal): whether
// another instance took its partition (a zombie, FM55) or the broker
// aborted its transaction past its timeout (FM118), this instance cannot
// tell, so it closes every producer, leaves the group and joins it
// again, and the group decides which partitions are its own; each is
// then taken as at any assignment (a new producer whose InitTransactions
// fences the old one, its state read again, the consumer at the group's
// committed offset). Nothing is written twice: a commit carries its
// group generation and the broker refuses an older one (KIP-447).
func (t *TrustedSink) rejoin(c *kafka.Consumer, topics []string, rebalance kafka.RebalanceCb, cause error) error {
	t.log.Warn("trusted sink: a producer was fenced; leaving the group and joining again", "cause", cause)
	t.closeParts()
	if err := c.Unsubscribe(); err != nil {
		return fmt.Errorf("%w; leaving the group: %w", cause, err)
	}
	if err := c.SubscribeTopics(topics, rebalance); err != nil {
		return fmt.Errorf("%w; joining the group again: %w", cause, err)
	}
	return nil
}

// updateLag sets each owned partition's lag: its high watermark as the
// consumer last saw it minus the group's offset there (next: committed
// by this instance, or found when it took the partition; the low
// watermark when the group has none, where auto.offset.reset=earliest
// starts), never below 0. It runs between polls, where no chunk is in
// flight and next is settled.
func (t *TrustedSink) updateLag(c *kafka.Consumer) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for key, tp := range t.parts {
		low, high, err := c.GetWatermarkOffsets(key.topic, key.partition)
		if err != nil || high < 0 {
			continue // not known yet
		}
		t.lag[key] = max(high-max(tp.next, low, 0), 0)
	}
}

// seedNext sets the next offset of each partition just taken to the
// group's committed offset there, so that its lag is right before this
// instance commits (the stable offset: take aborted any open
// transaction). Without an answer next stays 0 and the lag reads high
// until the first commit.
func (t *TrustedSink) seedNext(c *kafka.Consumer, tps []kafka.TopicPartition) {
	committed, err := c.Committed(tps, int(t.cfg.TransactionTimeout.Milliseconds()))
	if err != nil {
		t.log.Warn("trusted sink: committed offsets not read; lag counts from the earliest offset until a commit", "err", err)
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, tp := range committed {
		if p := t.parts[partitionKey{*tp.Topic, tp.Partition}]; p != nil && tp.Offset >= 0 {
			p.next = int64(tp.Offset)
		}
	}
}

// Lag returns, per "topic/partition" this instance owns, the high
// watermark minus the next offset to apply, as last seen.
func (t *TrustedSink) Lag() map[string]int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return lagByName(t.lag)
}

// skipMarkers, when idle, moves the group's offset of each owned partition
// past what read_committed never delivers (transaction markers, aborted
// records), in a transaction of the partition's producer with no record:
// so a caught-up partition shows no lag. Every record below the position
// was delivered and committed before this poll.
func (t *TrustedSink) skipMarkers(ctx context.Context, c *kafka.Consumer) error {
	t.mu.Lock()
	parts := make([]*trustedPart, 0, len(t.parts))
	for _, tp := range t.parts {
		parts = append(parts, tp)
	}
	t.mu.Unlock()
	for _, tp := range parts {
		topic := tp.key.topic
		pos, err := c.Position([]kafka.TopicPartition{{Topic: &topic, Partition: tp.key.partition}})
		if err != nil || len(pos) != 1 || pos[0].Offset < 0 || int64(pos[0].Offset) <= tp.next {
			continue // unknown yet, or nothing to skip
		}
		if err := t.transact(ctx, c, tp, nil, int64(pos[0].Offset)); err != nil {
			err = fmt.Errorf("trusted sink: %s/%d: skipping to %d: %w", topic, tp.key.partition, pos[0].Offset, err)
			if !abortable(err) {
				return err
			}
			// Nothing was judged: abort, and skip at the next idle poll.
			t.log.Warn("trusted sink: transaction aborted", "cause", err)
			actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), t.cfg.TransactionTimeout)
			err = tp.p.AbortTransaction(actx)
			cancel()
			if err != nil {
				return err
			}
		}
	}
	return nil
}

func (t *TrustedSink) newConsumer() (*kafka.Consumer, error) {
	cm, err := t.m.cfg.Kafka.ConfigMap()
	if err != nil {
		return nil, err
	}
	for k, v := range (kafka.ConfigMap{"group.id": t.GroupID(),
		"isolation.level": "read_committed", "enable.auto.commit": false,
		"auto.offset.reset": "earliest", "enable.metrics.push": false,
		"partition.assignment.strategy": "cooperative-sticky",
		"go.logs.channel.enable":        false}) {
		cm[k] = v
	}
	if t.cfg.InstanceID != "" {
		cm["group.instance.id"] = t.cfg.InstanceID
	}
	for k, v := range t.m.cfg.Consumer {
		cm[k] = v
	}
	return kafka.NewConsumer(&cm)
}

// poll gathers what the consumer has buffered, by partition in offset
// order, at most MaxBatch records of one partition; it returns the
// failure of a rebalance callback.
func (t *TrustedSink) poll(c *kafka.Consumer) (map[partitionKey][]*kafka.Message, error) {
	out := map[partitionKey][]*kafka.Message{}
	timeout := int(t.m.cfg.PollTimeout.Milliseconds())
	for n := 0; n < t.m.cfg.MaxBatch*t.m.cfg.Parallel; n++ {
		ev := c.Poll(timeout)
		if err := t.failure(); err != nil {
			return nil, err
		}
		if ev == nil {
			break
		}
		timeout = 0
		switch e := ev.(type) {
		case *kafka.Message:
			key := partitionKey{*e.TopicPartition.Topic, e.TopicPartition.Partition}
			if t.part(key) == nil {
				continue // revoked while buffered
			}
			out[key] = append(out[key], e)
			if len(out[key]) == t.m.cfg.MaxBatch {
				return out, nil
			}
		case kafka.Error:
			if e.IsFatal() {
				return nil, e
			}
			t.log.Warn("trusted sink: consumer error", "error", e)
		}
	}
	return out, nil
}

func (t *TrustedSink) failure() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.failed
}

func (t *TrustedSink) part(key partitionKey) *trustedPart {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.parts[key]
}

// commitChunks commits each partition's chunk in a transaction of its own,
// up to Parallel at once, and returns the first failure.
func (t *TrustedSink) commitChunks(ctx context.Context, c *kafka.Consumer, chunks map[partitionKey][]*kafka.Message) error {
	errs := make(chan error, len(chunks))
	slots := make(chan struct{}, t.m.cfg.Parallel)
	for key, recs := range chunks {
		slots <- struct{}{}
		go func() {
			defer func() { <-slots }()
			errs <- t.commitChunk(ctx, c, t.part(key), recs)
		}()
	}
	var first error
	for range len(chunks) {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// close closes the partition's producer, unless a wedged call has it
// (abandoned: closed when that call returns).
func (tp *trustedPart) close() {
	if !tp.abandoned.Load() {
		tp.p.Close()
	}
}

// closeParts closes every partition's producer.
func (t *TrustedSink) closeParts() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for key, tp := range t.parts {
		tp.close()
		delete(t.parts, key)
		delete(t.lag, key)
	}
}

// The trusted sink's grants (docs/managed-kafka.md), proved at start
// (FM111): librdkafka answers a group or a topic it may not use with
// error events and retries, so without this the sink ran, ready, and
// committed nothing. inputGrants are asked before its topics are made,
// outputGrants after (a topic not made yet has no rights to report);
// Create is judged by the creation itself (ensureTopic).

// inputGrants: Read on each lease topic and on the group, Write on the
// transactional ids (prefixed).
func (t *TrustedSink) inputGrants() []kafkaconn.Grant {
	var out []kafkaconn.Grant
	for _, topic := range t.leaseTopics() {
		out = append(out, kafkaconn.Grant{Op: kmsg.ACLOperationRead, Resource: kmsg.ACLResourceTypeTopic, Name: topic})
	}
	return append(out,
		kafkaconn.Grant{Op: kmsg.ACLOperationRead, Resource: kmsg.ACLResourceTypeGroup, Name: t.GroupID()},
		kafkaconn.Grant{Op: kmsg.ACLOperationWrite, Resource: kmsg.ACLResourceTypeTransactionalId, Name: t.TransactionalIDPrefix(), Prefixed: true})
}

// outputGrants: Write and Read on each lease topic's T.trusted, prefixed
// (which covers its receipts and state topics); asked of T.trusted.
func (t *TrustedSink) outputGrants() []kafkaconn.Grant {
	var out []kafkaconn.Grant
	for _, topic := range t.leaseTopics() {
		trusted, _, _ := t.Topics(topic)
		for _, op := range []kmsg.ACLOperation{kmsg.ACLOperationWrite, kmsg.ACLOperationRead} {
			out = append(out, kafkaconn.Grant{Op: op, Resource: kmsg.ACLResourceTypeTopic, Name: trusted, Prefixed: true})
		}
	}
	return out
}

// checkGrants stops the sink, naming the principal and each grant the
// cluster refused; a cluster that gives no answer about rights is logged
// and the sink goes on (its first use then fails with the broker's own
// error).
func (t *TrustedSink) checkGrants(ctx context.Context, grants []kafkaconn.Grant) error {
	err := askGrants(ctx, t.m.cfg.Kafka, t.TransactionalIDPrefix()+"~grants", grants)
	switch {
	case errors.Is(err, kafkaconn.ErrMissingGrant):
		return fmt.Errorf("trusted sink: %w", err)
	case err != nil:
		t.log.Warn("trusted sink: grants not checked", "error", err)
	}
	return nil
}

// leaseTopics are the routes' topics, each once.
func (t *TrustedSink) leaseTopics() []string { return t.m.topics() }

// ensureTopics creates the sink's missing topics with the partitions of
// their lease topic (the state topic compacted) and refuses one that has
// another count; it returns the lease topics to consume.
func (t *TrustedSink) ensureTopics(ctx context.Context) ([]string, error) {
	leaseTopics := t.leaseTopics()
	conn := t.m.cfg.Kafka
	for _, topic := range leaseTopics {
		n, err := conn.TopicPartitions(ctx, topic)
		if err != nil {
			return nil, fmt.Errorf("trusted sink: %w", err)
		}
		trusted, receipts, state := t.Topics(topic)
		for _, out := range []string{trusted, receipts, state} {
			if err := t.ensureTopic(ctx, conn, out, trusted, n, out == state); err != nil {
				return nil, err
			}
		}
	}
	return leaseTopics, nil
}

// ensureTopic makes topic unless it exists with partitions; base is the
// prefix its Create grant names.
func (t *TrustedSink) ensureTopic(ctx context.Context, conn kafkaconn.Config, topic, base string, partitions int32, compact bool) error {
	have, err := conn.TopicPartitions(ctx, topic)
	if err == nil {
		if have != partitions {
			return fmt.Errorf("trusted sink: topic %s has %d partitions, its lease topic %d: grow it to %d (kafka-topics --alter --partitions)", topic, have, partitions, partitions)
		}
		// Another instance may have created it a moment ago (FM75).
		return conn.WaitTopicReady(ctx, topic, partitions)
	}
	if !errors.Is(err, kafkaconn.ErrNoTopic) {
		return fmt.Errorf("trusted sink: %w", err)
	}
	var configs map[string]string
	if compact {
		configs = map[string]string{"cleanup.policy": "compact"}
	}
	err = conn.CreateTopic(ctx, topic, partitions, configs)
	if errors.Is(err, kerr.TopicAuthorizationFailed) || errors.Is(err, kerr.ClusterAuthorizationFailed) {
		create := kafkaconn.Grant{Op: kmsg.ACLOperationCreate, Resource: kmsg.ACLResourceTypeTopic, Name: base, Prefixed: true}
		return fmt.Errorf("trusted sink: %w (%w)", &kafkaconn.MissingGrantError{Principal: conn.Principal(), Grants: []kafkaconn.Grant{create}}, err)
	}
	if err != nil {
		return fmt.Errorf("trusted sink: %w", err)
	}
	t.log.Info("trusted sink: created topic", "topic", topic, "partitions", partitions, "compacted", compact)
	return nil
}

// SinkGoroutines picks, from a goroutine dump (pprof's goroutine profile
// at debug=2), the goroutines running the trusted sink's code: where a
// stalled sink waits (FM119 was found so).
func SinkGoroutines(dump string) string {
	var sink []string
	for _, g := range strings.Split(dump, "\n\n") {
		if strings.Contains(g, "(*TrustedSink)") {
			sink = append(sink, g)
		}
	}
	return strings.Join(sink, "\n\n")
}
