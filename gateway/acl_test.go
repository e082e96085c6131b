package gateway_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/internal/kafkatest"
	"github.com/fencegate/fencegate/kafkaconn"
	"github.com/fencegate/fencegate/txnmap"
	"github.com/fencegate/fencegate/verify"
)

const scram = "SCRAM-SHA-256"

func allow(res kmsg.ACLResourceType, name string, pat kmsg.ACLResourcePatternType, op kmsg.ACLOperation) kfake.ACL {
	return kfake.ACL{Resource: res, Name: name, Pattern: pat, Operation: op, Allow: true}
}

// gatewayACLs are what the docs tell operators to grant the gateway
// principal: write and describe the lease topic, and write and describe
// the transactional ids under the gateway's prefix.
func gatewayACLs(prefix string) []kfake.ACL {
	lit, pre := kmsg.ACLResourcePatternTypeLiteral, kmsg.ACLResourcePatternTypePrefixed
	return []kfake.ACL{
		allow(kmsg.ACLResourceTypeTopic, topic, lit, kmsg.ACLOperationWrite),
		allow(kmsg.ACLResourceTypeTopic, topic, lit, kmsg.ACLOperationDescribe),
		allow(kmsg.ACLResourceTypeTransactionalId, txnmap.IDPrefix(prefix), pre, kmsg.ACLOperationWrite),
		allow(kmsg.ACLResourceTypeTransactionalId, txnmap.IDPrefix(prefix), pre, kmsg.ACLOperationDescribe),
	}
}

// TestFM16_OnlyGatewayPrincipalWrites: with SASL and ACLs on the broker, the
// gateway principal acquires and produces; a worker principal can neither
// produce to the lease topic nor initialise the lease's transactional id.
// On an external cluster the gateway principal is the test's and the
// worker principal the one FENCEGATE_TEST_KAFKA_WORKER_* names.
func TestFM16_OnlyGatewayPrincipalWrites(t *testing.T) {
	t.Parallel()
	b := setup(t)
	gw, worker, admin := b.kafka.Conn, b.kafka.Conn, b.kafka.Conn
	if b.kafka.External() {
		worker = kafkatest.ExternalWorker(t)
	} else {
		b.useKafka(kafkatest.Start(t, topic, partitions, kfake.EnableSASL(), kfake.EnableACLs(),
			kfake.Superuser(scram, "admin", "admin-secret"),
			kfake.User(scram, "gateway", "gateway-secret", gatewayACLs(b.kafka.RouterPrefix("test"))...),
			kfake.User(scram, "worker", "worker-secret")))
		gw, worker, admin = b.kafka.Conn, b.kafka.Conn, b.kafka.Conn
		gw.SASLMechanism, gw.SASLUser, gw.SASLPassword = scram, "gateway", "gateway-secret"
		worker.SASLMechanism, worker.SASLUser, worker.SASLPassword = scram, "worker", "worker-secret"
		admin.SASLMechanism, admin.SASLUser, admin.SASLPassword = scram, "admin", "admin-secret"
	}
	r := b.newReplica(func(c *gateway.Config) { c.Kafka.Config = gw })
	token := r.mustAcquire(t, "shard:16", "w1", 30*time.Second)
	rep := r.produce(t, "shard:16", "w1", token, "via-gateway", 2)
	if rep.status != http.StatusOK {
		t.Fatalf("gateway principal produce: %d %s", rep.status, rep.raw)
	}
	workerInitTransactions(t, worker, b.txnID("shard:16"))
	workerProduce(t, worker, b.kafka.Topic, b.partitionOf("shard:16"))
	recs, err := verify.ReadPartition(admin, b.kafka.Topic, b.partitionOf("shard:16"), 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 3 || dataOf(recs, token) != 2 {
		t.Fatalf("partition holds %d records, want the barrier and the gateway's 2", len(recs))
	}
}

func workerConfig(t *testing.T, worker kafkaconn.Config) *kafka.ConfigMap {
	t.Helper()
	cm, err := worker.ConfigMap()
	if err != nil {
		t.Fatal(err)
	}
	cm["enable.metrics.push"], cm["go.logs.channel.enable"] = false, false
	return &cm
}

func workerInitTransactions(t *testing.T, worker kafkaconn.Config, transactionalID string) {
	t.Helper()
	cm := workerConfig(t, worker)
	_ = cm.SetKey("transactional.id", transactionalID)
	p, err := kafka.NewProducer(cm)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = p.InitTransactions(ctx)
	var kerr kafka.Error
	if !errors.As(err, &kerr) || kerr.Code() != kafka.ErrTransactionalIDAuthorizationFailed {
		t.Fatalf("worker InitTransactions on the lease's transactional id: %v, want authorization failure", err)
	}
}

func workerProduce(t *testing.T, worker kafkaconn.Config, topic string, partition int32) {
	t.Helper()
	cm := workerConfig(t, worker)
	_ = cm.SetKey("enable.idempotence", false)
	_ = cm.SetKey("message.timeout.ms", 10000)
	p, err := kafka.NewProducer(cm)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	tp := topic
	dch := make(chan kafka.Event, 1)
	if err := p.Produce(&kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &tp, Partition: partition},
		Value: []byte("direct")}, dch); err != nil {
		return // refused locally: fine
	}
	m := (<-dch).(*kafka.Message)
	var kerr kafka.Error
	if !errors.As(m.TopicPartition.Error, &kerr) || kerr.Code() != kafka.ErrTopicAuthorizationFailed {
		t.Fatalf("worker produce to the lease topic: %v, want topic authorization failure", m.TopicPartition.Error)
	}
}
