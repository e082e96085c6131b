package kafkaconn_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/fencegate/fencegate/internal/kafkatest"
	"github.com/fencegate/fencegate/kafkaconn"
)

const topic = "conn-test"

// matrixCase is one way of reaching a cluster.
type matrixCase struct {
	name string
	tls  bool
	o    kafkatest.TLSOptions
	// sasl without TLS: SASL_PLAINTEXT.
	sasl string
}

var matrix = []matrixCase{
	{name: "PLAINTEXT"},
	{name: "SASL_PLAINTEXT/SCRAM-SHA-256", sasl: kafkaconn.MechanismSCRAMSHA256},
	{name: "SSL", tls: true},
	{name: "SSL/mTLS", tls: true, o: kafkatest.TLSOptions{ClientCA: &kafkatest.CA{}}},
	{name: "SASL_SSL/PLAIN", tls: true, o: kafkatest.TLSOptions{SASL: kafkaconn.MechanismPlain}},
	{name: "SASL_SSL/SCRAM-SHA-256", tls: true, o: kafkatest.TLSOptions{SASL: kafkaconn.MechanismSCRAMSHA256}},
	{name: "SASL_SSL/SCRAM-SHA-512", tls: true, o: kafkatest.TLSOptions{SASL: kafkaconn.MechanismSCRAMSHA512}},
	{name: "SASL_SSL/SCRAM-SHA-512/mTLS", tls: true, o: kafkatest.TLSOptions{SASL: kafkaconn.MechanismSCRAMSHA512, ClientCA: &kafkatest.CA{}}},
}

// start starts the cluster of c and returns it with the client connection.
// On an external cluster only the case it is reached with runs there.
func (c matrixCase) start(t *testing.T) *kafkatest.Cluster {
	t.Helper()
	if kafkatest.External() {
		if got := kafkatest.Describe(kafkatest.ExternalConn(t)); got != c.name {
			t.Skipf("needs a cluster reached with %s; %s is reached with %s", c.name, kafkatest.EnvBrokers, got)
		}
		return kafkatest.Start(t, topic, 1)
	}
	if !c.tls {
		if c.sasl == "" {
			return kafkatest.Start(t, topic, 1)
		}
		k := kafkatest.Start(t, topic, 1, kfake.EnableSASL(), kfake.Superuser(c.sasl, "fencegate", "s3cret-pw"))
		k.Conn.SASLMechanism, k.Conn.SASLUser, k.Conn.SASLPassword = c.sasl, "fencegate", "s3cret-pw"
		return k
	}
	o := c.o
	if o.ClientCA != nil {
		o.ClientCA = kafkatest.NewCA(t, "clients")
	}
	if o.SASL != "" {
		o.User, o.Password = "fencegate", "s3cret-pw"
	}
	return kafkatest.StartTLS(t, kafkatest.NewCA(t, "brokers"), o, topic, 1)
}

// TestMatrix: librdkafka (producer and read_committed consumer) and
// franz-go (producer and consumer) reach the cluster with every security
// protocol and SASL mechanism, from one Config; what one client wrote the
// other reads.
func TestMatrix(t *testing.T) {
	t.Parallel()
	for _, c := range matrix {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			k := c.start(t)
			if err := k.Conn.Validate(); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := k.Conn.Probe(ctx); err != nil {
				t.Fatalf("probe: %v", err)
			}
			produceConfluent(t, k.Conn, k.Topic, "from-librdkafka")
			produceKgo(ctx, t, k.Conn, k.Topic, "from-franz-go")
			want := "[from-librdkafka from-franz-go]"
			if got := fmt.Sprint(consumeKgo(ctx, t, k.Conn, k.Topic, 2)); got != want {
				t.Fatalf("franz-go read %s, want %s", got, want)
			}
			if got := fmt.Sprint(consumeConfluent(t, k.Conn, k.Topic, 2)); got != want {
				t.Fatalf("librdkafka read %s, want %s", got, want)
			}
		})
	}
}

func produceConfluent(t *testing.T, conn kafkaconn.Config, topic, value string) {
	t.Helper()
	cm, err := conn.ConfigMap()
	if err != nil {
		t.Fatal(err)
	}
	cm["message.timeout.ms"] = 20000
	cm["go.logs.channel.enable"] = false
	p, err := kafka.NewProducer(&cm)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	tp := topic
	dr := make(chan kafka.Event, 1)
	if err := p.Produce(&kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &tp, Partition: 0}, Value: []byte(value)}, dr); err != nil {
		t.Fatal(err)
	}
	m := (<-dr).(*kafka.Message)
	if m.TopicPartition.Error != nil {
		t.Fatalf("librdkafka produce: %v", m.TopicPartition.Error)
	}
}

func produceKgo(ctx context.Context, t *testing.T, conn kafkaconn.Config, topic, value string) {
	t.Helper()
	opts, err := conn.KgoOpts()
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(append(opts, kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte(value), Partition: 0}).FirstErr(); err != nil {
		t.Fatalf("franz-go produce: %v", err)
	}
}

func consumeKgo(ctx context.Context, t *testing.T, conn kafkaconn.Config, topic string, n int) []string {
	t.Helper()
	opts, err := conn.KgoOpts()
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(append(opts, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var out []string
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("franz-go consume: %v after %v", ctx.Err(), out)
		}
		for _, e := range fs.Errors() {
			t.Fatalf("franz-go consume: %v", e.Err)
		}
		fs.EachRecord(func(r *kgo.Record) { out = append(out, string(r.Value)) })
	}
	return out
}

func consumeConfluent(t *testing.T, conn kafkaconn.Config, topic string, n int) []string {
	t.Helper()
	cm, err := conn.ConfigMap()
	if err != nil {
		t.Fatal(err)
	}
	cm["group.id"] = "fencegate-conn-test"
	cm["isolation.level"] = "read_committed"
	cm["go.logs.channel.enable"] = false
	c, err := kafka.NewConsumer(&cm)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tp := topic
	if err := c.Assign([]kafka.TopicPartition{{Topic: &tp, Partition: 0, Offset: kafka.OffsetBeginning}}); err != nil {
		t.Fatal(err)
	}
	var out []string
	deadline := time.Now().Add(30 * time.Second)
	for len(out) < n && time.Now().Before(deadline) {
		switch ev := c.Poll(100).(type) {
		case *kafka.Message:
			out = append(out, string(ev.Value))
		case kafka.Error:
			if ev.IsFatal() {
				t.Fatalf("librdkafka consume: %v", ev)
			}
		}
	}
	return out
}

// TestWrongCAFailsClosed: a cluster whose certificate another CA signed is
// refused by both clients, and Probe says which setting to check. Neither
// client falls back to an unverified or plaintext connection.
func TestWrongCAFailsClosed(t *testing.T) {
	t.Parallel()
	k := kafkatest.StartTLS(t, kafkatest.NewCA(t, "brokers"), kafkatest.TLSOptions{}, topic, 1)
	conn := k.Conn
	conn.CAFile = kafkatest.NewCA(t, "someone-else").CertFile
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := conn.Probe(ctx)
	if !errors.Is(err, kafkaconn.ErrHandshake) || !strings.Contains(err.Error(), "not signed by a CA in "+conn.CAFile) ||
		!strings.Contains(err.Error(), "certificate signed by unknown authority") {
		t.Fatalf("probe with the wrong CA: %v", err)
	}
	t.Logf("franz-go, wrong CA: %v", err)

	// librdkafka: the delivery fails and its error event says why.
	cm, err := conn.ConfigMap()
	if err != nil {
		t.Fatal(err)
	}
	cm["message.timeout.ms"] = 3000
	p, err := kafka.NewProducer(&cm)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	tp := k.Topic
	dr := make(chan kafka.Event, 1)
	if err := p.Produce(&kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &tp, Partition: 0}, Value: []byte("x")}, dr); err != nil {
		t.Fatal(err)
	}
	var why string
	for m := (*kafka.Message)(nil); m == nil; {
		select {
		case ev := <-dr:
			m = ev.(*kafka.Message)
			if m.TopicPartition.Error == nil {
				t.Fatal("librdkafka delivered through a broker whose CA it was not given")
			}
		case ev := <-p.Events():
			if e, ok := ev.(kafka.Error); ok && strings.Contains(e.String(), "certificate verify failed") {
				why = e.String()
			}
		}
	}
	if why == "" {
		t.Fatal("librdkafka reported no certificate verification failure")
	}
	t.Logf("librdkafka, wrong CA: %s", why)
}

// TestRefusedHandshakes: no client certificate for an mTLS cluster is a
// handshake error; a wrong SASL password is refused (kfake closes the
// connection instead of answering SASL_AUTHENTICATION_FAILED, so only the
// refusal is checked) and its error never holds the password.
func TestRefusedHandshakes(t *testing.T) {
	t.Parallel()
	t.Run("mTLS without a client certificate", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		mtls := kafkatest.StartTLS(t, kafkatest.NewCA(t, "brokers"), kafkatest.TLSOptions{ClientCA: kafkatest.NewCA(t, "clients")}, topic, 1)
		noCert := mtls.Conn
		noCert.CertFile, noCert.KeyFile = "", ""
		if err := noCert.Probe(ctx); !errors.Is(err, kafkaconn.ErrHandshake) {
			t.Errorf("mTLS cluster without a client certificate: %v", err)
		}
	})
	t.Run("wrong SASL password", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		o := kafkatest.TLSOptions{SASL: kafkaconn.MechanismSCRAMSHA256, User: "fencegate", Password: "right"}
		if kafkatest.External() { // whichever mechanism the external cluster uses
			if c := kafkatest.ExternalConn(t); c.SASL() {
				o.SASL = c.SASLMechanism
			}
		}
		sasl := kafkatest.StartTLS(t, kafkatest.NewCA(t, "brokers"), o, topic, 1)
		wrong := sasl.Conn
		wrong.SASLPassword, wrong.SASLPasswordFile = "wrong-pw-9f3", ""
		if err := wrong.Probe(ctx); err == nil || strings.Contains(err.Error(), "9f3") {
			t.Errorf("wrong SASL password: %v", err)
		}
	})
}

// TestValidate: settings that are missing, unknown or would be ignored.
func TestValidate(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pw := filepath.Join(dir, "pw")
	if err := os.WriteFile(pw, []byte("from-a-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ca := kafkatest.NewCA(t, "v")
	b := "127.0.0.1:9092"
	for _, c := range []struct {
		name string
		c    kafkaconn.Config
		want string // "" = valid
	}{
		{"plaintext", kafkaconn.Config{Brokers: b}, ""},
		{"no brokers", kafkaconn.Config{}, "no brokers"},
		{"unknown protocol", kafkaconn.Config{Brokers: b, SecurityProtocol: "TLS"}, "none of PLAINTEXT"},
		{"lower-case protocol", kafkaconn.Config{Brokers: b, SecurityProtocol: "ssl", CAFile: ca.CertFile}, ""},
		{"mechanism implies SASL_PLAINTEXT", kafkaconn.Config{Brokers: b, SASLMechanism: "PLAIN", SASLUser: "u", SASLPassword: "p"}, ""},
		{"SASL without mechanism", kafkaconn.Config{Brokers: b, SecurityProtocol: "SASL_SSL", SASLUser: "u"}, "needs a SASL mechanism"},
		{"unknown mechanism", kafkaconn.Config{Brokers: b, SASLMechanism: "GSSAPI", SASLUser: "u"}, "none of PLAIN"},
		{"SASL without user", kafkaconn.Config{Brokers: b, SASLMechanism: "PLAIN"}, "needs a SASL user"},
		{"SASL user without SASL", kafkaconn.Config{Brokers: b, SecurityProtocol: "SSL", SASLUser: "u"}, "would be ignored"},
		{"password twice", kafkaconn.Config{Brokers: b, SASLMechanism: "PLAIN", SASLUser: "u", SASLPassword: "p", SASLPasswordFile: pw}, "give one"},
		{"password file", kafkaconn.Config{Brokers: b, SASLMechanism: "PLAIN", SASLUser: "u", SASLPasswordFile: pw}, ""},
		{"missing password file", kafkaconn.Config{Brokers: b, SASLMechanism: "PLAIN", SASLUser: "u", SASLPasswordFile: pw + "-none"}, "no such file"},
		{"CA without TLS", kafkaconn.Config{Brokers: b, CAFile: ca.CertFile}, "would be ignored"},
		{"missing CA", kafkaconn.Config{Brokers: b, SecurityProtocol: "SSL", CAFile: pw + "-none"}, "CA file"},
		{"CA file not PEM", kafkaconn.Config{Brokers: b, SecurityProtocol: "SSL", CAFile: pw}, "no PEM certificate"},
		{"cert without key", kafkaconn.Config{Brokers: b, SecurityProtocol: "SSL", CertFile: ca.CertFile}, "both or neither"},
		{"OAUTHBEARER", kafkaconn.Config{Brokers: b, SASLMechanism: "OAUTHBEARER", SASLUser: "id", SASLPassword: "s", OAuthTokenURL: "https://idp/token"}, ""},
		{"OAUTHBEARER without token URL", kafkaconn.Config{Brokers: b, SASLMechanism: "OAUTHBEARER", SASLUser: "id", SASLPassword: "s"}, "token endpoint"},
		{"OAUTHBEARER token URL not http", kafkaconn.Config{Brokers: b, SASLMechanism: "OAUTHBEARER", SASLUser: "id", SASLPassword: "s", OAuthTokenURL: "file:///x"}, "not an http(s) URL"},
		{"OAUTHBEARER without client secret", kafkaconn.Config{Brokers: b, SASLMechanism: "OAUTHBEARER", SASLUser: "id", OAuthTokenURL: "https://idp/token"}, "no SASL password"},
		{"token URL with SCRAM", kafkaconn.Config{Brokers: b, SASLMechanism: "SCRAM-SHA-512", SASLUser: "u", SASLPassword: "p", OAuthTokenURL: "https://idp/token"}, "would be ignored"},
		{"token URL without SASL", kafkaconn.Config{Brokers: b, OAuthTokenURL: "https://idp/token"}, "would be ignored"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.c.Validate()
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("got %v, want an error with %q", err, c.want)
			}
		})
	}
}

// TestPasswordNeverShown: String, slog and ConfigMap's errors keep the
// password out; the file's content reaches librdkafka.
func TestPasswordNeverShown(t *testing.T) {
	t.Parallel()
	pw := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(pw, []byte("file-secret-pw\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := kafkaconn.Config{Brokers: "b:9092", SASLMechanism: "SCRAM-SHA-512", SASLUser: "u", SASLPassword: "inline-secret-pw"}
	if s := c.String() + c.LogValue().String(); strings.Contains(s, "secret") {
		t.Fatalf("password shown: %s", s)
	}
	c.SASLPassword, c.SASLPasswordFile = "", pw
	cm, err := c.ConfigMap()
	if err != nil {
		t.Fatal(err)
	}
	if cm["sasl.password"] != "file-secret-pw" || cm["security.protocol"] != "sasl_plaintext" {
		t.Fatalf("config map from file: %v %v", cm["sasl.password"], cm["security.protocol"])
	}
}
