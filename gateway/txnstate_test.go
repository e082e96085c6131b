package gateway

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/kafkatest"
)

// envTxnStateChild names the close sequence a child process of these tests
// runs (txnstate.go's close contract); unset in the parent.
const envTxnStateChild = "FENCEGATE_TXNSTATE_CHILD"

// librdkafka's own debug lines (category eos, on stderr): the transaction
// leaving InTransaction for an abort, and rd_kafka_destroy starting.
const (
	logBeginAbort  = "Transaction state change InTransaction -> BeginAbort"
	logTerminating = "Terminating instance"
	logAssertion   = "Assertion"
)

// TestCloseAbortsUnsettledTransaction: a producer closed while the records
// of its open transaction have no delivery report yet (a send cut short by
// its deadline) is aborted before librdkafka destroys it. Destroyed while
// InTransaction with the partition's first AddPartitionsToTxn possibly
// still to send, librdkafka 2.11 can abort the process
// ("rd_kafka_txn_handle_AddPartitionsToTxn: Assertion
// 'rk->rk_eos.txn_req_cnt > 0' failed", see producer.close). The child runs
// the sequence with librdkafka's eos debug log on stderr; the transaction
// must have left InTransaction before "Terminating instance", and the child
// must exit cleanly. Fails with a close that destroys the instance as it is.
func TestCloseAbortsUnsettledTransaction(t *testing.T) {
	if os.Getenv(envTxnStateChild) == "unsettled" {
		closeAfterSend(t, true)
		return
	}
	t.Parallel()
	out := runTxnStateChild(t, "^TestCloseAbortsUnsettledTransaction$", "unsettled")
	term := strings.Index(out, logTerminating)
	if term < 0 {
		t.Fatalf("the child never destroyed its producer:\n%s", tail(out))
	}
	if abort := strings.Index(out, logBeginAbort); abort < 0 || abort > term {
		t.Fatalf("librdkafka was destroyed with the transaction InTransaction and its records unsettled (abort logged at %d, destroy at %d):\n%s",
			abort, term, tail(out))
	}
	if strings.Contains(out, "still in queue or transit") {
		t.Fatalf("the unsettled record was still queued when the producer was destroyed:\n%s", tail(out))
	}
}

// TestCloseLeavesSettledTransactionAlone: once every record of the open
// transaction has its delivery report, close destroys the producer without
// aborting: the partition is registered, nothing is left to send, and an
// abort there could bump the epoch of an instance whose generation must
// keep it (produce.go ends such a generation instead of aborting).
func TestCloseLeavesSettledTransactionAlone(t *testing.T) {
	if os.Getenv(envTxnStateChild) == "settled" {
		closeAfterSend(t, false)
		return
	}
	t.Parallel()
	out := runTxnStateChild(t, "^TestCloseLeavesSettledTransactionAlone$", "settled")
	if !strings.Contains(out, logTerminating) {
		t.Fatalf("the child never destroyed its producer:\n%s", tail(out))
	}
	if strings.Contains(out, logBeginAbort) {
		t.Fatalf("close aborted a transaction whose records were all delivered:\n%s", tail(out))
	}
}

// runTxnStateChild re-runs this test binary for test run with the child
// sequence mode, and returns its combined output (librdkafka writes its log
// to stderr, which shares the pipe with stdout, so lines keep their order).
// A child that dies (librdkafka's abort() above all) fails t.
func runTxnStateChild(t *testing.T, run, mode string) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run="+run, "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), envTxnStateChild+"="+mode)
	b, err := cmd.CombinedOutput()
	out := string(b)
	if err != nil || strings.Contains(out, logAssertion) {
		t.Fatalf("child (%s) failed: %v\n%s", mode, err, tail(out))
	}
	if !strings.Contains(out, "--- PASS") {
		t.Fatalf("child (%s) did not pass:\n%s", mode, tail(out))
	}
	return out
}

// closeAfterSend runs in the child: one transactional producer against the
// embedded broker, one open transaction with one record, then close. With
// cut, send's deadline has already passed, so it returns before any
// delivery report (the barrier of a handover whose budget was spent in
// InitTransactions); without, it waits for the report.
func closeAfterSend(t *testing.T, cut bool) {
	k := kafkatest.Start(t, "txnstate", 1)
	cfg := KafkaConfig{Config: k.Conn, TransactionTimeoutMS: 10000, Extra: map[string]string{"debug": "eos"}}
	p, err := newProducer(cfg, k.RouterPrefix("txnstate")+"/close")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := p.warm(ctx, k.Topic); err != nil {
		t.Fatal(err)
	}
	if err := p.p.InitTransactions(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.p.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	sctx := ctx
	if cut {
		var scancel context.CancelFunc
		sctx, scancel = context.WithCancel(ctx)
		scancel()
	}
	_, err = p.send(sctx, k.Topic, 0, []record{{key: []byte("k"), value: []byte("v")}})
	switch {
	case cut && !errors.Is(err, context.Canceled):
		t.Fatalf("send with a spent deadline: %v, want context.Canceled before any delivery report", err)
	case !cut && err != nil:
		t.Fatalf("send: %v", err)
	}
	p.close()
}

// tail is the end of a child's output, enough to read what went wrong.
func tail(s string) string {
	const n = 6000
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}
