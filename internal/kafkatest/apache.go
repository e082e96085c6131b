package kafkatest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/fencegate/fencegate/internal/kafkadev"
	"github.com/fencegate/fencegate/kafkaconn"
)

// Apache is an Apache Kafka broker (or a three-node cluster) of a test's
// own, run by deploy/dev/kafka.sh in a directory of the test's
// (internal/kafkadev): for what the shared broker must not suffer (a
// SIGKILL, a SIGSTOP, a setting no other test wants). Its processes are
// stopped when the test ends, and by kafka.sh's watcher when the test
// binary dies first.
type Apache struct {
	*Cluster
	t    testing.TB
	node *kafkadev.Cluster
	// adm asks the nodes about the cluster. It is made at launch, while
	// every node serves, and kept: a client made after a cut learns the
	// brokers from a seed, and one question to the cut node's seed held
	// every question after it (with a client made per question,
	// WaitDropped took 20.4 s in three of six holds; with this one kept,
	// 5.5 and 8.3 s).
	adm *kafkadev.Admin
}

// ApacheOptions configure StartApache.
type ApacheOptions struct {
	// Nodes is 1 (a combined broker-controller, the default) or 3.
	Nodes int
	// Config lines (key=value) written last into every node's
	// server.properties, so they win over kafka.sh's.
	Config []string
	// Proxied (three nodes only) puts a fault proxy (internal/netfault)
	// on every path to a node: the clients' and each node's own path to
	// each broker and controller (Isolate).
	Proxied bool
	// Secure starts kafka.sh's secured single broker (SASL_SSL with
	// SCRAM-SHA-512, an mTLS listener, the StandardAuthorizer denying
	// what no ACL grants): Conn is then the admin super user's.
	Secure bool
	// Env is more of kafka.sh's settings (NAME=value), such as
	// FENCEGATE_KAFKA_OAUTH_JWKS_URL.
	Env []string
}

// Script returns the path of deploy/dev/kafka.sh, found by walking up
// from the working directory to the repository's go.mod.
func Script() (string, error) { return kafkadev.Script() }

// StartApache starts an Apache Kafka of the test's own with topic made
// (partitions partitions, the cluster's replication), and stops it when t
// ends. A broker that cannot start fails t with kafka.sh's reason.
func StartApache(t testing.TB, topic string, partitions int32, o ApacheOptions) *Apache {
	t.Helper()
	if External() {
		// make test runs it in its first pass; an external cluster's pass
		// is about that cluster.
		t.Skip("starts an Apache Kafka of its own: runs without " + EnvBrokers)
	}
	a, err := newApache(o)
	if err != nil {
		t.Fatal(err)
	}
	a.t = t
	t.Cleanup(func() {
		if t.Failed() {
			for n := 1; n <= a.node.Nodes(); n++ {
				t.Logf("the test's Apache Kafka, last lines of node %d's log:\n%s", n, a.LogTail(n, 20))
			}
		}
		a.close()
	})
	if err := a.launch(topic, partitions); err != nil {
		t.Fatalf("kafkatest: %v", err)
	}
	return a
}

func newApache(o ApacheOptions) (*Apache, error) {
	pattern := "fencegate-kafka-test-"
	if o.Secure {
		// a shared secured broker outlives every test's cleanup: its
		// directory names its binary, so the next one removes it
		// (removeStale).
		pattern = sharedDirPrefix + strconv.Itoa(os.Getpid()) + "-"
	}
	node, err := kafkadev.New(kafkadev.Options{Nodes: o.Nodes, Config: o.Config, Proxied: o.Proxied,
		Secure: o.Secure, Env: o.Env, DirPattern: pattern})
	return &Apache{node: node}, err
}

// close stops the nodes and removes their directory.
func (a *Apache) close() {
	if a.adm != nil {
		a.adm.Close()
	}
	a.node.Close()
}

// launch starts the nodes on free ports and makes topic.
func (a *Apache) launch(topic string, partitions int32) error {
	if err := a.node.Launch(); err != nil {
		return err
	}
	brokers := a.node.Brokers
	a.Cluster = &Cluster{Brokers: brokers, Conn: kafkaconn.Config{Brokers: brokers}, Topic: topic}
	if a.node.Secure() {
		a.Conn = a.SCRAM("admin")
	}
	if err := CreateTopic(a.Conn, topic, partitions); err != nil {
		return fmt.Errorf("%v\n%s", err, a.LogTail(1, 30))
	}
	adm, err := a.node.NewAdmin()
	a.adm = adm
	return err
}

// Isolate cuts node n off from the clients and the other nodes, both
// ways, while the others still reach each other (a partition of one
// node); heal undoes it. It needs Proxied.
func (a *Apache) Isolate(n int) (heal func()) {
	a.t.Helper()
	heal, err := a.node.Isolate(n)
	if err != nil {
		a.t.Fatal(err)
	}
	return heal
}

// Start starts the nodes that are not running (after Kill or Stop) and
// waits until they serve.
func (a *Apache) Start() {
	a.t.Helper()
	if err := a.node.Start(); err != nil {
		a.t.Fatalf("kafkatest: %v", err)
	}
}

// Kill sends SIGKILL to node n (1-3) and waits for it to end: a crash.
func (a *Apache) Kill(n int) { a.t.Helper(); a.must(a.node.Kill(n)) }

// Stop sends SIGTERM to node n and waits for its clean shutdown.
func (a *Apache) Stop(n int) { a.t.Helper(); a.must(a.node.Stop(n)) }

// Pause freezes node n with SIGSTOP (a broker in a long GC pause); the
// returned function resumes it with SIGCONT.
func (a *Apache) Pause(n int) (resume func()) {
	a.t.Helper()
	resume, err := a.node.Pause(n)
	a.must(err)
	return resume
}

// Pid returns node n's process id, failing the test when it is not running.
func (a *Apache) Pid(n int) int {
	a.t.Helper()
	pid, err := a.node.Pid(n)
	a.must(err)
	return pid
}

func (a *Apache) must(err error) {
	a.t.Helper()
	if err != nil {
		a.t.Fatalf("kafkatest: %v", err)
	}
}

// BrokerAddr returns node n's broker address.
func (a *Apache) BrokerAddr(n int) string {
	return strings.Split(a.Brokers, ",")[n-1]
}

// LogTail returns the last lines of node n's server log, for a failure
// message.
func (a *Apache) LogTail(n, lines int) string { return a.node.LogTail(n, lines) }

// EnvApacheBrokers names the shared Apache Kafka broker of `make test`
// (deploy/dev/kafka.sh start), PLAINTEXT on loopback, for the tests that
// must run on Apache Kafka whatever the suite's default broker is.
const EnvApacheBrokers = "FENCEGATE_TEST_APACHE_BROKERS"

// StartReal gives the test its topic on a real Kafka: the external
// cluster of the environment (make test-external), else the shared Apache
// Kafka broker of EnvApacheBrokers (make test), else an Apache Kafka of
// the test's own (StartApache). For the tests whose claim is about the
// real transaction coordinator (TV2 epochs, Kafka's own tools as
// readers), which the embedded broker cannot judge.
func StartReal(t testing.TB, topic string, partitions int32) *Cluster {
	t.Helper()
	if External() {
		return startExternal(t, ExternalConn(t), topic, partitions)
	}
	if b := os.Getenv(EnvApacheBrokers); b != "" {
		return startExternal(t, kafkaconn.Config{Brokers: b}, topic, partitions)
	}
	return StartApache(t, topic, partitions, ApacheOptions{}).Cluster
}

// WaitForgotten polls DescribeTransactions until the coordinator no
// longer knows transactional id id (transactional.id.expiration.ms has
// passed since its last transaction), failing t after a minute.
func WaitForgotten(t testing.TB, conn kafkaconn.Config, id string) {
	t.Helper()
	cl, err := client(conn)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	state := ""
	for {
		req := kmsg.NewPtrDescribeTransactionsRequest()
		req.TransactionalIDs = []string{id}
		resp, err := req.RequestWith(ctx, cl)
		if err == nil && len(resp.TransactionStates) == 1 {
			s := resp.TransactionStates[0]
			if errors.Is(kerr.ErrorForCode(s.ErrorCode), kerr.TransactionalIDNotFound) {
				return
			}
			state = fmt.Sprintf("%s (producer %d epoch %d)", s.State, s.ProducerID, s.ProducerEpoch)
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("the coordinator still knows %s after a minute: %s %v", id, state, err)
		}
	}
}

// EnvApacheLog is the server log of the shared broker of EnvApacheBrokers.
const EnvApacheLog = "FENCEGATE_TEST_APACHE_LOG"

// explainDeadBroker adds, to a failed test, the last lines of the shared
// broker's log when the broker no longer answers: a test that failed
// because the broker died says so.
func explainDeadBroker(t testing.TB, brokers string) {
	if !t.Failed() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := (kafkaconn.Config{Brokers: brokers}).Probe(ctx); err == nil {
		return
	}
	b, err := os.ReadFile(os.Getenv(EnvApacheLog))
	if err != nil {
		t.Logf("the shared Apache Kafka at %s does not answer; its log (%s=%q): %v", brokers, EnvApacheLog, os.Getenv(EnvApacheLog), err)
		return
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	t.Logf("the shared Apache Kafka at %s does not answer; the last lines of %s:\n%s", brokers, os.Getenv(EnvApacheLog),
		strings.Join(lines[max(0, len(lines)-20):], "\n"))
}
