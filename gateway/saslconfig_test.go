package gateway_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/internal/kafkatest"
	"github.com/fencegate/fencegate/kafkaconn"
	"github.com/fencegate/fencegate/txnmap"
)

// TestFM32_SASLMisconfigurationNamed: a gateway whose SCRAM login the
// broker refuses (wrong password) says so in /readyz, naming SASL, the
// mechanism and the user, not "context deadline exceeded"; a SASL user
// without any password is refused before a gateway is built.
func TestFM32_SASLMisconfigurationNamed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.useKafka(kafkatest.StartTLS(t, kafkatest.NewCA(t, "brokers"), kafkatest.TLSOptions{
		SASL: kafkaconn.MechanismSCRAMSHA512, User: "gateway", Password: "gateway-secret"}, topic, partitions))
	b.kafka.Conn.SASLPassword = "not-the-password"
	r := b.newReplica(nil)
	rep := r.do(t, "GET", "/readyz", nil)
	t.Logf("readyz: %d %s", rep.status, rep.raw)
	if rep.status != http.StatusServiceUnavailable || rep.code() != "kafka_unavailable" ||
		!strings.Contains(string(rep.raw), "SASL "+kafkaconn.MechanismSCRAMSHA512+` as \"gateway\" refused`) {
		t.Fatalf("readyz with a wrong SASL password: %d %s", rep.status, rep.raw)
	}
	noPassword := b.kafka.Conn
	noPassword.SASLPassword = ""
	if err := noPassword.Validate(); err == nil || !strings.Contains(err.Error(), "no SASL password") {
		t.Fatalf("a SASL user without a password validates: %v", err)
	}
}

// TestFM31_ReadyzNamesRoutePartitionMismatch: a gateway whose route
// names more partitions than its topic has is not ready, and /readyz
// says which route and both counts (a `serve` that could not check at
// start, the cluster not reachable yet, learns it here).
func TestFM31_ReadyzNamesRoutePartitionMismatch(t *testing.T) {
	t.Parallel()
	b := setup(t)
	router, err := txnmap.NewRouter(b.kafka.RouterPrefix("test"), []txnmap.Route{{Pattern: "shard:*", Topic: b.kafka.Topic, Partitions: 2 * partitions}})
	if err != nil {
		t.Fatal(err)
	}
	b.router = router
	rep := b.newReplica(nil).do(t, "GET", "/readyz", nil)
	t.Logf("readyz: %d %s", rep.status, rep.raw)
	want := fmt.Sprintf(`route \"shard:*\" names %d partitions but topic %s has %d`, 2*partitions, b.kafka.Topic, partitions)
	if rep.status != http.StatusServiceUnavailable || rep.code() != "kafka_unavailable" || !strings.Contains(string(rep.raw), want) {
		t.Fatalf("readyz with a route of %d partitions on a topic of %d: %d %s", 2*partitions, partitions, rep.status, rep.raw)
	}
}
