package gateway

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/fencegate/fencegate/kafkaconn"
	"github.com/fencegate/fencegate/txnmap"
)

// KafkaConfig says how the gateway reaches Kafka: the connection shared
// with every other client of the project (brokers, TLS, SASL) and the
// producers' own settings.
type KafkaConfig struct {
	kafkaconn.Config
	// TransactionTimeoutMS is transaction.timeout.ms of every producer; keep
	// it below the lease TTL budget (default DefaultTransactionTimeout).
	TransactionTimeoutMS int
	// Extra librdkafka properties for producers, set last; the
	// connection's security properties cannot be overridden here.
	Extra map[string]string
}

// DefaultTransactionTimeout is the default of
// KafkaConfig.TransactionTimeoutMS and of `fencegate serve
// --transaction-timeout`. Keep it below the lease TTL budget in use: a
// transaction a dead generation left open is aborted by the broker before
// a TTL's worth of time (docs/design.md, "Running it").
const DefaultTransactionTimeout = 10 * time.Second

// ProducerConfig returns the librdkafka properties of the gateway's
// producer of transactionalID, so that a check of the broker
// (brokercheck's fence checks) runs on the producer the gateway runs.
func (c KafkaConfig) ProducerConfig(transactionalID string) (*kafka.ConfigMap, error) {
	return c.producerConfig(transactionalID)
}

func (c KafkaConfig) producerConfig(transactionalID string) (*kafka.ConfigMap, error) {
	cm, err := c.ConfigMap()
	if err != nil {
		return nil, err
	}
	for k, v := range (kafka.ConfigMap{
		"transactional.id":       transactionalID,
		"transaction.timeout.ms": c.TransactionTimeoutMS,
		"enable.idempotence":     true,
		"linger.ms":              1,
		// A handover waits on librdkafka's PID and coordinator timers;
		// short backoffs keep it near one round trip (defaults 100ms add
		// about 40ms per handover). Extra may override them.
		"retry.backoff.ms":       20,
		"reconnect.backoff.ms":   10,
		"go.logs.channel.enable": false,
		"enable.metrics.push":    false,
		// Delivery reports go to the per-batch channel; no other events
		// are needed, so the events channel stays small.
		"go.events.channel.size": 64,
		// Produce() with a per-batch delivery channel never uses the
		// ProduceChannel; its default buffer (1,000,000 entries, 8 MB per
		// instance, zeroed and scanned by every GC) was a quarter of the
		// gateway's CPU profile and most of its RSS (BENCHMARKS-history.md,
		// "Earlier: each process on its own").
		"go.produce.channel.size": 0,
		// Delivery reports carry only the partition and offset back into
		// Go; copying keys, values and headers back doubles the cgo work.
		"go.delivery.report.fields": "none",
	}) {
		cm[k] = v
	}
	if err := c.applyExtra(cm); err != nil {
		return nil, err
	}
	return &cm, nil
}

// applyExtra sets the Extra properties. Security properties are refused:
// a TLS or SASL setting lives in kafkaconn.Config, where every client of
// the project reads it, and cannot be weakened for producers alone.
func (c KafkaConfig) applyExtra(cm kafka.ConfigMap) error {
	for k, v := range c.Extra {
		if strings.HasPrefix(k, "ssl.") || strings.HasPrefix(k, "sasl.") || k == "security.protocol" || k == "bootstrap.servers" {
			return fmt.Errorf("gateway: Kafka.Extra may not set %q; use the connection settings", k)
		}
		if err := cm.SetKey(k, v); err != nil {
			return err
		}
	}
	return nil
}

// producer is one librdkafka transactional producer instance. It is bound
// to exactly one token for its whole life (docs/design.md, "Handover") and is
// never re-initialised.
//
// Its methods are called by one goroutine at a time (the handover's, or the
// holder of the session's mu).
type producer struct {
	p *kafka.Producer
	// unsettled: send handed records of the open transaction to librdkafka
	// and returned before any of their delivery reports came back, and no
	// abort was asked for since. librdkafka may then still have the
	// partition's first AddPartitionsToTxn to send; close must not destroy
	// the instance in that state (see close).
	unsettled bool
}

func newProducer(cfg KafkaConfig, transactionalID string) (*producer, error) {
	cm, err := cfg.producerConfig(transactionalID)
	if err != nil {
		return nil, err
	}
	p, err := kafka.NewProducer(cm)
	if err != nil {
		return nil, fmt.Errorf("%w: new producer: %w", ErrKafkaUnavailable, err)
	}
	go drainEvents(p.Events())
	return &producer{p: p}, nil
}

// drainEvents consumes the producer's generic events (errors, stats) so
// librdkafka never blocks on a full channel; it ends when Close closes the
// channel. Every error that matters also surfaces on the transactional call.
func drainEvents(ch chan kafka.Event) {
	for range ch {
	}
}

// record is one message of a batch, ready to produce.
type record struct {
	key, value []byte
	headers    []kafka.Header
}

// send produces records to topic/partition inside the open transaction and
// waits for every delivery report. It returns the offsets in record order.
//
// A transaction's records go to one partition, so the first delivery report
// (success or failure) means librdkafka has registered the partition with
// the transaction or will never try to: until then the producer is
// unsettled.
func (p *producer) send(ctx context.Context, topic string, partition int32, recs []record) ([]int64, error) {
	p.unsettled = false
	dch := make(chan kafka.Event, len(recs))
	for i := range recs {
		m := &kafka.Message{
			TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: partition},
			Key:            recs[i].key, Value: recs[i].value, Headers: recs[i].headers,
			Opaque: i,
		}
		if err := p.p.Produce(m, dch); err != nil {
			return nil, err
		}
		p.unsettled = true
	}
	offsets := make([]int64, len(recs))
	for range recs {
		select {
		case ev := <-dch:
			p.unsettled = false
			m, ok := ev.(*kafka.Message)
			if !ok {
				return nil, fmt.Errorf("unexpected delivery event %T", ev)
			}
			if m.TopicPartition.Error != nil {
				return nil, m.TopicPartition.Error
			}
			offsets[m.Opaque.(int)] = int64(m.TopicPartition.Offset)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return offsets, nil
}

// warm connects the producer to the cluster before InitTransactions. The
// first metadata call goes through the bootstrap connection, which
// librdkafka then replaces by one to the broker's real id; if the PID
// request starts during that swap, librdkafka finds no broker and waits for
// its 500 ms coordinator timer. A second call returns only once the real
// connection is up. Measured on kfake: p99 of InitTransactions from 510 ms
// to 46 ms.
//
// A transport failure of a metadata call (a connection being replaced or
// refused under load) is retried after a short pause until ctx ends: a
// cold start of many producers at once must not fail handovers for it.
func (p *producer) warm(ctx context.Context, topic string) error {
	for done := 0; done < 2; {
		ms := 5000
		if d, ok := ctx.Deadline(); ok {
			ms = max(int(time.Until(d).Milliseconds()), 1)
		}
		_, err := p.p.GetMetadata(&topic, false, ms)
		var kerr kafka.Error
		switch {
		case err == nil:
			done++
		case errors.As(err, &kerr) && kerr.Code() == kafka.ErrTransport && pause(ctx, 10*time.Millisecond):
		default:
			return fmt.Errorf("%w: metadata: %w", ErrKafkaUnavailable, err)
		}
	}
	return nil
}

// pause waits d and reports whether ctx is still live.
func pause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// abortOpen aborts the open transaction of a failed handover, best effort,
// before the producer is closed. Left open, it would hold the partition's
// last stable offset, and with it every read_committed reader of the
// partition (the materializer included), until the broker's transaction
// timeout. A commit still in progress cannot be aborted; librdkafka
// refuses, and the transaction timeout ends it as before.
//
// Whatever AbortTransaction answers (unless another transactional call is
// still pending, which only a commit after delivery can be), its first step
// has run or is queued ahead of anything close does: the transaction leaves
// InTransaction, so the producer is no longer unsettled.
func (p *producer) abortOpen() {
	ctx, cancel := context.WithTimeout(context.Background(), abortOpenTimeout)
	defer cancel()
	_ = p.p.AbortTransaction(ctx)
	p.unsettled = false
}

// abortOpenTimeout bounds the abort of a failed handover's transaction.
const abortOpenTimeout = 2 * time.Second

// close destroys the instance. Destroying a producer with an open
// transaction leaves that transaction to the broker, which aborts it at the
// next epoch bump or after transaction.timeout.ms.
//
// An unsettled producer is aborted first (abortOpen). Destroyed while its
// transaction is InTransaction with a partition not yet registered,
// librdkafka (2.11) can abort the whole process with
// "rd_kafka_txn_handle_AddPartitionsToTxn: Assertion
// 'rk->rk_eos.txn_req_cnt > 0' failed": the main thread's registration
// timer may send the transaction's first AddPartitionsToTxn during
// rd_kafka_destroy, and counts it in txn_req_cnt only after queueing it
// (rd_kafka_txn_register_partitions), while the terminating coordinator
// thread fails queued requests with _DESTROY and runs their response
// handler itself, unsynchronised (rd_kafka_buf_callback); that handler
// asserts the count. The abort's first step moves the transaction to
// BeginAbort and clears the pending partitions, after which librdkafka
// registers nothing. Settled, aborted, committed or failed transactions
// are left as they are: no registration can be pending (librdkafka
// registers only in InTransaction and BeginCommit, and this package
// commits only after every delivery report), and an abort there could
// bump the epoch of an instance whose generation must keep it.
func (p *producer) close() {
	if p.unsettled {
		p.abortOpen()
	}
	p.p.Close()
}

// outcome classifies a Kafka error for the session (docs/design.md,
// "Produce" and "The producer keeps its epoch").
type outcome int

const (
	outcomeFenced    outcome = iota // fenced: a later generation exists; the session is dead for good
	outcomeFatal                    // fatal but no fence: the session is dead for good, the lease may still be the worker's
	outcomeAbortable                // abort the transaction; the batch failed
	outcomeRetriable                // the library says retry the same call
	outcomeUnknown                  // timeout or unknown: the outcome is ambiguous
	// outcomeEpochBump: librdkafka recovers from these by bumping the
	// epoch of the same instance when the transaction aborts (KIP-360);
	// a generation must keep the epoch its barrier names, so the session
	// ends instead.
	outcomeEpochBump
)

func classify(err error) outcome {
	var kerr kafka.Error
	if !errors.As(err, &kerr) {
		return outcomeUnknown // a deadline or cancellation: we cannot know what happened
	}
	switch {
	// Only a fence says that a later generation exists (FM37): an
	// authorisation failure or a fatal idempotence error is fatal too,
	// and ends the producer for good, but the lease may still be the
	// worker's.
	case kerr.Code() == kafka.ErrFenced, kerr.Code() == kafka.ErrProducerFenced,
		kerr.Code() == kafka.ErrInvalidProducerEpoch:
		return outcomeFenced
	case kerr.IsFatal():
		return outcomeFatal
	case epochBumping[kerr.Code()]:
		return outcomeEpochBump
	case kerr.TxnRequiresAbort():
		return outcomeAbortable
	case kerr.IsTimeout(), kerr.Code() == kafka.ErrTimedOut:
		return outcomeUnknown
	case kerr.IsRetriable():
		return outcomeRetriable
	}
	return outcomeUnknown
}

// epochBumping are the errors after which librdkafka re-initialises the
// producer id or epoch of a transactional instance: the sequence state of
// the producer is lost, unknown or out of order, or a message timed out
// inside the transaction.
var epochBumping = map[kafka.ErrorCode]bool{
	kafka.ErrUnknownProducerID:        true,
	kafka.ErrInvalidProducerIDMapping: true,
	kafka.ErrOutOfOrderSequenceNumber: true,
	kafka.ErrMsgTimedOut:              true,
}

// inspector reads transaction state from the cluster: the producer id and
// epoch bound to a transactional.id after InitTransactions (librdkafka does
// not expose them) and readiness. It uses one shared franz-go client for
// these read-only admin requests; every write goes through librdkafka.
type inspector struct {
	cl   *kgo.Client
	conn kafkaconn.Config
	// auth remembers a refused SASL login, which readiness names.
	auth *kafkaconn.AuthWatch
}

func newInspector(cfg KafkaConfig) (*inspector, error) {
	opts, err := cfg.KgoOpts()
	if err != nil {
		return nil, err
	}
	auth := &kafkaconn.AuthWatch{}
	cl, err := kgo.NewClient(append(opts, kgo.WithHooks(auth))...)
	if err != nil {
		return nil, err
	}
	return &inspector{cl: cl, conn: cfg.Config, auth: auth}, nil
}

// producerIdentity returns the producer id and epoch the coordinator holds
// for transactionalID.
func (in *inspector) producerIdentity(ctx context.Context, transactionalID string) (int64, int16, error) {
	req := kmsg.NewPtrDescribeTransactionsRequest()
	req.TransactionalIDs = []string{transactionalID}
	resp, err := req.RequestWith(ctx, in.cl)
	if err != nil {
		return 0, 0, fmt.Errorf("%w: describe transactions: %w", ErrKafkaUnavailable, err)
	}
	for _, s := range resp.TransactionStates {
		if s.TransactionalID != transactionalID {
			continue
		}
		if s.ErrorCode != 0 {
			return 0, 0, fmt.Errorf("%w: describe transactions: error code %d", ErrKafkaUnavailable, s.ErrorCode)
		}
		return s.ProducerID, s.ProducerEpoch, nil
	}
	return 0, 0, fmt.Errorf("%w: describe transactions: no state for %q", ErrKafkaUnavailable, transactionalID)
}

// ping asks the cluster for the metadata of the routes' topics and checks
// that the gateway's principal may write each (FM106) and each route's
// partition count against its topic's (FM31).
func (in *inspector) ping(ctx context.Context, routes []txnmap.Route) error {
	req := kmsg.NewPtrMetadataRequest()
	req.IncludeTopicAuthorizedOperations = true
	for _, r := range routes {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(r.Topic)
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(ctx, in.cl)
	if err != nil {
		// A refused TLS or SASL handshake says which setting to check.
		return fmt.Errorf("%w: metadata: %w", ErrKafkaUnavailable, in.auth.Explain(in.conn, err))
	}
	if err := writeDenied(resp); err != nil {
		return err
	}
	has := map[string]int32{}
	for _, t := range resp.Topics {
		if t.Topic != nil && t.ErrorCode == 0 {
			has[*t.Topic] = int32(len(t.Partitions))
		}
	}
	for _, r := range routes {
		if err := r.CheckPartitions(has[r.Topic]); err != nil {
			return fmt.Errorf("%w: %w", ErrKafkaUnavailable, err)
		}
	}
	return nil
}

// lastStable returns the last stable offset of each of parts of topic.
func (in *inspector) lastStable(ctx context.Context, topic string, parts []int32) (map[int32]int64, error) {
	lso, err := kafkaconn.LastStable(ctx, in.cl, topic, parts)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrKafkaUnavailable, err)
	}
	return lso, nil
}

func (in *inspector) close() { in.cl.Close() }
