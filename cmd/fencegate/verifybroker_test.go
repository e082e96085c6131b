package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/fencegate/fencegate/brokercheck"
	"github.com/fencegate/fencegate/internal/kafkatest"
	"github.com/fencegate/fencegate/internal/pgtest"
	"github.com/fencegate/fencegate/internal/syncbuf"
	"github.com/fencegate/fencegate/kafkaconn"
)

// verifyBroker runs `fencegate verify-broker` against brokers with a
// config routing to topic (partitions partitions), once with -o json
// (decoded) and once as a table (logged, the output an operator reads).
func verifyBroker(t *testing.T, brokers, topic string, partitions int) (int, brokercheck.Report) {
	t.Helper()
	cfg := routeConfig(t, topic, partitions)
	args := []string{"verify-broker", "--kafka-brokers", brokers, "--config", cfg}
	var out, errb bytes.Buffer
	code := run(context.Background(), append(args, "-o", "json"), &out, &errb)
	var rep brokercheck.Report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("verify-broker -o json: exit %d, %v:\n%s\n%s", code, err, out.String(), errb.String())
	}
	out.Reset()
	errb.Reset()
	tcode := run(context.Background(), args, &out, &errb)
	t.Logf("fencegate verify-broker on %s (exit %d):\n%s%s", brokers, tcode, out.String(), errb.String())
	if tcode != code {
		t.Errorf("the table run exited %d, the JSON run %d", tcode, code)
	}
	return code, rep
}

// statuses maps "check subject" to the status of each result.
func statuses(rep brokercheck.Report) map[string]brokercheck.Status {
	m := map[string]brokercheck.Status{}
	for _, r := range rep.Results {
		m[r.Check+" "+r.Subject] = r.Status
	}
	return m
}

// wantStatus fails t unless every result of check (on subject, when not
// empty) has status want.
func wantStatus(t *testing.T, rep brokercheck.Report, check, subject string, want brokercheck.Status) brokercheck.Result {
	t.Helper()
	var found brokercheck.Result
	for _, r := range rep.Results {
		if r.Check != check || subject != "" && r.Subject != subject {
			continue
		}
		found = r
		if r.Status != want {
			t.Errorf("%s on %s: %s (%s), want %s", r.Check, r.Subject, r.Status, r.Evidence, want)
		}
	}
	if found.Check == "" {
		t.Errorf("no result of %s on %q", check, subject)
	}
	return found
}

var fenceChecks = []string{"fence.epoch", "fence.produce", "fence.commit", "fence.open-aborted", "read.committed", "read.markers"}

// TestVerifyBrokerPassesOnApacheSingle: on one Apache Kafka broker every
// fence check passes and nothing fails; replication 1 is a WARN, since a
// single broker has no other choice (exit 0).
func TestVerifyBrokerPassesOnApacheSingle(t *testing.T) {
	t.Parallel()
	k := kafkatest.StartReal(t, "verify-single", 4)
	start := time.Now()
	code, rep := verifyBroker(t, k.Brokers, k.Topic, 4)
	if code != 0 {
		t.Fatalf("exit %d, want 0: %v", code, statuses(rep))
	}
	if took := time.Since(start); took > time.Minute {
		t.Errorf("two runs took %s, want well under a minute each", took)
	}
	for _, c := range fenceChecks {
		wantStatus(t, rep, c, "", brokercheck.Pass)
	}
	wantStatus(t, rep, "unclean.leader.election.enable", k.Topic, brokercheck.Pass)
	wantStatus(t, rep, "unclean.leader.election.enable", brokercheck.TransactionStateTopic, brokercheck.Pass)
	wantStatus(t, rep, "replication", k.Topic, brokercheck.Warn)
	wantStatus(t, rep, "replication", brokercheck.TransactionStateTopic, brokercheck.Warn)
	wantStatus(t, rep, "transaction.max.timeout.ms", "cluster", brokercheck.Pass)
	wantStatus(t, rep, "transactional.id.expiration.ms", "cluster", brokercheck.Pass)
	wantStatus(t, rep, "transaction.version", "cluster", brokercheck.Pass)
	if n := rep.Count(brokercheck.Fail) + rep.Count(brokercheck.Error); n != 0 {
		t.Errorf("%d FAIL or ERROR on a healthy broker", n)
	}
	scratch := wantStatus(t, rep, "read.committed", "", brokercheck.Pass).Subject
	waitTopicGone(t, k.Conn, scratch)
}

// waitTopicGone polls the metadata until topic is gone (Apache Kafka
// deletes asynchronously), failing t after 30 s.
func waitTopicGone(t *testing.T, conn kafkaconn.Config, topic string) {
	t.Helper()
	if !strings.HasPrefix(topic, brokercheck.ScratchTopicPrefix) {
		t.Fatalf("scratch topic %q lacks the prefix %s", topic, brokercheck.ScratchTopicPrefix)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		_, err := conn.TopicPartitions(ctx, topic)
		if errors.Is(err, kafkaconn.ErrNoTopic) {
			return
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("the scratch topic %s is still there: %v", topic, err)
		}
	}
}

// TestFM101_TransactionStateMinISROneRefused: a three-node Apache Kafka
// cluster as kafka.sh makes it (replication 3, min.insync.replicas 2)
// passes every check but the ACLs (no authorizer: WARN); with
// __transaction_state's min.insync.replicas lowered to 1, verify-broker
// fails naming it and serve refuses to start.
func TestFM101_TransactionStateMinISROneRefused(t *testing.T) {
	t.Parallel()
	a := kafkatest.StartApache(t, "verify-cluster", 4, kafkatest.ApacheOptions{Nodes: 3})
	code, rep := verifyBroker(t, a.Brokers, a.Topic, 4)
	if code != 0 {
		t.Fatalf("exit %d on the cluster, want 0: %v", code, statuses(rep))
	}
	for _, r := range rep.Results {
		if r.Status != brokercheck.Pass && r.Check != "acls" {
			t.Errorf("%s on %s: %s (%s), want PASS on the cluster", r.Check, r.Subject, r.Status, r.Evidence)
		}
	}
	wantStatus(t, rep, "acls", "", brokercheck.Warn)

	alterTopicConfig(t, a.Conn, brokercheck.TransactionStateTopic, "min.insync.replicas", "1")
	code, rep = verifyBroker(t, a.Brokers, a.Topic, 4)
	if code != 1 {
		t.Fatalf("exit %d with __transaction_state min ISR 1, want 1", code)
	}
	r := wantStatus(t, rep, "replication", brokercheck.TransactionStateTopic, brokercheck.Fail)
	if r.Unsafe != brokercheck.UnsafeStateMinISR {
		t.Errorf("unsafe %q, want %q", r.Unsafe, brokercheck.UnsafeStateMinISR)
	}
	wantRefused(t, serveOn(t, a.Brokers, a.Topic, 4, ""), brokercheck.UnsafeStateMinISR, "min.insync.replicas=2")
}

// TestFM100_UncleanLeaderElectionRefused: unclean leader election turned
// on for a route's topic is verify-broker's FAIL on that topic, and
// serve refuses to start, naming the setting and its fix.
func TestFM100_UncleanLeaderElectionRefused(t *testing.T) {
	t.Parallel()
	k := kafkatest.StartReal(t, "verify-unclean", 4)
	alterTopicConfig(t, k.Conn, k.Topic, "unclean.leader.election.enable", "true")
	code, rep := verifyBroker(t, k.Brokers, k.Topic, 4)
	if code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	r := wantStatus(t, rep, "unclean.leader.election.enable", k.Topic, brokercheck.Fail)
	if r.Unsafe != brokercheck.UnsafeUncleanElection {
		t.Errorf("unsafe %q, want %q", r.Unsafe, brokercheck.UnsafeUncleanElection)
	}
	for _, c := range fenceChecks {
		wantStatus(t, rep, c, "", brokercheck.Pass)
	}
	wantRefused(t, serveOn(t, k.Brokers, k.Topic, 4, ""), brokercheck.UnsafeUncleanElection, "unclean.leader.election.enable=false")
}

// TestFM102_UnsafeBrokerSettings: a broker started with
// transaction.max.timeout.ms below the gateway's transaction timeout,
// unclean leader election on by default, a short
// transactional.id.expiration.ms and partition verification off: each is
// its matching line (FAIL for the first two, unclean election on the
// route's topic; __transaction_state passes, since Kafka creates it with
// unclean election off whatever the default; WARN for the others), the
// fence checks cannot run
// (the broker refuses the gateway's timeout: exit 1, not 2), and serve
// refuses, naming both refusals; naming one of them still refuses the
// other.
func TestFM102_UnsafeBrokerSettings(t *testing.T) {
	t.Parallel()
	a := kafkatest.StartApache(t, "verify-unsafe", 4, kafkatest.ApacheOptions{Config: []string{
		"transaction.max.timeout.ms=5000",
		"unclean.leader.election.enable=true",
		"transactional.id.expiration.ms=20000",
		"transaction.partition.verification.enable=false",
	}})
	code, rep := verifyBroker(t, a.Brokers, a.Topic, 4)
	if code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	r := wantStatus(t, rep, "transaction.max.timeout.ms", "cluster", brokercheck.Fail)
	if r.Unsafe != brokercheck.UnsafeMaxTimeout || !strings.Contains(r.Evidence, "5s") {
		t.Errorf("max timeout result %+v", r)
	}
	wantStatus(t, rep, "unclean.leader.election.enable", a.Topic, brokercheck.Fail)
	wantStatus(t, rep, "unclean.leader.election.enable", brokercheck.TransactionStateTopic, brokercheck.Pass)
	wantStatus(t, rep, "transactional.id.expiration.ms", "cluster", brokercheck.Warn)
	wantStatus(t, rep, "transaction.partition.verification.enable", "cluster", brokercheck.Warn)
	// the grants are a question about rights, answered whatever the
	// timeout (its own check says what is wrong with it).
	wantStatus(t, rep, "grants", "", brokercheck.Pass)
	epoch := wantStatus(t, rep, "fence.epoch", "", brokercheck.Error)
	if !strings.Contains(epoch.Evidence, "InitProducerId") {
		t.Errorf("fence.epoch evidence %q does not name the refused InitProducerId", epoch.Evidence)
	}
	err := serveOn(t, a.Brokers, a.Topic, 4, "")
	wantRefused(t, err, brokercheck.UnsafeMaxTimeout, "transaction.max.timeout.ms to at least 10000")
	wantRefused(t, err, brokercheck.UnsafeUncleanElection, "unclean.leader.election.enable=false")
	err = serveOn(t, a.Brokers, a.Topic, 4, brokercheck.UnsafeUncleanElection)
	wantRefused(t, err, brokercheck.UnsafeMaxTimeout, "transaction.max.timeout.ms")
	if strings.Contains(err.Error(), "--allow-unsafe-broker="+brokercheck.UnsafeUncleanElection) {
		t.Errorf("the refusal still names the overridden setting:\n%v", err)
	}
}

// TestFM104_UnsafeBrokerStartsOnlyWhenNamed: serve starts on a route
// topic with unclean leader election only when --allow-unsafe-broker
// names it; the override is logged and exported as
// fencegate.broker.unsafe_allowed (1 for it, 0 for the others). A name
// that is none of the refusals is a usage error.
func TestFM104_UnsafeBrokerStartsOnlyWhenNamed(t *testing.T) {
	t.Parallel()
	k := kafkatest.StartReal(t, "verify-override", 4)
	alterTopicConfig(t, k.Conn, k.Topic, "unclean.leader.election.enable", "true")
	var ue usageError
	if err := serveOn(t, k.Brokers, k.Topic, 4, "unclean-election"); !errors.As(err, &ue) {
		t.Fatalf("serve --allow-unsafe-broker=unclean-election: %v, want a usage error", err)
	}
	db := pgtest.NewEmpty(t)
	f := testServeFlags(t, k.Brokers, k.Topic, 4, brokercheck.UnsafeUncleanElection)
	f.databaseURL, f.migrate = db.URL, true
	var logs syncbuf.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	ready, done := make(chan string, 1), make(chan error, 1)
	go func() { done <- serve(ctx, f, slog.New(slog.NewTextHandler(&logs, nil)), ready) }()
	var addr string
	select {
	case addr = <-ready:
	case err := <-done:
		t.Fatalf("serve with the override: %v", err)
	}
	defer func() { cancel(); <-done }()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for setting, want := range map[string]string{brokercheck.UnsafeUncleanElection: "1", brokercheck.UnsafeMaxTimeout: "0"} {
		if got := sample(string(raw), "fencegate_broker_unsafe_allowed", `setting="`+setting+`"`); got != want {
			t.Errorf("fencegate_broker_unsafe_allowed{setting=%q} = %q, want %s", setting, got, want)
		}
	}
	if !strings.Contains(logs.String(), "unsafe broker setting allowed by --allow-unsafe-broker") ||
		!strings.Contains(logs.String(), "unsafe=unclean-leader-election") {
		t.Errorf("the override is not logged:\n%s", logs.String())
	}
}

// TestVerifyBrokerOnEmbeddedBroker: the embedded kfake broker fences as
// Apache Kafka does in the fence checks; its differences are reported,
// not hidden: it does not report unclean leader election, the
// transaction log's settings or partition verification (WARN), and it
// answers DescribeAcls with no ACL although it enforces none (FAIL: exit 1).
func TestVerifyBrokerOnEmbeddedBroker(t *testing.T) {
	t.Parallel()
	k := kafkatest.Start(t, "verify-kfake", 4)
	k.Fake(t)
	code, rep := verifyBroker(t, k.Brokers, k.Topic, 4)
	if code != 1 {
		t.Errorf("exit %d, want 1 (the ACL answer)", code)
	}
	for _, c := range fenceChecks {
		wantStatus(t, rep, c, "", brokercheck.Pass)
	}
	wantStatus(t, rep, "unclean.leader.election.enable", "", brokercheck.Warn)
	wantStatus(t, rep, "transaction.partition.verification.enable", "cluster", brokercheck.Warn)
	wantStatus(t, rep, "acls", "", brokercheck.Fail)
}

// sample returns the value of the series of metric whose labels contain
// label in a Prometheus text exposition ("" when there is none).
func sample(text, metric, label string) string {
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, metric+"{") && strings.Contains(line, label) {
			return line[strings.LastIndexByte(line, ' ')+1:]
		}
	}
	return ""
}

// testServeFlags are serve's flags on brokers with a config routing to
// topic; no database is reached before the broker check.
func testServeFlags(t *testing.T, brokers, topic string, partitions int, allow string) serveFlags {
	return serveFlags{listen: "127.0.0.1:0", replica: "r1", minTTL: time.Millisecond, maxTTL: time.Hour,
		txnTimeout: 10 * time.Second, parkAfter: 30 * time.Second, allowUnsafe: allow,
		commonFlags: commonFlags{databaseURL: "postgres://nobody@127.0.0.1:1/none", brokers: brokers,
			configPath: routeConfig(t, topic, partitions), barrierKey: "0123456789abcdef0123"}}
}

// serveOn runs serve against brokers and returns its error; it must not
// start.
func serveOn(t *testing.T, brokers, topic string, partitions int, allow string) error {
	t.Helper()
	ready := make(chan string, 1)
	err := serve(context.Background(), testServeFlags(t, brokers, topic, partitions, allow), slog.New(slog.NewTextHandler(io.Discard, nil)), ready)
	select {
	case addr := <-ready:
		t.Fatalf("serve listened on %s", addr)
	default:
	}
	if err == nil {
		t.Fatal("serve returned no error")
	}
	return err
}

// wantRefused fails t unless err is serve's refusal naming unsafe and
// containing fix.
func wantRefused(t *testing.T, err error, unsafe, fix string) {
	t.Helper()
	var re *brokercheck.RefusalError
	if !errors.As(err, &re) {
		t.Fatalf("serve: %v, want a refusal of the broker", err)
	}
	if !strings.Contains(err.Error(), "--allow-unsafe-broker="+unsafe) || !strings.Contains(err.Error(), fix) {
		t.Errorf("the refusal does not name %s and %q:\n%v", unsafe, fix, err)
	}
	t.Logf("serve refused:\n%v", err)
}

// alterTopicConfig sets one config of topic.
func alterTopicConfig(t *testing.T, conn kafkaconn.Config, topic, key, value string) {
	t.Helper()
	opts, err := conn.KgoOpts()
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	r := kmsg.NewIncrementalAlterConfigsRequestResource()
	r.ResourceType, r.ResourceName = kmsg.ConfigResourceTypeTopic, topic
	c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
	c.Name, c.Value, c.Op = key, kmsg.StringPtr(value), kmsg.IncrementalAlterConfigOpSet
	r.Configs = append(r.Configs, c)
	req.Resources = append(req.Resources, r)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := req.RequestWith(ctx, cl)
	if err == nil {
		err = kerr.ErrorForCode(resp.Resources[0].ErrorCode)
	}
	if err != nil {
		t.Fatalf("set %s=%s on %s: %v", key, value, topic, err)
	}
}

// TestVerifyBrokerCouldNotRunExitsTwo: a cluster that does not answer is
// "could not run" (exit 2), each check an ERROR with its reason, within
// --timeout; a wrong -o is a usage error (exit 2) before anything
// connects.
func TestVerifyBrokerCouldNotRunExitsTwo(t *testing.T) {
	t.Parallel()
	cfg := routeConfig(t, "nowhere", 4)
	var out, errb bytes.Buffer
	start := time.Now()
	code := run(context.Background(), []string{"verify-broker", "--kafka-brokers", "127.0.0.1:1", "--config", cfg,
		"--timeout", "2s", "-o", "json"}, &out, &errb)
	if code != 2 {
		t.Fatalf("exit %d, want 2:\n%s%s", code, out.String(), errb.String())
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("took %s with --timeout 2s", took)
	}
	var rep brokercheck.Report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	for _, r := range rep.Results {
		if r.Status != brokercheck.Error {
			t.Errorf("%s: %s (%s), want ERROR", r.Check, r.Status, r.Evidence)
		}
	}
	if !strings.Contains(errb.String(), "could not run") {
		t.Errorf("stderr: %q", errb.String())
	}
	out.Reset()
	errb.Reset()
	if code := run(context.Background(), []string{"verify-broker", "--config", cfg, "-o", "yaml"}, &out, &errb); code != 2 ||
		!strings.Contains(errb.String(), "table or json") {
		t.Errorf("-o yaml: exit %d, %q", code, errb.String())
	}
}

// TestVerifyBrokerScratchTopicKeptAndReused: with --scratch-topic the
// fence checks write to the named topic, never delete it, and a second
// run on it judges only its own records (exit 0 both times).
func TestVerifyBrokerScratchTopicKeptAndReused(t *testing.T) {
	t.Parallel()
	k := kafkatest.StartReal(t, "verify-scratch", 1)
	cfg := routeConfig(t, k.Topic, 1)
	for i := range 2 {
		var out, errb bytes.Buffer
		code := run(context.Background(), []string{"verify-broker", "--kafka-brokers", k.Brokers, "--config", cfg,
			"--scratch-topic", k.Topic}, &out, &errb)
		if code != 0 {
			t.Fatalf("run %d: exit %d:\n%s%s", i+1, code, out.String(), errb.String())
		}
		if !strings.Contains(out.String(), "read.committed                             "+k.Topic) {
			t.Errorf("run %d did not read back %s:\n%s", i+1, k.Topic, out.String())
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		n, err := k.Conn.TopicPartitions(ctx, k.Topic)
		cancel()
		if err != nil || n != 1 {
			t.Fatalf("after run %d the scratch topic: %d partitions, %v", i+1, n, err)
		}
	}
}
