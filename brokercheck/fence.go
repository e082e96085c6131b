package brokercheck

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/txnmap"
)

// ScratchTopicPrefix starts the name of the topic a run creates (and
// deletes): fencegate-verify-broker.<run id>.
const ScratchTopicPrefix = "fencegate-verify-broker."

// stepTimeout bounds each step of the fence checks; a healthy cluster
// answers each in well under a second.
const stepTimeout = 15 * time.Second

// The fence checks, in the order of the report.
const (
	checkEpoch     = "fence.epoch"
	checkProduce   = "fence.produce"
	checkCommit    = "fence.commit"
	checkAborted   = "fence.open-aborted"
	checkCommitted = "read.committed"
	checkMarkers   = "read.markers"
)

var fenceChecks = []string{checkEpoch, checkProduce, checkCommit, checkAborted, checkCommitted, checkMarkers}

// fenceRun is one run of the fence checks: two transactional ids, each
// with an older and a newer librdkafka producer, on one partition.
type fenceRun struct {
	cfg     Config
	topic   string
	created bool
	ids     [2]string
	results map[string]Result
	// batches are what was sent, in order; log is what the partition
	// holds (read_uncommitted, markers kept), committed what
	// read_committed returns.
	batches   []*batch
	producers []*kafka.Producer
}

// batch is a transaction's records as sent, and whether its transaction
// should commit.
type batch struct {
	label   string
	id      string // its transactional id
	records []*kafka.Message
	commit  bool
	// offsets are the acknowledged records' offsets (none: refused).
	offsets []int64
}

// Fence runs the fence checks on a scratch topic and scratch
// transactional ids, and cleans up the topic it created. The ids are left
// for the coordinator to forget (transactional.id.expiration.ms).
func Fence(ctx context.Context, cfg Config) []Result {
	run := &fenceRun{cfg: cfg, results: map[string]Result{}}
	runID := make([]byte, 4)
	_, _ = rand.Read(runID)
	for i, s := range []string{"a", "b"} {
		run.ids[i] = txnmap.IDPrefix(cfg.Prefix) + "~verify-broker:" + hex.EncodeToString(runID) + "-" + s
	}
	run.topic = cfg.ScratchTopic
	if run.topic == "" {
		run.topic = ScratchTopicPrefix + hex.EncodeToString(runID)
	}
	_ = run.do(ctx) // its reason is the ERROR result of the step that stopped it
	run.cleanup()
	out := make([]Result, 0, len(fenceChecks))
	for _, c := range fenceChecks {
		r, ok := run.results[c]
		if !ok {
			r = Result{Check: c, Subject: run.topic, Status: Error, Evidence: "not reached: the run stopped at an earlier step",
				Fix: "see the first ERROR above"}
		}
		out = append(out, r)
	}
	if r, ok := run.results["cleanup"]; ok {
		out = append(out, r)
	}
	return out
}

func (r *fenceRun) set(check string, s Status, subject, evidence string) {
	r.results[check] = Result{Check: check, Subject: subject, Status: s, Evidence: evidence}
}

func (r *fenceRun) do(ctx context.Context) error {
	if err := r.makeTopic(ctx); err != nil {
		res := Result{Check: checkEpoch, Subject: r.topic, Status: Error, Evidence: err.Error(),
			Fix: "check the connection settings (docs/security.md) and that the cluster answers"}
		if errors.Is(err, kerr.TopicAuthorizationFailed) || errors.Is(err, kerr.ClusterAuthorizationFailed) || errors.Is(err, kerr.PolicyViolation) {
			res.Fix = "grant the principal Create and Delete on topics prefixed " + ScratchTopicPrefix +
				", or make a topic it may Write, Read and Describe and name it with --scratch-topic"
		}
		r.results[checkEpoch] = res
		return errors.New("no scratch topic")
	}
	older, err := r.fenceProduce(ctx)
	if err != nil {
		return err
	}
	if err := r.fenceCommit(ctx); err != nil {
		return err
	}
	if err := r.committedAndAborted(ctx, older); err != nil {
		return err
	}
	return r.readBack(ctx)
}

func (r *fenceRun) makeTopic(ctx context.Context) error {
	if r.cfg.ScratchTopic != "" {
		return nil
	}
	sctx, cancel := context.WithTimeout(ctx, 2*stepTimeout)
	defer cancel()
	if err := r.cfg.Conn.CreateTopic(sctx, r.topic, 1, nil); err != nil {
		return err
	}
	r.created = true
	return nil
}

// fenceProduce: the older producer of id a commits C0 and leaves O open;
// the newer one's InitProducerId bumps the epoch; the older one's next
// produce (Z) must be refused. It returns the newer producer.
func (r *fenceRun) fenceProduce(ctx context.Context) (*kafka.Producer, error) {
	id := r.ids[0]
	old, err := r.initProducer(ctx, id)
	if err != nil {
		return nil, r.fail(checkEpoch, id, "InitProducerId of the first producer", err)
	}
	pid0, epoch0, err := r.describe(ctx, id)
	if err != nil {
		return nil, r.fail(checkEpoch, id, "DescribeTransactions", err)
	}
	if err := r.transaction(ctx, old, id, "C0", 2, true); err != nil {
		return nil, r.fail(checkEpoch, id, "the first producer's committed transaction", err)
	}
	if err := r.openTransaction(ctx, old, id, "O", 2); err != nil {
		return nil, r.fail(checkEpoch, id, "the first producer's open transaction", err)
	}
	newer, err := r.initProducer(ctx, id)
	if err != nil {
		return nil, r.fail(checkEpoch, id, "InitProducerId of the second producer", err)
	}
	pid1, epoch1, err := r.describe(ctx, id)
	if err != nil {
		return nil, r.fail(checkEpoch, id, "DescribeTransactions", err)
	}
	ev := fmt.Sprintf("producer id %d epoch %d, then after the second InitProducerId producer id %d epoch %d", pid0, epoch0, pid1, epoch1)
	if pid1 == pid0 && epoch1 <= epoch0 {
		r.set(checkEpoch, Fail, id, ev+": the epoch did not move")
	} else {
		r.set(checkEpoch, Pass, id, ev)
	}
	r.refusedAt(ctx, old, id, checkProduce, "Z")
	return newer, nil
}

// refusedAt produces one record (label) with the older producer old and
// records whether the broker refused it.
func (r *fenceRun) refusedAt(ctx context.Context, old *kafka.Producer, id, check, label string) {
	b := r.newBatch(id, label, 1, false)
	sctx, cancel := context.WithTimeout(ctx, stepTimeout)
	defer cancel()
	err := r.send(sctx, old, b)
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		r.set(check, Warn, id, fmt.Sprintf("the older producer's produce was neither acknowledged nor refused within %s", stepTimeout))
	case err != nil:
		r.set(check, Pass, id, "the older producer's next produce was refused: "+err.Error())
	default:
		r.set(check, Fail, id, fmt.Sprintf("the older producer's produce after the bump was acknowledged at offset %d", b.offsets[0]))
	}
}

// fenceCommit: the older producer of id b leaves O2 open, the newer one
// bumps the epoch, and the older one's commit must be refused.
func (r *fenceRun) fenceCommit(ctx context.Context) error {
	id := r.ids[1]
	old, err := r.initProducer(ctx, id)
	if err != nil {
		return r.fail(checkCommit, id, "InitProducerId", err)
	}
	if err := r.openTransaction(ctx, old, id, "O2", 2); err != nil {
		return r.fail(checkCommit, id, "the first producer's open transaction", err)
	}
	if _, err := r.initProducer(ctx, id); err != nil {
		return r.fail(checkCommit, id, "InitProducerId of the second producer", err)
	}
	sctx, cancel := context.WithTimeout(ctx, stepTimeout)
	defer cancel()
	if err := old.CommitTransaction(sctx); err != nil {
		r.set(checkCommit, Pass, id, "the older producer's commit of its open transaction was refused: "+err.Error())
	} else {
		r.set(checkCommit, Fail, id, "the older producer committed its transaction after the second InitProducerId")
	}
	return nil
}

// committedAndAborted: the newer producer of id a commits C1, aborts A1
// and commits C2.
func (r *fenceRun) committedAndAborted(ctx context.Context, p *kafka.Producer) error {
	id := r.ids[0]
	for _, t := range []struct {
		label  string
		commit bool
	}{{"C1", true}, {"A1", false}, {"C2", true}} {
		if err := r.transaction(ctx, p, id, t.label, 3, t.commit); err != nil {
			return r.fail(checkCommitted, id, "the newer producer's transaction "+t.label, err)
		}
	}
	return nil
}

// fail records an ERROR of check and returns it as the reason the run
// stopped.
func (r *fenceRun) fail(check, subject, step string, err error) error {
	err = fmt.Errorf("%s: %w", step, err)
	r.results[check] = Result{Check: check, Subject: subject, Status: Error, Evidence: err.Error(),
		Fix: "the evidence is the broker's or librdkafka's answer; a FAIL among the settings below (transaction.max.timeout.ms, acls) may be its cause"}
	return err
}

func (r *fenceRun) initProducer(ctx context.Context, id string) (*kafka.Producer, error) {
	kc := gateway.KafkaConfig{Config: r.cfg.Conn, TransactionTimeoutMS: int(r.cfg.TransactionTimeout.Milliseconds())}
	cm, err := kc.ProducerConfig(id)
	if err != nil {
		return nil, err
	}
	// librdkafka's log lines (a fenced producer logs FATAL) go to a
	// channel drained here, not to the report's terminal: the report
	// carries the errors that matter as evidence.
	if err := cm.SetKey("go.logs.channel.enable", true); err != nil {
		return nil, err
	}
	p, err := kafka.NewProducer(cm)
	if err != nil {
		return nil, err
	}
	go drain(p.Events())
	go drain(p.Logs())
	r.producers = append(r.producers, p)
	sctx, cancel := context.WithTimeout(ctx, 2*stepTimeout)
	defer cancel()
	return p, p.InitTransactions(sctx)
}

// transaction sends one batch of n records in a transaction and commits
// or aborts it.
func (r *fenceRun) transaction(ctx context.Context, p *kafka.Producer, id, label string, n int, commit bool) error {
	if err := r.openTransaction(ctx, p, id, label, n); err != nil {
		return err
	}
	r.batches[len(r.batches)-1].commit = commit
	sctx, cancel := context.WithTimeout(ctx, stepTimeout)
	defer cancel()
	if commit {
		return p.CommitTransaction(sctx)
	}
	return p.AbortTransaction(sctx)
}

// openTransaction begins a transaction and sends one batch of n records
// in it, waiting for their acknowledgements.
func (r *fenceRun) openTransaction(ctx context.Context, p *kafka.Producer, id, label string, n int) error {
	if err := p.BeginTransaction(); err != nil {
		return err
	}
	sctx, cancel := context.WithTimeout(ctx, stepTimeout)
	defer cancel()
	return r.send(sctx, p, r.newBatch(id, label, n, false))
}

// newBatch makes and remembers n records labelled label, each with two
// headers, one of them binary.
func (r *fenceRun) newBatch(id, label string, n int, commit bool) *batch {
	b := &batch{label: label, id: id, commit: commit}
	for i := range n {
		b.records = append(b.records, &kafka.Message{
			TopicPartition: kafka.TopicPartition{Topic: &r.topic, Partition: 0},
			Key:            fmt.Appendf(nil, "%s-%d", label, i),
			Value:          fmt.Appendf(nil, "fencegate verify-broker %s record %d of %d", label, i+1, n),
			Headers: []kafka.Header{{Key: "fencegate-verify-batch", Value: []byte(label)},
				{Key: "fencegate-verify-bytes", Value: []byte{0, 0xff, byte(i), '\n'}}},
		})
	}
	r.batches = append(r.batches, b)
	return b
}

// send produces b's records and waits for every acknowledgement; the
// offsets are kept in b.
func (r *fenceRun) send(ctx context.Context, p *kafka.Producer, b *batch) error {
	dch := make(chan kafka.Event, len(b.records))
	for _, m := range b.records {
		if err := p.Produce(m, dch); err != nil {
			return err
		}
	}
	offsets := make([]int64, 0, len(b.records))
	for range b.records {
		select {
		case ev := <-dch:
			m, ok := ev.(*kafka.Message)
			if !ok {
				return fmt.Errorf("unexpected delivery event %v", ev)
			}
			if m.TopicPartition.Error != nil {
				return m.TopicPartition.Error
			}
			offsets = append(offsets, int64(m.TopicPartition.Offset))
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	slices.Sort(offsets)
	b.offsets = offsets
	return nil
}

// describe returns id's producer id and epoch as its coordinator has them.
func (r *fenceRun) describe(ctx context.Context, id string) (int64, int16, error) {
	var pid int64
	var epoch int16
	err := r.withClient(ctx, func(ctx context.Context, cl *kgo.Client) error {
		req := kmsg.NewPtrDescribeTransactionsRequest()
		req.TransactionalIDs = []string{id}
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			return err
		}
		if len(resp.TransactionStates) != 1 {
			return fmt.Errorf("%d states for one id", len(resp.TransactionStates))
		}
		s := resp.TransactionStates[0]
		if err := kerr.ErrorForCode(s.ErrorCode); err != nil {
			return err
		}
		pid, epoch = s.ProducerID, s.ProducerEpoch
		return nil
	})
	return pid, epoch, err
}

// withClient runs fn with a franz-go client of the connection (opts
// added) and a context of one step.
func (r *fenceRun) withClient(ctx context.Context, fn func(context.Context, *kgo.Client) error, opts ...kgo.Opt) error {
	base, err := r.cfg.Conn.KgoOpts()
	if err != nil {
		return err
	}
	cl, err := kgo.NewClient(append(base, opts...)...)
	if err != nil {
		return err
	}
	defer cl.Close()
	sctx, cancel := context.WithTimeout(ctx, stepTimeout)
	defer cancel()
	return r.cfg.Conn.Explain(fn(sctx, cl))
}

func drain[T any](ch chan T) {
	for range ch {
	}
}

// cleanup closes every producer and deletes the topic the run created.
func (r *fenceRun) cleanup() {
	for _, p := range r.producers {
		p.Close()
	}
	if r.created {
		ctx, cancel := context.WithTimeout(context.Background(), 2*stepTimeout)
		defer cancel()
		if err := r.cfg.Conn.DeleteTopic(ctx, r.topic); err != nil {
			r.results["cleanup"] = Result{Check: "cleanup", Subject: r.topic, Status: Warn, Evidence: err.Error(),
				Fix: "delete the topic by hand"}
		}
	}
}
