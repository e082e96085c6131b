package gateway_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/kafkatest"
	"github.com/fencegate/fencegate/kafkaconn"
)

// TestKafkaOverTLS: the gateway's producers (librdkafka) and its inspector
// (franz-go) reach a cluster that speaks only TLS, with a CA made in the
// test, with and without SASL and with a client certificate; a worker's
// life (acquire, produce, new generation, produce) holds I2 and I3, read
// back over the same connection (verify's librdkafka consumer and
// franz-go log reader).
func TestKafkaOverTLS(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		o    func(t *testing.T) kafkatest.TLSOptions
	}{
		{"SSL", func(*testing.T) kafkatest.TLSOptions { return kafkatest.TLSOptions{} }},
		{"SSL/mTLS", func(t *testing.T) kafkatest.TLSOptions {
			return kafkatest.TLSOptions{ClientCA: kafkatest.NewCA(t, "clients")}
		}},
		{"SASL_SSL/SCRAM-SHA-512/mTLS", func(t *testing.T) kafkatest.TLSOptions {
			return kafkatest.TLSOptions{ClientCA: kafkatest.NewCA(t, "clients"),
				SASL: kafkaconn.MechanismSCRAMSHA512, User: "gateway", Password: "gateway-secret"}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			b.useKafka(kafkatest.StartTLS(t, kafkatest.NewCA(t, "brokers"), c.o(t), topic, partitions))
			r := b.newReplica(nil)
			if rep := r.do(t, "GET", "/readyz", nil); rep.status != http.StatusOK {
				t.Fatalf("readyz over %s: %d %s", c.name, rep.status, rep.raw)
			}
			log := &ackLog{}
			const lease = "shard:3"
			tok := r.mustAcquire(t, lease, "w1", 30*time.Second)
			b.mustProduce(t, r, log, lease, "w1", tok, "b-1", 3)
			rep := r.regenerate(t, lease, "w1", tok, 30*time.Second)
			if rep.status != http.StatusCreated {
				t.Fatalf("new generation: %d %s", rep.status, rep.raw)
			}
			b.mustProduce(t, r, log, lease, "w1", rep.int("token"), "b-2", 2)
			if recs := b.checkInvariants(t, lease, log); len(recs) != 2+3+2 {
				t.Fatalf("read %d records over TLS, want 2 barriers and 5 data records", len(recs))
			}
		})
	}
}

// TestKafkaWrongCAFailsClosed: a gateway given another CA than the one
// that signed the brokers' certificate grants nothing (acquire 503
// kafka_unavailable: no epoch bump happened), and readiness says which
// setting to check.
func TestKafkaWrongCAFailsClosed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.useKafka(kafkatest.StartTLS(t, kafkatest.NewCA(t, "brokers"), kafkatest.TLSOptions{}, topic, partitions))
	b.kafka.Conn.CAFile = kafkatest.NewCA(t, "not-the-brokers").CertFile
	r := b.newReplica(nil)
	rep := r.do(t, "GET", "/readyz", nil)
	if rep.status != http.StatusServiceUnavailable || rep.code() != "kafka_unavailable" ||
		!strings.Contains(string(rep.raw), "not signed by a CA in") {
		t.Fatalf("readyz with the wrong CA: %d %s", rep.status, rep.raw)
	}
	t.Logf("readyz: %s", rep.raw)
	rep = r.acquire(t, "shard:3", "w1", 4*time.Second)
	if rep.status != http.StatusServiceUnavailable || rep.code() != "kafka_unavailable" {
		t.Fatalf("acquire with the wrong CA: %d %s", rep.status, rep.raw)
	}
}
