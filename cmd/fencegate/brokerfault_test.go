package main

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/kafkatest"
	"github.com/fencegate/fencegate/internal/pgtest"
	"github.com/fencegate/fencegate/loadtest"
	"github.com/fencegate/fencegate/loadtest/stack"
)

// TestBrokerFaultsLoadtestShort: `loadtest --kafka-cluster
// --broker-fault-every` in short form, on the harness's own three-node
// Apache Kafka cluster: the busy lease's transaction coordinator killed
// with SIGKILL and restarted, then its partition's leader frozen with
// SIGSTOP past its session and resumed, while two replicas serve workers
// that churn their leases. After each fault the cluster becomes whole and
// every lease is served again within one TTL; across both, the history
// checker finds nothing (no aborted read, no lost write, no committed
// definite refusal, every unknown answer resolved by reading), I1-I4
// hold, and the ledger and the trusted topic equal what was
// acknowledged: the run's verdict, which any of those findings fails.
// The cluster is the test's own, so it runs without an external one.
func TestBrokerFaultsLoadtestShort(t *testing.T) {
	if kafkatest.External() {
		t.Skip("starts an Apache Kafka cluster of its own: runs without " + kafkatest.EnvBrokers)
	}
	t.Setenv("FENCEGATE_TEST_MAIN", "1")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	stk, err := stack.StartSeparateProcesses(context.Background(), pgtest.ServerURL(), exe,
		stack.SeparateOptions{KafkaCluster: true, Replicas: 2}, log, stack.WithTrusted())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stk.Close)
	sc := loadtest.Defaults()
	sc.Leases, sc.WorkersPerLease, sc.BatchSize, sc.RecordSize, sc.Rate = 4, 2, 10, 128, 5
	// The duration only bounds the run: it ends after its round of
	// faults, each waited for (a JVM's restart is not timed). The TTL is
	// above the gateway children's commit timeout (serve's default,
	// 10 s): a commit caught by the fault is answered only then, and its
	// worker hands over after; the long run on a loaded machine saw
	// leases served 14-18 s after the cluster was whole.
	sc.Duration, sc.TTL = 15*time.Minute, 20*time.Second
	sc.FreezeEvery, sc.ChurnEvery, sc.Direct, sc.Naive = 0, 3*time.Second, false, false
	sc.BrokerFaultEvery, sc.BrokerFaultRounds = time.Second, 1
	sc.BrokerFaults = []string{"kill-coordinator", "pause-past-session"}
	rep, err := loadtest.Run(context.Background(), stk, sc, loadtest.Options{Logger: log, Progress: testWriter{t}})
	if err != nil {
		if rep != nil {
			t.Log("\n" + rep.Markdown())
		}
		t.Fatal(err)
	}
	t.Log("\n" + rep.Markdown())
	bf := rep.BrokerFaults
	switch {
	case bf == nil:
		t.Fatal("no broker faults in the report")
	case bf.Faults["kill-coordinator"] != 1 || bf.Faults["pause-past-session"] != 1 || bf.Rounds != 1:
		t.Fatalf("faults %v in %d rounds, want one of each in one round", bf.Faults, bf.Rounds)
	case !rep.Pass:
		t.Fatalf("the run failed its checks: %v", rep.Failures)
	case rep.Trusted == nil || rep.Trusted.AckedBatches == 0 || rep.Ledger.AckedBatches == 0:
		t.Fatalf("the ledger or the trusted topic checked nothing: %+v %+v", rep.Ledger, rep.Trusted)
	}
}

// testWriter writes the run's progress lines to the test's log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}
