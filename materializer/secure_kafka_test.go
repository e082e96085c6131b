package materializer_test

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/fencegate/fencegate/internal/kafkatest"
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
