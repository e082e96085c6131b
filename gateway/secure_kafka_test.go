package gateway_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/internal/kafkatest"
	"github.com/fencegate/fencegate/kafkaconn"
	"github.com/fencegate/fencegate/txnmap"
	"github.com/fencegate/fencegate/verify"
)

// The tests of this file run on kafka.sh's secured Apache Kafka broker
// (kafkatest.SharedSecure: SASL_SSL with SCRAM-SHA-512 and OAUTHBEARER,
// an mTLS listener, the StandardAuthorizer with
// allow.everyone.if.no.acl.found=false), one broker for the package's
// test binary. Its authorizer, not the embedded broker's, judges them.

// gatewayGrants are the gateway principal's ACLs of docs/security.md, the
// least Apache Kafka 4.4 lets it work with: Write on each route's topic
// and Write on its transactional ids (prefixed). Describe on both is
// implied by Write; IdempotentWrite on the cluster is not asked of a
// transactional producer (TestFM106_GatewayWithoutAnACLIsNamed proves
// both).
func gatewayGrants(principal, topic, txnPrefix string) []kafkatest.ACL {
	return []kafkatest.ACL{
		{Principal: principal, Resource: kmsg.ACLResourceTypeTopic, Name: topic, Operation: kmsg.ACLOperationWrite},
		{Principal: principal, Resource: kmsg.ACLResourceTypeTransactionalId, Name: txnPrefix, Prefixed: true, Operation: kmsg.ACLOperationWrite},
	}
}

// secureBundle is a test bundle whose lease topic lives on the secured
// broker, reached as the gateway principal with conn, granted gatewayGrants.
func secureBundle(t *testing.T, s *kafkatest.Secure, conn kafkaconn.Config, grant bool) *testBundle {
	t.Helper()
	b := setup(t)
	b.useKafka(s.NewCluster(t, "secure", partitions, conn))
	if grant {
		s.Grant(t, b.gatewayGrants()...)
	}
	return b
}

func (b *testBundle) gatewayGrants() []kafkatest.ACL {
	return gatewayGrants(kafkatest.PrincipalGateway, b.kafka.Topic, txnmap.IDPrefix(b.kafka.RouterPrefix("test")))
}

// TestFM105_DirectWorkerRefusedByApacheKafka: a worker that connects to
// the secured Apache Kafka broker itself, with no credentials or as the
// worker principal (SCRAM, its certificate, an OAUTHBEARER token), cannot
// produce to a lease's topic and cannot InitProducerId on the lease's
// transactional id, so it cannot fence the gateway: the gateway's
// generation produces on afterwards, and the partition holds only what
// the gateway wrote.
func TestFM105_DirectWorkerRefusedByApacheKafka(t *testing.T) {
	s := kafkatest.SharedSecure(t)
	b := secureBundle(t, s, s.SCRAM(kafkatest.PrincipalGateway), true)
	r := b.newReplica(func(c *gateway.Config) { c.Kafka.Config = b.kafka.Conn })
	const lease = "shard:16"
	token := r.mustAcquire(t, lease, "w1", time.Minute)
	if rep := r.produce(t, lease, "w1", token, "before", 2); rep.status != http.StatusOK {
		t.Fatalf("gateway produce: %d %s", rep.status, rep.raw)
	}
	s.Issuer.Register("worker-app", kafkatest.IssuerClient{Secret: "worker-app-secret", Subject: kafkatest.PrincipalWorker})
	anon := s.SCRAM(kafkatest.PrincipalWorker)
	anon.SecurityProtocol, anon.SASLMechanism, anon.SASLUser, anon.SASLPasswordFile = kafkaconn.SSL, "", "", ""
	anonMTLS := s.MTLS(kafkatest.PrincipalWorker)
	anonMTLS.CertFile, anonMTLS.KeyFile = "", ""
	for _, tc := range []struct {
		name string
		conn kafkaconn.Config
		// authenticated: the broker knows the principal and its
		// authorizer answers; else the connection itself is refused.
		authenticated bool
	}{
		{"no credentials, TLS to the SASL_SSL listener", anon, false},
		{"no credentials, TLS without a certificate to the mTLS listener", anonMTLS, false},
		{"worker principal, SCRAM-SHA-512", s.SCRAM(kafkatest.PrincipalWorker), true},
		{"worker principal, its client certificate", s.MTLS(kafkatest.PrincipalWorker), true},
		{"worker principal, an OAUTHBEARER token", s.OAuth(s.Issuer.TokenURL(), "worker-app", "worker-app-secret"), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			initErr := directInitFails(t, tc.conn, b.txnID(lease))
			produceErr := directProduceFails(t, tc.conn, b.kafka.Topic, b.partitionOf(lease))
			t.Logf("InitTransactions: %v; produce: %v", initErr, produceErr)
			if !tc.authenticated {
				return
			}
			if code(initErr) != kafka.ErrTransactionalIDAuthorizationFailed || code(produceErr) != kafka.ErrTopicAuthorizationFailed {
				t.Fatalf("InitTransactions %v, produce %v: want TRANSACTIONAL_ID_AUTHORIZATION_FAILED and TOPIC_AUTHORIZATION_FAILED", initErr, produceErr)
			}
		})
	}
	if rep := r.produce(t, lease, "w1", token, "after", 2); rep.status != http.StatusOK {
		t.Fatalf("gateway produce after the direct attempts: %d %s (a direct worker fenced it?)", rep.status, rep.raw)
	}
	recs, err := verify.ReadPartition(s.Conn, b.kafka.Topic, b.partitionOf(lease), 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 5 || dataOf(recs, token) != 4 {
		t.Fatalf("partition holds %d records, want the barrier and the gateway's 4", len(recs))
	}
}

// code is the librdkafka error code of err, 0 for another error.
func code(err error) kafka.ErrorCode {
	var kerr kafka.Error
	if errors.As(err, &kerr) {
		return kerr.Code()
	}
	return 0
}

// directInitFails asserts that InitTransactions on id fails for conn
// within its deadline, and returns librdkafka's error.
func directInitFails(t *testing.T, conn kafkaconn.Config, id string) error {
	t.Helper()
	cm := workerConfig(t, conn)
	_ = cm.SetKey("transactional.id", id)
	p, err := kafka.NewProducer(cm)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.InitTransactions(ctx); err != nil {
		return err
	}
	t.Fatalf("InitTransactions on %s succeeded without credentials", id)
	return nil
}

// directProduceFails asserts that a record sent with conn is not
// delivered, and returns librdkafka's delivery error.
func directProduceFails(t *testing.T, conn kafkaconn.Config, topic string, partition int32) error {
	t.Helper()
	cm := workerConfig(t, conn)
	_ = cm.SetKey("enable.idempotence", false)
	_ = cm.SetKey("message.timeout.ms", 5000)
	p, err := kafka.NewProducer(cm)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	dch := make(chan kafka.Event, 1)
	if err := p.Produce(&kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: partition},
		Value: []byte("direct")}, dch); err != nil {
		return err
	}
	m := (<-dch).(*kafka.Message)
	if m.TopicPartition.Error == nil {
		t.Fatalf("a record was delivered to %s without credentials", topic)
	}
	return m.TopicPartition.Error
}

// TestFM106_GatewayWithoutAnACLIsNamed: on the secured Apache Kafka
// broker, the gateway works with exactly the grants docs/security.md
// lists, and without either of them it says which grant is missing:
// readiness is false naming it, the acquire answers 503 kafka_unavailable
// naming it (never fenced, within the handover budget), and
// fencegate_kafka_refused_total{reason="acl"} counts the refused handover. The ACLs the
// docs call implied or unneeded (Describe on the topic and on the
// transactional ids, IdempotentWrite on the cluster) are not granted in
// the first subtest, which works.
func TestFM106_GatewayWithoutAnACLIsNamed(t *testing.T) {
	s := kafkatest.SharedSecure(t)
	t.Run("the listed grants suffice", func(t *testing.T) {
		b := secureBundle(t, s, s.SCRAM(kafkatest.PrincipalGateway), true)
		r := b.newReplica(func(c *gateway.Config) { c.Kafka.Config = b.kafka.Conn })
		if err := ready(r); err != nil {
			t.Fatalf("readiness with the listed grants: %v", err)
		}
		token := r.mustAcquire(t, "shard:16", "w1", time.Minute)
		if rep := r.produce(t, "shard:16", "w1", token, "b1", 2); rep.status != http.StatusOK {
			t.Fatalf("produce with the listed grants: %d %s", rep.status, rep.raw)
		}
	})
	for i, want := range []string{"grant it Write on Topic", "grant it Write on TransactionalId"} {
		t.Run("without "+strings.TrimPrefix(want, "grant it "), func(t *testing.T) {
			b := secureBundle(t, s, s.SCRAM(kafkatest.PrincipalGateway), false)
			grants := b.gatewayGrants()
			s.Grant(t, append(grants[:i:i], grants[i+1:]...)...)
			mod, serve := withMetrics(t)
			r := b.newReplica(func(c *gateway.Config) { c.Kafka.Config = b.kafka.Conn; mod(c) })
			serve(r)
			if err := ready(r); err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("readiness without %s: %v, want it named", grants[i], err)
			}
			start := time.Now()
			rep := r.acquire(t, "shard:16", "w1", 30*time.Second)
			t.Logf("acquire without %s, after %v: %d %s", grants[i], time.Since(start).Round(time.Millisecond), rep.status, rep.raw)
			if rep.status != http.StatusServiceUnavailable || rep.code() != string(gateway.CodeKafkaUnavailable) ||
				!strings.Contains(string(rep.raw), want) {
				t.Fatalf("acquire without %s: %d %s, want 503 kafka_unavailable naming the grant", grants[i], rep.status, rep.raw)
			}
			if n, _ := scrapeMetrics(t, r.metricsURL).value("fencegate_kafka_refused_total", map[string]string{"reason": "acl"}); n != 1 {
				t.Fatalf("fencegate_kafka_refused_total{reason=acl} = %v, want 1", n)
			}
		})
	}
}

func ready(r *replica) error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return r.g.Ready(ctx)
}

// TestFM108_OAuthBearerTokensRefreshUnderLoad: the gateway logs in to the
// secured Apache Kafka broker with OAUTHBEARER, OIDC client credentials
// against the test's issuer, whose tokens live 20 s; the broker validates
// them against the issuer's JWKS and makes every connection log in again
// within 10 s (connections.max.reauth.ms). A generation producing batches
// back to back for longer than two token lifetimes loses none: every
// batch commits, and the issuer was asked for new tokens meanwhile.
func TestFM108_OAuthBearerTokensRefreshUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for 45 s")
	}
	s := kafkatest.SharedSecure(t)
	const id, life = "gateway-app", 20 * time.Second
	s.Issuer.Register(id, kafkatest.IssuerClient{Secret: "gateway-app-secret", Subject: kafkatest.PrincipalGateway, Lifetime: life})
	b := secureBundle(t, s, s.OAuth(s.Issuer.TokenURL(), id, "gateway-app-secret"), true)
	r := b.newReplica(func(c *gateway.Config) { c.Kafka.Config = b.kafka.Conn })
	if err := ready(r); err != nil {
		t.Fatalf("readiness over OAUTHBEARER: %v", err)
	}
	token := r.mustAcquire(t, "shard:16", "w1", time.Minute)
	issued := s.Issuer.Issued(id)
	end := time.Now().Add(2*life + 5*time.Second)
	n := 0
	for ; time.Now().Before(end); n++ {
		rep := r.produce(t, "shard:16", "w1", token, "b"+strconv.Itoa(n), 10)
		if rep.status != http.StatusOK {
			t.Fatalf("batch %d after %v of tokens living %v: %d %s", n, time.Until(end)+2*life+5*time.Second, life, rep.status, rep.raw)
		}
		if n%50 == 0 {
			if err := ready(r); err != nil {
				t.Fatalf("readiness during the run: %v", err)
			}
		}
	}
	t.Logf("%d batches committed over %v; tokens issued to %s: %d at the first batch, %d at the end",
		n, 2*life+5*time.Second, id, issued, s.Issuer.Issued(id))
	if s.Issuer.Issued(id) < issued+2 {
		t.Fatalf("the issuer gave %d tokens during the run, want at least 2 (one refresh per client)", s.Issuer.Issued(id)-issued)
	}
}

// TestFM108_OAuthBearerFailuresAreNamed: an issuer that is down, and a
// token the broker rejects (signed by a key its JWKS does not hold), give
// the gateway the errors of any refused login: readiness false naming the
// token endpoint or the refused OAUTHBEARER login, an acquire answered
// 503 kafka_unavailable naming it too, within the handover budget, never
// fenced, and fencegate_kafka_refused_total{reason="login"} counting it.
func TestFM108_OAuthBearerFailuresAreNamed(t *testing.T) {
	s := kafkatest.SharedSecure(t)
	s.Issuer.Register("gateway-rogue", kafkatest.IssuerClient{Secret: "rogue-secret", Subject: kafkatest.PrincipalGateway, Rogue: true})
	for _, tc := range []struct {
		name, tokenURL, id, secret, want string
	}{
		{"issuer down", closedURL(t) + "/token", "gateway-app", "gateway-app-secret", "token endpoint"},
		{"token rejected by the broker", s.Issuer.TokenURL(), "gateway-rogue", "rogue-secret", "SASL OAUTHBEARER"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := secureBundle(t, s, s.OAuth(tc.tokenURL, tc.id, tc.secret), true)
			mod, serve := withMetrics(t)
			r := b.newReplica(func(c *gateway.Config) { c.Kafka.Config = b.kafka.Conn; mod(c) })
			serve(r)
			if err := ready(r); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("readiness: %v, want it to name %q", err, tc.want)
			}
			start := time.Now()
			rep := r.acquire(t, "shard:16", "w1", 30*time.Second)
			t.Logf("acquire after %v: %d %s", time.Since(start).Round(time.Millisecond), rep.status, rep.raw)
			if rep.status != http.StatusServiceUnavailable || rep.code() != string(gateway.CodeKafkaUnavailable) ||
				!strings.Contains(string(rep.raw), tc.want) {
				t.Fatalf("acquire: %d %s, want 503 kafka_unavailable naming %q", rep.status, rep.raw, tc.want)
			}
			if n, _ := scrapeMetrics(t, r.metricsURL).value("fencegate_kafka_refused_total", map[string]string{"reason": "login"}); n != 1 {
				t.Fatalf("fencegate_kafka_refused_total{reason=login} = %v, want 1", n)
			}
		})
	}
}

// closedURL is the URL of a loopback port nothing listens on.
func closedURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "http://" + addr
}

// TestFM109_GatewayOverMTLSPrincipalFromCertificate: on the secured
// broker's mTLS listener the principal is the client certificate's CN.
// The gateway with its certificate (CN=gateway) and the listed grants
// acquires and produces; the same gateway before the grants is not
// ready and its acquire is refused naming the missing grant, which shows
// the broker took the principal from the certificate (the worker's
// certificate is refused in TestFM105_DirectWorkerRefusedByApacheKafka).
func TestFM109_GatewayOverMTLSPrincipalFromCertificate(t *testing.T) {
	s := kafkatest.SharedSecure(t)
	b := secureBundle(t, s, s.MTLS(kafkatest.PrincipalGateway), false)
	r := b.newReplica(func(c *gateway.Config) { c.Kafka.Config = b.kafka.Conn })
	if err := ready(r); err == nil || !strings.Contains(err.Error(), "grant it Write on Topic") {
		t.Fatalf("readiness over mTLS before the grants: %v, want the topic's grant named", err)
	}
	if rep := r.acquire(t, "shard:16", "w1", 30*time.Second); rep.status != http.StatusServiceUnavailable ||
		!strings.Contains(string(rep.raw), "grant it Write on Topic") {
		t.Fatalf("acquire over mTLS before the grants: %d %s", rep.status, rep.raw)
	}
	s.Grant(t, b.gatewayGrants()...)
	if err := ready(r); err != nil {
		t.Fatalf("readiness over mTLS with the grants: %v", err)
	}
	token := r.mustAcquire(t, "shard:17", "w1", time.Minute)
	if rep := r.produce(t, "shard:17", "w1", token, "b1", 2); rep.status != http.StatusOK {
		t.Fatalf("produce over mTLS: %d %s", rep.status, rep.raw)
	}
}
