package materializer_test

import (
	"bytes"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/kafkatest"
	"github.com/fencegate/fencegate/internal/syncbuf"
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
	a := kafkatest.StartApache(t, topic, partitions, kafkatest.ApacheOptions{})
	b := setupOn(t, a.Cluster)
	last := b.trustedWorkload()
	b.runUntil(b.newMaterializer(nil), b.db, 1, last)
	want := b.ledgerView(1)

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
