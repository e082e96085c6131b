package kafkaconn_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/fencegate/fencegate/internal/kafkatest"
	"github.com/fencegate/fencegate/kafkaconn"
)

// TestFM32_SASLLoginNamed: a SASL user without a password does not
// validate; a login the broker ends by closing the connection (kfake's
// answer to a wrong password) is a refused handshake naming the
// mechanism and user, never the password.
func TestFM32_SASLLoginNamed(t *testing.T) {
	t.Parallel()
	none := kafkaconn.Config{Brokers: "127.0.0.1:9092", SecurityProtocol: kafkaconn.SASLSSL,
		SASLMechanism: kafkaconn.MechanismSCRAMSHA512, SASLUser: "gateway"}
	if err := none.Validate(); err == nil || !strings.Contains(err.Error(), "no SASL password") {
		t.Fatalf("SASL user without a password: %v", err)
	}
	if kafkatest.External() {
		t.Skip(kafkatest.SkipFaultInjection) // a real broker answers SASL_AUTHENTICATION_FAILED (TestRefusedHandshakes)
	}
	o := kafkatest.TLSOptions{SASL: kafkaconn.MechanismSCRAMSHA512, User: "gateway", Password: "right"}
	k := kafkatest.StartTLS(t, kafkatest.NewCA(t, "brokers"), o, topic, 1)
	wrong := k.Conn
	wrong.SASLPassword = "wrong-pw-7c1"
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := wrong.Probe(ctx)
	if !errors.Is(err, kafkaconn.ErrHandshake) || !strings.Contains(err.Error(), `SASL SCRAM-SHA-512 as "gateway" refused`) ||
		strings.Contains(err.Error(), "7c1") {
		t.Fatalf("wrong SASL password: %v", err)
	}
	if err := k.Conn.Probe(ctx); err != nil {
		t.Fatalf("right password: %v", err)
	}
}

// TestAuthWatchRemembersAFailedLoginAcrossRetries: a retried login whose
// handshake and first SCRAM step went through is not a login that went
// through: a deadline that ends the retry there is still explained as the
// refused login (under load the readiness check of
// TestFM32_SASLMisconfigurationNamed met exactly that). Only a request
// after the login, answered, clears it.
func TestAuthWatchRemembersAFailedLoginAcrossRetries(t *testing.T) {
	c := kafkaconn.Config{Brokers: "127.0.0.1:9092", SecurityProtocol: kafkaconn.SASLSSL,
		SASLMechanism: kafkaconn.MechanismSCRAMSHA512, SASLUser: "gateway", SASLPassword: "x"}
	var w kafkaconn.AuthWatch
	ok, refused := kgo.BrokerE2E{}, kgo.BrokerE2E{ReadErr: io.EOF}
	w.OnBrokerE2E(kgo.BrokerMetadata{}, kmsg.SASLHandshake.Int16(), ok)
	w.OnBrokerE2E(kgo.BrokerMetadata{}, kmsg.SASLAuthenticate.Int16(), ok)
	w.OnBrokerE2E(kgo.BrokerMetadata{}, kmsg.SASLAuthenticate.Int16(), refused)
	// The retry: handshake and the first step answered, then the deadline.
	w.OnBrokerE2E(kgo.BrokerMetadata{}, kmsg.SASLHandshake.Int16(), ok)
	w.OnBrokerE2E(kgo.BrokerMetadata{}, kmsg.SASLAuthenticate.Int16(), ok)
	if err := w.Explain(c, context.DeadlineExceeded); !errors.Is(err, kafkaconn.ErrHandshake) {
		t.Fatalf("deadline inside a retried login: %v, want the refused login", err)
	}
	w.OnBrokerE2E(kgo.BrokerMetadata{}, kmsg.Metadata.Int16(), ok)
	if err := w.Explain(c, context.DeadlineExceeded); errors.Is(err, kafkaconn.ErrHandshake) {
		t.Fatalf("after a request answered behind the login: %v, want the deadline", err)
	}
}
