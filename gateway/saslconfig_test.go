package gateway_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/internal/kafkatest"
	"github.com/fencegate/fencegate/kafkaconn"
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
