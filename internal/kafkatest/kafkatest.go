// Package kafkatest gives each test a Kafka cluster with its topic: the
// in-process kfake broker by default, or, when FENCEGATE_TEST_KAFKA_BROKERS
// is set (make test-external), a fresh topic on that external cluster.
//
// On an external cluster every test gets its own topic (the prefix
// FENCEGATE_TEST_TOPIC_PREFIX, the name the test asked for and a random
// suffix; deleted when the test ends) and its own transactional-id prefix
// (RouterPrefix), because topics and producer epochs there outlive a test
// and other tests run beside it. A test that needs the embedded broker's
// fault injection asks for it with Fake, which skips the test on an
// external cluster with one message.
//
// It must never be imported by code that ships (only tests and the test
// tool kfakeserve), and never touch a topic it did not make: an external
// cluster is shared with other tests and, in a release check, with an
// operator's data.
package kafkatest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/fencegate/fencegate/kafkaconn"
)

// The environment of an external cluster. The names are those of
// `fencegate serve`'s connection settings (FENCEGATE_KAFKA_*) with TEST_
// after FENCEGATE_, so a test run never picks up a deployment's settings
// and never hands its own to the children it starts.
const (
	// EnvBrokers switches the suite to the external cluster.
	EnvBrokers          = "FENCEGATE_TEST_KAFKA_BROKERS"
	EnvSecurityProtocol = "FENCEGATE_TEST_KAFKA_SECURITY_PROTOCOL"
	EnvSASLMechanism    = "FENCEGATE_TEST_KAFKA_SASL_MECHANISM"
	EnvSASLUser         = "FENCEGATE_TEST_KAFKA_SASL_USER"
	EnvSASLPassword     = "FENCEGATE_TEST_KAFKA_SASL_PASSWORD"
	EnvSASLPasswordFile = "FENCEGATE_TEST_KAFKA_SASL_PASSWORD_FILE"
	EnvCAFile           = "FENCEGATE_TEST_KAFKA_CA_FILE"
	EnvCertFile         = "FENCEGATE_TEST_KAFKA_CERT_FILE"
	EnvKeyFile          = "FENCEGATE_TEST_KAFKA_KEY_FILE"
	// EnvTopicPrefix starts every topic and transactional-id prefix the
	// suite makes on the external cluster (default DefaultTopicPrefix).
	EnvTopicPrefix = "FENCEGATE_TEST_TOPIC_PREFIX"
	// The worker principal: a principal without the gateway's rights, for
	// the ACL refusal test (FM16). Its security protocol, CA and client
	// certificate are those above unless EnvWorkerCertFile/KeyFile give
	// its own certificate.
	EnvWorkerSASLUser         = "FENCEGATE_TEST_KAFKA_WORKER_SASL_USER"
	EnvWorkerSASLPassword     = "FENCEGATE_TEST_KAFKA_WORKER_SASL_PASSWORD"
	EnvWorkerSASLPasswordFile = "FENCEGATE_TEST_KAFKA_WORKER_SASL_PASSWORD_FILE"
	EnvWorkerCertFile         = "FENCEGATE_TEST_KAFKA_WORKER_CERT_FILE"
	EnvWorkerKeyFile          = "FENCEGATE_TEST_KAFKA_WORKER_KEY_FILE"
)

// DefaultTopicPrefix is the topic prefix when EnvTopicPrefix is unset.
const DefaultTopicPrefix = "fencegate-test."

// SkipFaultInjection is the message of every test skipped on an external
// cluster because it needs the embedded broker.
const SkipFaultInjection = "needs the embedded broker's fault injection (kfake ControlKey); run without " + EnvBrokers

// Cluster is a test's Kafka cluster: a kfake cluster started for the test,
// or an external cluster on which the test made its topic.
type Cluster struct {
	fake    *kfake.Cluster // nil on an external cluster
	Brokers string
	// Conn is how clients reach the cluster (PLAINTEXT unless started by
	// StartTLS or given by the environment).
	Conn kafkaconn.Config
	// Topic is the test's topic: the name it asked for on kfake, a name
	// of its own on an external cluster. Route leases to it.
	Topic string
	// suffix makes this test's names unique on an external cluster.
	suffix string
}

// Fake returns the embedded kfake cluster, for the fault injection only
// it can do (ControlKey, SleepControl, RehashCoordinators, its own SASL
// users and ACLs). On an external cluster it skips the test.
func (c *Cluster) Fake(t testing.TB) *kfake.Cluster {
	t.Helper()
	if c.fake == nil {
		t.Skip(SkipFaultInjection)
	}
	return c.fake
}

// External reports whether the cluster is the external one of the
// environment.
func (c *Cluster) External() bool { return c.fake == nil }

// RouterPrefix returns the transactional-id prefix a test's router uses:
// p on the embedded broker; on an external cluster a prefix of this test
// alone under the topic prefix, since transactional ids (and their
// producer epochs) there are shared by every test and every run.
func (c *Cluster) RouterPrefix(p string) string {
	if c.fake != nil {
		return p
	}
	return topicPrefix() + c.suffix
}

// External reports whether the environment names an external cluster.
func External() bool { return os.Getenv(EnvBrokers) != "" }

// ExternalConn returns the connection the environment describes. It fails
// t when the settings do not validate.
func ExternalConn(t testing.TB) kafkaconn.Config {
	t.Helper()
	c := kafkaconn.Config{
		Brokers: os.Getenv(EnvBrokers), SecurityProtocol: os.Getenv(EnvSecurityProtocol),
		SASLMechanism: os.Getenv(EnvSASLMechanism), SASLUser: os.Getenv(EnvSASLUser),
		SASLPassword: os.Getenv(EnvSASLPassword), SASLPasswordFile: os.Getenv(EnvSASLPasswordFile),
		CAFile: os.Getenv(EnvCAFile), CertFile: os.Getenv(EnvCertFile), KeyFile: os.Getenv(EnvKeyFile),
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("kafkatest: the external cluster of %s: %v", EnvBrokers, err)
	}
	return c
}

// ExternalWorker returns the connection of the worker principal of the
// environment (a principal the gateway's ACLs do not cover), or skips t
// when none is given.
func ExternalWorker(t testing.TB) kafkaconn.Config {
	t.Helper()
	c := ExternalConn(t)
	user, cert := os.Getenv(EnvWorkerSASLUser), os.Getenv(EnvWorkerCertFile)
	if user == "" && cert == "" {
		t.Skipf("needs a worker principal without the gateway's ACLs on the external cluster: set %s and %s (or %s), "+
			"or %s and %s for a certificate principal", EnvWorkerSASLUser, EnvWorkerSASLPassword, EnvWorkerSASLPasswordFile,
			EnvWorkerCertFile, EnvWorkerKeyFile)
	}
	if user != "" {
		c.SASLUser, c.SASLPassword, c.SASLPasswordFile = user, os.Getenv(EnvWorkerSASLPassword), os.Getenv(EnvWorkerSASLPasswordFile)
	}
	if cert != "" {
		c.CertFile, c.KeyFile = cert, os.Getenv(EnvWorkerKeyFile)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("kafkatest: the worker principal of %s: %v", EnvWorkerSASLUser, err)
	}
	return c
}

// Describe names how conn reaches its cluster: protocol, SASL mechanism
// and "mTLS" when it presents a client certificate, joined by "/" (as
// "SASL_SSL/SCRAM-SHA-512/mTLS").
func Describe(conn kafkaconn.Config) string {
	s := conn.Protocol()
	if conn.SASL() {
		s += "/" + conn.SASLMechanism
	}
	if conn.CertFile != "" {
		s += "/mTLS"
	}
	return s
}

// topicName is Kafka's alphabet for topic names.
var topicName = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)

func topicPrefix() string {
	if p := os.Getenv(EnvTopicPrefix); p != "" {
		return p
	}
	return DefaultTopicPrefix
}

// Start starts a one-broker kfake cluster with topic seeded with
// partitions partitions, closed when t ends. With an external cluster in
// the environment it makes the test's own topic there instead (Topic),
// deleted when t ends; opts configure kfake, so a test that passes any
// is skipped there (SkipFaultInjection).
func Start(t testing.TB, topic string, partitions int32, opts ...kfake.Opt) *Cluster {
	t.Helper()
	if External() {
		if len(opts) > 0 {
			(&Cluster{}).Fake(t)
		}
		return startExternal(t, ExternalConn(t), topic, partitions)
	}
	opts = append([]kfake.Opt{kfake.NumBrokers(1), kfake.SeedTopics(partitions, topic)}, opts...)
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		t.Fatalf("kafkatest: %v", err)
	}
	t.Cleanup(c.Close)
	brokers := strings.Join(c.ListenAddrs(), ",")
	return &Cluster{fake: c, Brokers: brokers, Conn: kafkaconn.Config{Brokers: brokers}, Topic: topic}
}

func startExternal(t testing.TB, conn kafkaconn.Config, topic string, partitions int32) *Cluster {
	t.Helper()
	prefix := topicPrefix()
	if !topicName.MatchString(prefix) || len(prefix) > 40 {
		t.Fatalf("kafkatest: %s=%q: at most 40 bytes of [A-Za-z0-9._-] (it starts topic names and transactional-id prefixes)",
			EnvTopicPrefix, prefix)
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	c := &Cluster{Brokers: conn.Brokers, Conn: conn, suffix: hex.EncodeToString(b)}
	c.Topic = prefix + topic + "." + c.suffix
	if os.Getenv(EnvApacheLog) != "" {
		t.Cleanup(func() { explainDeadBroker(t, conn.Brokers) })
	}
	if err := CreateTopic(conn, c.Topic, partitions); err != nil {
		t.Fatalf("kafkatest: %v", err)
	}
	t.Cleanup(func() {
		if err := DeleteTopic(conn, c.Topic); err != nil {
			t.Errorf("kafkatest: %v (delete it by hand)", err)
		}
	})
	return c
}

// CreateTopic creates topic with partitions partitions and the brokers'
// default replication, and waits until every partition has a leader.
func CreateTopic(conn kafkaconn.Config, topic string, partitions int32) error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := conn.CreateTopic(ctx, topic, partitions, nil); err != nil {
		return fmt.Errorf("%w on %s (the test principal needs Create, Describe, Read, Write and Delete on topics prefixed %s)",
			conn.Explain(err), conn, topicPrefix())
	}
	return nil
}

// DeleteTopic deletes topic; one already gone is no error.
func DeleteTopic(conn kafkaconn.Config, topic string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := conn.DeleteTopic(ctx, topic); err != nil {
		return fmt.Errorf("%w on %s", err, conn)
	}
	return nil
}

func client(conn kafkaconn.Config) (*kgo.Client, error) {
	opts, err := conn.KgoOpts()
	if err != nil {
		return nil, err
	}
	return kgo.NewClient(opts...)
}
