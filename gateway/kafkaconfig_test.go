package gateway

import (
	"strings"
	"testing"

	"github.com/fencegate/fencegate/kafkaconn"
)

// TestProducerConfigKeepsTheConnection: a producer's properties carry the
// connection's security settings, and Extra cannot weaken them for
// producers alone.
func TestProducerConfigKeepsTheConnection(t *testing.T) {
	t.Parallel()
	c := KafkaConfig{Config: kafkaconn.Config{Brokers: "b:9093", SecurityProtocol: kafkaconn.SASLSSL,
		SASLMechanism: kafkaconn.MechanismSCRAMSHA512, SASLUser: "gw", SASLPassword: "pw"}, TransactionTimeoutMS: 5000,
		Extra: map[string]string{"linger.ms": "5"}}
	cm, err := c.producerConfig("fencegate/t/shard:1")
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]any{"security.protocol": "sasl_ssl", "sasl.mechanism": "SCRAM-SHA-512",
		"ssl.endpoint.identification.algorithm": "https", "transactional.id": "fencegate/t/shard:1", "linger.ms": "5"} {
		if got := (*cm)[k]; got != want {
			t.Errorf("%s = %v, want %v", k, got, want)
		}
	}
	for _, k := range []string{"security.protocol", "ssl.endpoint.identification.algorithm", "sasl.mechanism", "bootstrap.servers"} {
		c.Extra = map[string]string{k: "x"}
		if _, err := c.producerConfig("t"); err == nil || !strings.Contains(err.Error(), "may not set") {
			t.Errorf("Extra %s: %v", k, err)
		}
	}
}
