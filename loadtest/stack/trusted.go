package stack

import (
	"context"
	"errors"
	"log/slog"
	"syscall"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

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
	if s.separate == nil || s.separate.mat == nil {
		return errors.New("no materializer child to kill")
	}
	old := s.separate.mat
	if err := syscall.Kill(old.pid(), syscall.SIGKILL); err != nil {
		return err
	}
	_ = old.cmd.Wait()
	mat, err := startMaterializerChild(ctx, s, s.separate.exe, s.separate.cfg)
	if err != nil {
		return err
	}
	s.separate.setMat(mat)
	return nil
}

// TrustedOffsets are the trusted sink's committed offsets of the lease
// topic, per partition (stable offsets only: none of an open
// transaction).
func (s *Stack) TrustedOffsets(ctx context.Context) (map[int32]int64, error) {
	cm, err := s.Kafka.ConfigMap()
	if err != nil {
		return nil, err
	}
	cm["enable.metrics.push"] = false
	admin, err := kafka.NewAdminClient(&cm)
	if err != nil {
		return nil, err
	}
	defer admin.Close()
	topic := s.Topic()
	var tps []kafka.TopicPartition
	for p := range int32(Partitions) {
		tps = append(tps, kafka.TopicPartition{Topic: &topic, Partition: p})
	}
	res, err := admin.ListConsumerGroupOffsets(ctx, []kafka.ConsumerGroupTopicPartitions{{Group: s.TrustedGroup(), Partitions: tps}},
		kafka.SetAdminRequireStableOffsets(true))
	if err != nil {
		return nil, err
	}
	out := map[int32]int64{}
	for _, g := range res.ConsumerGroupsTopicPartitions {
		for _, tp := range g.Partitions {
			if tp.Error == nil && tp.Offset >= 0 {
				out[tp.Partition] = int64(tp.Offset)
			}
		}
	}
	return out, nil
}
