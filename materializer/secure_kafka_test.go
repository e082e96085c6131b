package materializer_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/fencegate/fencegate/internal/kafkatest"
	"github.com/fencegate/fencegate/internal/syncbuf"
	"github.com/fencegate/fencegate/internal/telemetry"
	"github.com/fencegate/fencegate/kafkaconn"
	"github.com/fencegate/fencegate/materializer"
)

// materializerGrants are the materializer principal's ACLs of
// docs/security.md for the ledger sink, the least Apache Kafka 4.4 lets
// it consume with: Read on each route's topic and Read on its group
// (Describe on both is implied by Read). The ledger sink keeps its
// positions in Postgres, but librdkafka still looks its group's
// coordinator up (FindCoordinator, which needs Describe on the group) and
// reports GROUP_AUTHORIZATION_FAILED without it.
func materializerGrants(topic, group string) []kafkatest.ACL {
	m := kafkatest.PrincipalMaterializer
	return []kafkatest.ACL{
		{Principal: m, Resource: kmsg.ACLResourceTypeTopic, Name: topic, Operation: kmsg.ACLOperationRead},
		{Principal: m, Resource: kmsg.ACLResourceTypeGroup, Name: group, Operation: kmsg.ACLOperationRead},
	}
}

// TestFM107_MaterializerWithoutAnACLIsNamed: on the secured Apache Kafka
// broker (kafkatest.SharedSecure), the materializer, as its own principal
// over SCRAM-SHA-512, applies a lease's records with exactly the grants
// docs/security.md lists; without Read on the topic it applies nothing and says so: Ready fails naming the grant, rather than
// a materializer that runs, reports ready and stalls (librdkafka waits in
// silence on a partition it may not read).
func TestFM107_MaterializerWithoutAnACLIsNamed(t *testing.T) {
	s := kafkatest.SharedSecure(t)
	for _, tc := range []struct {
		name    string
		without int // index into materializerGrants; -1: none left out
		want    string
	}{
		{"the listed grants suffice", -1, ""},
		{"without Read on Topic", 0, "grant it Read on Topic"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := setupOn(t, s.NewCluster(t, "mat", partitions, s.Conn)) // the test writes as admin
			grants := materializerGrants(b.topic, "fencegate-materializer")
			if tc.without >= 0 {
				grants = append(grants[:tc.without:tc.without], grants[tc.without+1:]...)
			}
			s.Grant(t, grants...)
			last := b.write(1, bar("shard:1", 1), data("shard:1", 1, "b1", 0))
			m := b.newMaterializer(func(c *materializer.Config) {
				c.Kafka = s.SCRAM(kafkatest.PrincipalMaterializer)
				c.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
			})
			if tc.want == "" {
				b.runUntil(m, b.db, 1, last)
				return
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- m.Run(ctx) }()
			defer func() { cancel(); <-done }()
			err := waitNotReady(t, m, tc.want)
			t.Logf("Ready without the grant: %v", err)
		})
	}
}

// waitNotReady polls m.Ready until it fails naming want, for at most 30 s.
func waitNotReady(t *testing.T, m *materializer.Materializer, want string) error {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var err error
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = m.Ready(ctx)
		cancel()
		if err != nil && strings.Contains(err.Error(), want) {
			return err
		}
		<-tick.C
	}
	t.Fatalf("Ready after 30 s: %v, want it to name %q", err, want)
	return nil
}

// trustedGrants are the materializer principal's ACLs of
// docs/managed-kafka.md for the trusted sink ts on lease topic topic.
func trustedGrants(ts *materializer.TrustedSink, topic string) []kafkatest.ACL {
	m := kafkatest.PrincipalMaterializer
	acls := []kafkatest.ACL{
		{Principal: m, Resource: kmsg.ACLResourceTypeTopic, Name: topic, Operation: kmsg.ACLOperationRead},
		{Principal: m, Resource: kmsg.ACLResourceTypeGroup, Name: ts.GroupID(), Operation: kmsg.ACLOperationRead},
		{Principal: m, Resource: kmsg.ACLResourceTypeTransactionalId, Name: ts.TransactionalIDPrefix(), Prefixed: true, Operation: kmsg.ACLOperationWrite},
	}
	trusted, _, _ := ts.Topics(topic)
	for _, op := range []kmsg.ACLOperation{kmsg.ACLOperationWrite, kmsg.ACLOperationRead, kmsg.ACLOperationCreate} {
		acls = append(acls, kafkatest.ACL{Principal: m, Resource: kmsg.ACLResourceTypeTopic, Name: trusted, Prefixed: true, Operation: op})
	}
	return acls
}

// TestFM111_TrustedSinkWithoutAGrantStopsNamingIt: on the secured Apache
// Kafka broker, the trusted sink, as the materializer principal, creates
// its topics and commits a lease's records with exactly the grants
// docs/managed-kafka.md lists for it; without any one of them it stops at
// start naming the principal and the grant (never a hang, never a
// verdict). Before, without Read on its group or Write on its topics it
// ran and logged, committing nothing; without Read on the lease topic or
// Create it stopped with the broker's error only, and without its
// transactional ids with TRANSACTIONAL_ID_AUTHORIZATION_FAILED.
func TestFM111_TrustedSinkWithoutAGrantStopsNamingIt(t *testing.T) {
	s := kafkatest.SharedSecure(t)
	for _, without := range []int{-1, 0, 1, 2, 3, 4, 5} {
		name := "the listed grants suffice"
		if without >= 0 {
			name = "without " + trustedGrantNames[without]
		}
		t.Run(name, func(t *testing.T) {
			b := setupOn(t, s.NewCluster(t, "trusted", partitions, s.Conn))
			last := b.write(1, bar("shard:1", 1), data("shard:1", 1, "b1", 0), data("shard:1", 1, "b1", 1))
			// A name, hence a group, of its own: the broker's ACLs outlive each subtest.
			ts := b.newTrusted(fmt.Sprintf("trusted%d", without+1), nil, func(c *materializer.Config) {
				c.Kafka = s.SCRAM(kafkatest.PrincipalMaterializer)
				c.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
			})
			grants := trustedGrants(ts, b.topic)
			var want string
			if without >= 0 {
				want = grants[without].Grant().String()
				grants = append(grants[:without:without], grants[without+1:]...)
			}
			s.Grant(t, grants...)
			start := time.Now()
			err := runTrustedSecure(t, s, ts, b.topic, last)
			t.Logf("after %s: %v", time.Since(start).Round(time.Millisecond), err)
			switch {
			case want == "" && err != nil:
				t.Fatalf("the trusted sink stopped: %v", err)
			case want != "" && (err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "User:"+kafkatest.PrincipalMaterializer)):
				t.Fatalf("the trusted sink %s: %v, want it to stop naming User:%s and %q", name, err, kafkatest.PrincipalMaterializer, want)
			}
		})
	}
}

// trustedGrantNames name trustedGrants' entries, in order, for subtests.
var trustedGrantNames = []string{"Read on the lease Topic", "Read on Group", "Write on TransactionalId",
	"Write on Topic T.trusted", "Read on Topic T.trusted", "Create on Topic T.trusted"}

// runTrustedSecure runs ts until its group's offset of partition 1 passes
// last (nil), or until it stops (its error), for at most 90 s. The
// offset is read with franz-go: librdkafka 2.11.1's admin
// ListConsumerGroupOffsets crashed the test binary against this broker
// (SIGSEGV in rd_kafka_cgrp_op under rd_kafka_handle_OffsetFetch).
func runTrustedSecure(t *testing.T, s *kafkatest.Secure, ts *materializer.TrustedSink, topic string, last int64) error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ts.Run(ctx) }()
	defer func() { cancel(); <-done }()
	deadline := time.Now().Add(90 * time.Second)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for committedOffset(t, s.Conn, ts.GroupID(), topic, 1) <= last {
		select {
		case err := <-done:
			done <- err
			return fmt.Errorf("stopped: %w", err)
		case <-tick.C:
		}
		if time.Now().After(deadline) {
			t.Fatalf("group %s never passed offset %d", ts.GroupID(), last)
		}
	}
	return nil
}

// committedOffset is group's stable committed offset of topic's
// partition p, -1 when none.
func committedOffset(t testing.TB, conn kafkaconn.Config, group, topic string, p int32) int64 {
	t.Helper()
	opts, err := conn.KgoOpts()
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Group, req.RequireStable = group, true
	rt := kmsg.NewOffsetFetchRequestTopic()
	rt.Topic, rt.Partitions = topic, []int32{p}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil || resp.ErrorCode != 0 {
		return -1
	}
	for _, rt := range resp.Topics {
		for _, rp := range rt.Partitions {
			if rp.Partition == p && rp.ErrorCode == 0 {
				return rp.Offset
			}
		}
	}
	return -1
}

// TestFM110_MaterializerWithoutItsGroupStaysNotReady: on the secured
// Apache Kafka broker, the materializer granted Read on its topic but not
// on its consumer group gives one steady answer: Ready fails naming
// "Read on Group <group>" at every call for three of its rechecks, the
// gauge fencegate.materializer.kafka.missing_grant names the grant at 1,
// and an error line names it. Once the grant is back, Ready passes and
// stays passing, and the gauge is 0. Before, librdkafka's
// GROUP_AUTHORIZATION_FAILED set the refusal and the next recheck, which
// asked about the topics only, cleared it: readiness flapped.
func TestFM110_MaterializerWithoutItsGroupStaysNotReady(t *testing.T) {
	s := kafkatest.SharedSecure(t)
	b := setupOn(t, s.NewCluster(t, "mat-group", partitions, s.Conn))
	group := "fencegate-materializer-" + b.topic // the broker's ACLs outlive each test: a group of its own
	grants := materializerGrants(b.topic, group)
	s.Grant(t, grants[0]) // Read on the topic only
	b.write(1, bar("shard:1", 1), data("shard:1", 1, "b1", 0))
	mp, h, err := telemetry.Prometheus(telemetry.Service{Name: telemetry.Materializer})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	logs := &syncbuf.Buffer{}
	m := b.newMaterializer(func(c *materializer.Config) {
		c.Kafka = s.SCRAM(kafkatest.PrincipalMaterializer)
		c.GroupID = group
		c.MeterProvider = mp
		c.Logger = slog.New(slog.NewTextHandler(io.MultiWriter(os.Stderr, logs), &slog.HandlerOptions{Level: slog.LevelWarn}))
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	defer func() { cancel(); <-done }()

	grant := "Read on Group " + group
	missing := map[string]string{"grant": grant}
	start := time.Now()
	waitNotReady(t, m, "grant it "+grant)
	t.Logf("not ready naming %q after %s", grant, time.Since(start).Round(time.Millisecond))
	holdReadiness(t, m, "grant it "+grant, 3*materializer.DeniedRecheck)
	if got := metricValue(t, h, "fencegate_materializer_kafka_missing_grant", missing); got != 1 {
		t.Fatalf("fencegate_materializer_kafka_missing_grant%v = %v while the grant is missing, want 1", missing, got)
	}
	if !strings.Contains(logs.String(), "level=ERROR") || !strings.Contains(logs.String(), grant) {
		t.Fatalf("no error line names %q:\n%s", grant, logs.String())
	}

	s.Grant(t, grants[1])
	start = time.Now()
	waitReady(t, m)
	t.Logf("ready %s after the grant", time.Since(start).Round(time.Millisecond))
	holdReadiness(t, m, "", 2*materializer.DeniedRecheck)
	if got := metricValue(t, h, "fencegate_materializer_kafka_missing_grant", missing); got != 0 {
		t.Fatalf("fencegate_materializer_kafka_missing_grant%v = %v once granted, want 0", missing, got)
	}
}

// holdReadiness calls m.Ready every 50 ms for d: each call must fail naming
// want, or, with want empty, pass.
func holdReadiness(t *testing.T, m *materializer.Materializer, want string, d time.Duration) {
	t.Helper()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for end := time.Now().Add(d); time.Now().Before(end); <-tick.C {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := m.Ready(ctx)
		cancel()
		switch {
		case want == "" && err != nil:
			t.Fatalf("Ready failed while granted: %v", err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Fatalf("Ready while %q is missing: %v, want it to name the grant at every call", want, err)
		}
	}
}

// waitReady polls m.Ready until it passes; the deadline bounds only a
// failure.
func waitReady(t *testing.T, m *materializer.Materializer) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var err error
	for ; time.Now().Before(deadline); <-tick.C {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = m.Ready(ctx)
		cancel()
		if err == nil {
			return
		}
	}
	t.Fatalf("Ready after the grant came back: %v", err)
}
