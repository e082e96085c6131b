package kafkatest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/fencegate/fencegate/internal/netfault"
	"github.com/fencegate/fencegate/kafkaconn"
)

// Apache is an Apache Kafka broker (or a three-node cluster) of a test's
// own, run by deploy/dev/kafka.sh in a directory of the test's: for what
// the shared broker must not suffer (a SIGKILL, a SIGSTOP, a setting no
// other test wants). Its processes are stopped when the test ends, and by
// kafka.sh's watcher when the test binary dies first.
type Apache struct {
	*Cluster
	t      testing.TB
	dir    string
	port   int
	mode   string // "single" or "cluster"
	config string
	// links are the fault proxies in front of each node (Proxied): its
	// broker listener and its controller listener.
	proxied bool
	links   map[int][]*netfault.Link
	proxy   []string // FENCEGATE_KAFKA_ADVERTISED and _VOTERS
	// secure: kafka.sh's secured broker (FENCEGATE_KAFKA_SECURE=1).
	secure   bool
	extraEnv []string
}

// ApacheOptions configure StartApache.
type ApacheOptions struct {
	// Nodes is 1 (a combined broker-controller, the default) or 3.
	Nodes int
	// Config lines (key=value) written last into every node's
	// server.properties, so they win over kafka.sh's.
	Config []string
	// Proxied puts a fault proxy (internal/netfault) in front of each
	// node's broker and controller listeners; every node advertises its
	// proxy and the quorum's voters are the proxies, so clients, the
	// other brokers and the controllers all reach a node through them
	// (Isolate).
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
func Script() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil &&
			bytes.Contains(b, []byte("module github.com/fencegate/fencegate\n")) {
			return filepath.Join(dir, "deploy", "dev", "kafka.sh"), nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("kafkatest: deploy/dev/kafka.sh not found above the working directory")
		}
		dir = parent
	}
}

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
			for n := 1; n <= a.nodes(); n++ {
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
	a := &Apache{mode: "single", config: strings.Join(o.Config, "\n"), secure: o.Secure, extraEnv: o.Env, proxied: o.Proxied}
	if o.Nodes == 3 {
		a.mode = "cluster"
	}
	pattern := "fencegate-kafka-test-"
	if o.Secure {
		// a shared secured broker outlives every test's cleanup: its
		// directory names its binary, so the next one removes it
		// (removeStale).
		pattern = sharedDirPrefix + strconv.Itoa(os.Getpid()) + "-"
	}
	dir, err := os.MkdirTemp("", pattern)
	a.dir = dir
	return a, err
}

// close stops the nodes and removes their directory.
func (a *Apache) close() {
	_ = a.run("stop")
	a.closeLinks()
	_ = os.RemoveAll(a.dir)
}

// launch starts the nodes on free ports and makes topic.
func (a *Apache) launch(topic string, partitions int32) error {
	var last error
	for range 3 {
		a.port = freeBase(a.mode, a.secure)
		if a.proxied {
			if err := a.proxyNodes(); err != nil {
				return err
			}
		}
		if last = a.run(a.startVerb()); last == nil {
			break
		}
		if !strings.Contains(last.Error(), "is taken by another process") {
			return last
		}
	}
	if last != nil {
		return last
	}
	brokers := a.url()
	if a.proxied {
		brokers = strings.TrimPrefix(a.proxy[0], "FENCEGATE_KAFKA_ADVERTISED=")
	}
	a.Cluster = &Cluster{Brokers: brokers, Conn: kafkaconn.Config{Brokers: brokers}, Topic: topic}
	if a.secure {
		a.Conn = a.SCRAM("admin")
	}
	if err := CreateTopic(a.Conn, topic, partitions); err != nil {
		return fmt.Errorf("%v\n%s", err, a.LogTail(1, 30))
	}
	return nil
}

// proxyNodes starts the fault proxies of every node for the ports of
// a.port (those of an earlier try closed first); close closes them.
func (a *Apache) proxyNodes() error {
	a.closeLinks()
	a.links = map[int][]*netfault.Link{}
	var advertised, voters []string
	for n := 1; n <= a.nodes(); n++ {
		b, c := a.port+99+n, a.port+199+n
		if a.mode == "single" {
			b, c = a.port, a.port+1
		}
		for _, up := range []int{b, c} {
			l, err := netfault.New(fmt.Sprintf("kafka-%d-%d", n, up), "127.0.0.1:"+strconv.Itoa(up))
			if err != nil {
				return err
			}
			a.links[n] = append(a.links[n], l)
		}
		advertised = append(advertised, a.links[n][0].Addr)
		voters = append(voters, fmt.Sprintf("%d@%s", n, a.links[n][1].Addr))
	}
	a.proxy = []string{"FENCEGATE_KAFKA_ADVERTISED=" + strings.Join(advertised, ","),
		"FENCEGATE_KAFKA_VOTERS=" + strings.Join(voters, ",")}
	return nil
}

func (a *Apache) closeLinks() {
	for _, ls := range a.links {
		for _, l := range ls {
			l.Close()
		}
	}
}

func (a *Apache) nodes() int {
	if a.mode == "cluster" {
		return 3
	}
	return 1
}

// Isolate drops every byte sent to node n through its proxies, both
// ways on each connection: clients, the other brokers and the quorum can
// no longer reach it, while its own connections to the others' proxies
// stay (a node cut off from everyone who calls it). It needs Proxied.
func (a *Apache) Isolate(n int) (heal func()) {
	a.t.Helper()
	if a.links == nil {
		a.t.Fatal("kafkatest: Isolate needs ApacheOptions.Proxied")
	}
	var undo []func()
	for _, l := range a.links[n] {
		undo = append(undo, l.Blackhole(netfault.Both))
	}
	return func() {
		for _, u := range undo {
			u()
		}
	}
}

func (a *Apache) startVerb() string {
	if a.mode == "cluster" {
		return "cluster"
	}
	return "start"
}

// Start starts the nodes that are not running (after Kill or Stop) and
// waits until they serve.
func (a *Apache) Start() {
	a.t.Helper()
	if err := a.run(a.startVerb()); err != nil {
		a.t.Fatalf("kafkatest: %v", err)
	}
}

// Kill sends SIGKILL to node n (1-3) and waits for it to end: a crash.
func (a *Apache) Kill(n int) { a.signalAndWait(n, syscall.SIGKILL) }

// Stop sends SIGTERM to node n and waits for its clean shutdown.
func (a *Apache) Stop(n int) { a.signalAndWait(n, syscall.SIGTERM) }

// Pause freezes node n with SIGSTOP (a broker in a long GC pause); the
// returned function resumes it with SIGCONT.
func (a *Apache) Pause(n int) (resume func()) {
	a.t.Helper()
	pid := a.Pid(n)
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		a.t.Fatal(err)
	}
	return func() { _ = syscall.Kill(pid, syscall.SIGCONT) }
}

// Pid returns node n's process id, failing the test when it is not running.
func (a *Apache) Pid(n int) int {
	a.t.Helper()
	out, err := a.output("pids")
	if err != nil {
		a.t.Fatalf("kafkatest: %v", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && f[0] == strconv.Itoa(n) {
			pid, _ := strconv.Atoi(f[1])
			return pid
		}
	}
	a.t.Fatalf("kafkatest: node %d is not running", n)
	return 0
}

// BrokerAddr returns node n's broker address.
func (a *Apache) BrokerAddr(n int) string {
	return strings.Split(a.Brokers, ",")[n-1]
}

// LogTail returns the last lines of node n's server log, for a failure
// message.
func (a *Apache) LogTail(n, lines int) string {
	sub := "single"
	if a.mode == "cluster" {
		sub = filepath.Join("cluster", "node-"+strconv.Itoa(n))
	}
	b, err := os.ReadFile(filepath.Join(a.dir, sub, "server.log"))
	if err != nil {
		return err.Error()
	}
	all := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}

func (a *Apache) signalAndWait(n int, sig syscall.Signal) {
	a.t.Helper()
	pid := a.Pid(n)
	if err := syscall.Kill(pid, sig); err != nil {
		a.t.Fatal(err)
	}
	waitGone(pid)
}

// waitGone polls until pid no longer runs (the broker is not the test's
// child, so there is nothing to wait on), for at most a minute.
func waitGone(pid int) {
	deadline := time.Now().Add(time.Minute)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for syscall.Kill(pid, 0) == nil && time.Now().Before(deadline) {
		<-tick.C
	}
}

func (a *Apache) url() string {
	out, _ := a.output("url")
	return strings.TrimSpace(out)
}

func (a *Apache) env() []string {
	return append(append(append(os.Environ(), a.proxy...),
		"FENCEGATE_KAFKA_PORT="+strconv.Itoa(a.port),
		"FENCEGATE_KAFKA_DIR="+a.dir,
		"FENCEGATE_KAFKA_MODE="+a.mode,
		"FENCEGATE_KAFKA_HEAP=384m",
		// A restart under a loaded suite can take longer than the
		// first start's minute; a dead node still fails at once.
		"FENCEGATE_KAFKA_START_TIMEOUT=180",
		"FENCEGATE_KAFKA_CONFIG="+a.config,
		"FENCEGATE_KAFKA_WATCH_PID="+strconv.Itoa(os.Getpid()),
		"FENCEGATE_KAFKA_SECURE="+map[bool]string{true: "1", false: "0"}[a.secure],
	), a.extraEnv...)
}

func (a *Apache) run(verb string) error {
	_, err := a.output(verb)
	return err
}

func (a *Apache) output(verb string) (string, error) {
	script, err := Script()
	if err != nil {
		return "", err
	}
	cmd := exec.Command("bash", script, verb)
	cmd.Env = a.env()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("kafka.sh %s: %v: %s", verb, err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// freeBase picks a base port whose broker and controller ports (those
// kafka.sh derives for mode) are free now.
func freeBase(mode string, secure bool) int {
	offsets := []int{0, 1}
	if secure {
		offsets = append(offsets, 2)
	}
	if mode == "cluster" {
		offsets = []int{100, 101, 102, 200, 201, 202}
	}
	for {
		base := 20000 + rand.IntN(9000)
		if allFree(base, offsets) {
			return base
		}
	}
}

func allFree(base int, offsets []int) bool {
	for _, o := range offsets {
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(base+o))
		if err != nil {
			return false
		}
		ln.Close()
	}
	return true
}

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
