package materializer_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/fencegate/fencegate/internal/kafkatest"
	"github.com/fencegate/fencegate/internal/syncbuf"
	"github.com/fencegate/fencegate/kafkaconn"
	"github.com/fencegate/fencegate/materializer"
)

// TestFM117_TrustedChunkOutlivesAFrozenBroker: the broker (on Apache
// Kafka of the test's own, the one node, so the transaction coordinator
// of every partition's producer) freezes with SIGSTOP while a chunk's
// transaction is open, and is resumed only once the sink has met the
// failure. The chunk's transaction times out; the sink must abort it,
// read its state again and judge the chunk again once the broker
// answers, never stop (`fencegate materialize` exited on a SIGKILLed
// coordinator's timed-out transaction in the long broker-fault run); and
// the trusted topic is then the ledger's, each record once.
func TestFM117_TrustedChunkOutlivesAFrozenBroker(t *testing.T) {
	t.Parallel()
	// Resumed, the broker aborts the chunk's transaction (open longer
	// than its 5 s timeout) within 500 ms, so the sink's retried commit,
	// or its abort after the commit's messages timed out, may be refused
	// as fenced: each path must end with the chunk judged again (a
	// loaded CI run took the second, and the sink stopped on the fenced
	// abort).
	b, a, last, want := abortingBundle(t)

	met := newLineWatch("asked again")
	var once sync.Once
	freeze := func(c *materializer.TrustedConfig) {
		c.TransactionTimeout = 5 * time.Second
		c.Hooks.BeforeCommit = func(string, int32) error {
			once.Do(func() {
				resume := a.Pause(1)
				t.Cleanup(resume) // SIGCONT again is harmless
				go func() { <-met.seen; resume() }()
			})
			return nil
		}
	}
	logged := func(c *materializer.Config) {
		c.MaxBatch = 4
		c.Logger = slog.New(slog.NewTextHandler(met, nil))
	}
	ts := b.newTrusted("frozen", freeze, logged)
	if err := b.runTrustedUntil(ts, 1, last); err != nil {
		t.Fatalf("the sink stopped on a frozen broker: %v (FM117)\n%s", err, met.log.String())
	}
	select {
	case <-met.seen:
	default:
		t.Fatal("no chunk met the frozen broker: the test proved nothing")
	}
	if got := b.trustedView(ts, 1); got != want {
		t.Fatalf("after the frozen broker:\n%s\nwant:\n%s", got, want)
	}
}

// lineWatch is a log sink that closes seen at the first line holding
// match.
type lineWatch struct {
	log   syncbuf.Buffer // every line, for a failure's message
	mu    sync.Mutex
	match []byte
	seen  chan struct{}
	done  bool
}

func newLineWatch(match string) *lineWatch {
	return &lineWatch{match: []byte(match), seen: make(chan struct{})}
}

func (w *lineWatch) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.log.Write(p)
	if !w.done && bytes.Contains(p, w.match) {
		w.done = true
		close(w.seen)
	}
	return len(p), nil
}

// TestFM118_TrustedPartitionTakenAgainAfterItsTransactionTimedOut: a
// chunk's transaction outlives the transaction timeout (the sink was held
// up, as a coordinator that answers nothing for a minute holds it), so the
// broker aborts it and bumps the producer's epoch: the sink's next call
// is refused for good (fenced), though no other instance took the
// partition. The sink must join its group again and take what the group
// gives it (a new producer, InitTransactions, its state read again) and
// judge the chunk again, never stop (`fencegate materialize` exited so in
// the long broker-fault run); and the trusted topic is then the
// ledger's, each record once. On Apache Kafka (a broker
// of the test's own, checking for timed-out transactions every 500 ms).
func TestFM118_TrustedSinkRejoinsAfterItsTransactionTimedOut(t *testing.T) {
	t.Parallel()
	b, a, last, want := abortingBundle(t)

	var once sync.Once
	var ts *materializer.TrustedSink
	held := func(c *materializer.TrustedConfig) {
		c.TransactionTimeout = 3 * time.Second
		c.Hooks.BeforeCommit = func(topic string, partition int32) error {
			once.Do(func() {
				id := fmt.Sprintf("%s%s/%s/%d", ts.TransactionalIDPrefix(), "timedout", topic, partition)
				waitAbortedByTheBroker(t, a.Conn, id)
			})
			return nil
		}
	}
	logs := &syncbuf.Buffer{}
	ts = b.newTrusted("timedout", held, func(c *materializer.Config) {
		c.MaxBatch = 4
		c.Logger = slog.New(slog.NewTextHandler(logs, nil))
	})
	if err := b.runTrustedUntil(ts, 1, last); err != nil {
		t.Fatalf("the sink stopped when the broker aborted its timed-out transaction: %v (FM118)\n%s", err, logs.String())
	}
	if !strings.Contains(logs.String(), "joining again") {
		t.Fatalf("no producer was fenced: the test proved nothing\n%s", logs.String())
	}
	if got := b.trustedView(ts, 1); got != want {
		t.Fatalf("after the timed-out transaction:\n%s\nwant:\n%s", got, want)
	}
}

// waitAbortedByTheBroker polls DescribeTransactions until the
// transaction of id is no longer ongoing: the coordinator aborted it at
// its timeout.
func waitAbortedByTheBroker(t *testing.T, conn kafkaconn.Config, id string) {
	opts, err := conn.KgoOpts()
	if err != nil {
		t.Error(err)
		return
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Error(err)
		return
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		req := kmsg.NewPtrDescribeTransactionsRequest()
		req.TransactionalIDs = []string{id}
		resp, err := req.RequestWith(ctx, cl)
		if err == nil && len(resp.TransactionStates) == 1 && resp.TransactionStates[0].ErrorCode == 0 &&
			resp.TransactionStates[0].State != "Ongoing" {
			t.Logf("the broker aborted %s: %s, epoch %d", id, resp.TransactionStates[0].State, resp.TransactionStates[0].ProducerEpoch)
			return
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Errorf("the transaction of %s was never aborted by the broker (%v)", id, err)
			return
		}
	}
}

// abortingBundle is a bundle on an Apache Kafka broker of the test's own
// that aborts timed-out transactions within 500 ms, with the trusted
// workload written and applied to the ledger: its last offset on
// partition 1 and the ledger's view of it.
func abortingBundle(t *testing.T) (*testBundle, *kafkatest.Apache, int64, string) {
	a := kafkatest.StartApache(t, topic, partitions, kafkatest.ApacheOptions{Config: []string{
		"transaction.abort.timed.out.transaction.cleanup.interval.ms=500"}})
	b := setupOn(t, a.Cluster)
	last := b.trustedWorkload()
	b.runUntil(b.newMaterializer(nil), b.db, 1, last)
	return b, a, last, b.ledgerView(1)
}
