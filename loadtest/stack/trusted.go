package stack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"syscall"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/fencegate/fencegate/materializer"
)

// TrustedName is the name of the trusted sink the harness runs
// (WithTrusted): topics LeaseTopic.TrustedName..., group
// fencegate-TrustedName.
const TrustedName = materializer.DefaultTrustedName

// WithTrusted runs the materializer with both sinks: the Postgres ledger
// and the trusted topic (docs/design.md, "The trusted topic"), so that
// the run checks both.
func WithTrusted() StackOption {
	return func(s *Stack) error {
		s.Trusted = true
		return nil
	}
}

// WithLedgerValues runs the materializer with --ledger-values v: with
// DropValues the ledger keeps metadata-only rows, and the stateful check
// reads their values back from the raw topic by digest.
func WithLedgerValues(v materializer.LedgerValues) StackOption {
	return func(s *Stack) error {
		s.LedgerValues = v
		return nil
	}
}

// TrustedTopic is the trusted topic of the stack's lease topic.
func (s *Stack) TrustedTopic() string { return s.Topic() + "." + TrustedName }

// TrustedGroup is the trusted sink's consumer group.
func (s *Stack) TrustedGroup() string { return "fencegate-" + TrustedName }

// startTrusted runs m's trusted sink under supervise until the stack
// closes.
func (s *Stack) startTrusted(ctx context.Context, m *materializer.Materializer, log *slog.Logger) error {
	ts, err := m.Trusted(materializer.TrustedConfig{Name: TrustedName})
	if err != nil {
		return err
	}
	tctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan error, 1)
	go func() { done <- supervise(tctx, ts.Run, log.With("sink", "kafka")) }()
	s.closers = append(s.closers, func() {
		cancel()
		if err := <-done; err != nil {
			log.Error("trusted sink stopped", "error", err)
		}
	})
	return nil
}

// KillMaterializer sends SIGKILL to the materializer child (separate
// processes only), mid-chunk if it is busy, and starts it again on the
// same flags, waiting for its readiness: a crashed materializer restarted
// by its service manager.
func (s *Stack) KillMaterializer(ctx context.Context) error {
	if s.separate == nil {
		return errors.New("no materializer child to kill")
	}
	s.separate.matMu.Lock()
	old := s.separate.mat
	s.separate.mat = nil
	s.separate.matMu.Unlock()
	if old == nil {
		return errors.New("no materializer child to kill")
	}
	if err := syscall.Kill(old.pid(), syscall.SIGKILL); err != nil {
		return err
	}
	_ = old.cmd.Wait()
	// As a service manager would: start it again until it is ready (a
	// loaded machine can make one start miss its readiness deadline;
	// without a materializer nothing would ever catch up).
	var errs []error
	for attempt := 0; attempt < restartAttempts && ctx.Err() == nil; attempt++ {
		mat, err := startMaterializerChild(ctx, s, s.separate.exe, s.separate.cfg)
		if err == nil {
			s.separate.setMat(mat)
			return errors.Join(errs...) // the failed starts, if any, for the log
		}
		errs = append(errs, err)
	}
	return fmt.Errorf("the materializer child did not start again: %w", errors.Join(errs...))
}

// ToggleSecondTrusted starts a second trusted sink instance (a child
// `fencegate materialize --sinks kafka`, a dynamic member of the sink's
// group, no database) when none runs, and waits until the group's
// cooperative rebalance has given each instance partitions; when one runs
// it stops it (SIGTERM: the instance leaves the group, and its partitions
// move back). Separate processes with WithTrusted only. joined says which.
func (s *Stack) ToggleSecondTrusted(ctx context.Context) (joined bool, err error) {
	if s.separate == nil || !s.Trusted {
		return false, errors.New("a second trusted sink needs separate processes and the trusted sink")
	}
	sep := s.separate
	sep.matMu.Lock()
	second := sep.second
	sep.second = nil
	sep.matMu.Unlock()
	if second != nil {
		second.stop()
		return false, nil
	}
	c, err := startMaterializeCommand(ctx, s, sep.exe, sep.cfg,
		[]string{"--sinks", "kafka", "--trusted-name", TrustedName, "--no-checkpoint-mirror"})
	if err != nil {
		return false, err
	}
	sep.matMu.Lock()
	sep.second = c
	sep.matMu.Unlock()
	return true, s.waitTrustedMembers(ctx, 2)
}

// waitTrustedMembers waits up to 30 s until the trusted sink's group has
// n members, each assigned partitions.
func (s *Stack) waitTrustedMembers(ctx context.Context, n int) error {
	cm, err := s.Kafka.ConfigMap()
	if err != nil {
		return err
	}
	cm["enable.metrics.push"] = false
	admin, err := kafka.NewAdminClient(&cm)
	if err != nil {
		return err
	}
	defer admin.Close()
	var got int
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline) && ctx.Err() == nil; wait(ctx, 100*time.Millisecond) {
		if got = assignedMembers(ctx, admin, s.TrustedGroup()); got >= n {
			return nil
		}
	}
	return fmt.Errorf("the trusted sink's group has %d members with partitions after 30 s, want %d", got, n)
}

// assignedMembers counts group's members with partitions assigned (0 on
// an error).
func assignedMembers(ctx context.Context, admin *kafka.AdminClient, group string) int {
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	res, err := admin.DescribeConsumerGroups(dctx, []string{group})
	if err != nil || len(res.ConsumerGroupDescriptions) != 1 {
		return 0
	}
	n := 0
	for _, m := range res.ConsumerGroupDescriptions[0].Members {
		if len(m.Assignment.TopicPartitions) > 0 {
			n++
		}
	}
	return n
}

// restartAttempts bounds KillMaterializer's starts of the new child.
const restartAttempts = 5

// TrustedOffsets are the trusted sink's committed offsets of the lease
// topic, per partition: what its committed transactions moved the group
// to (an open transaction's offset is not among them). It asks without
// require_stable, read with franz-go: with it, librdkafka's admin call
// answered nothing while the sink, catching up, always had a transaction
// open, and the run took a busy sink for a stalled one; and that call
// crashed a test binary against Apache Kafka (materializer's tests).
func (s *Stack) TrustedOffsets(ctx context.Context) (map[int32]int64, error) {
	opts, err := s.Kafka.KgoOpts()
	if err != nil {
		return nil, err
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Group = s.TrustedGroup()
	rt := kmsg.NewOffsetFetchRequestTopic()
	rt.Topic = s.Topic()
	for p := range int32(Partitions) {
		rt.Partitions = append(rt.Partitions, p)
	}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err == nil {
		err = kerr.ErrorForCode(resp.ErrorCode)
	}
	if err != nil {
		return nil, err
	}
	out := map[int32]int64{}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if p.ErrorCode == 0 && p.Offset >= 0 {
				out[p.Partition] = p.Offset
			}
		}
	}
	return out, nil
}

// MaterializerRunning reports whether a materializer child is running
// (separate processes).
func (s *Stack) MaterializerRunning() bool {
	return s.separate != nil && s.separate.matPID() > 0
}
