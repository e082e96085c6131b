package stack

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/kafkaconn"
)

// TestChildSecretsNotInArgv: the harness starts gateway children with the
// barrier key and the SASL password in their environment, never in argv
// (readable by every user in /proc/<pid>/cmdline), and with the whole
// Kafka connection as flags.
func TestChildSecretsNotInArgv(t *testing.T) {
	t.Parallel()
	s := &Stack{DatabaseURL: "postgres://x", Kafka: kafkaconn.Config{Brokers: "127.0.0.1:1", SecurityProtocol: kafkaconn.SASLSSL,
		SASLMechanism: kafkaconn.MechanismSCRAMSHA256, SASLUser: "u", SASLPassword: "sasl-secret-42", CAFile: "/ca.pem"}}
	c, err := newChildGateway(s, "fencegate", "/cfg.yaml", "r0", slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	argv := strings.Join(c.args, " ")
	for _, secret := range []string{barrierKey, "sasl-secret-42"} {
		if strings.Contains(argv, secret) {
			t.Errorf("a secret is in the child's argv: %s", argv)
		}
	}
	env := strings.Join(c.env, "\n")
	if !strings.Contains(env, "FENCEGATE_BARRIER_KEY="+barrierKey) || !strings.Contains(env, "FENCEGATE_KAFKA_SASL_PASSWORD=sasl-secret-42") {
		t.Error("the child's environment lacks the barrier key or the SASL password")
	}
	for _, flag := range []string{"--kafka-security-protocol SASL_SSL", "--kafka-sasl-mechanism SCRAM-SHA-256", "--kafka-ca-file /ca.pem"} {
		if !strings.Contains(argv, flag) {
			t.Errorf("the child's argv lacks %q: %s", flag, argv)
		}
	}
}
