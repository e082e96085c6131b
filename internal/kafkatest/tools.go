package kafkatest

import (
	"bytes"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/kafkaconn"
)

// Kafka's own command-line tools (run by deploy/dev/kafka.sh tool) as
// readers independent of every reader fencegate wrote: what they print is
// what Apache Kafka says the log and the coordinator hold.

// Tool runs one of Kafka's tools (kafka.sh tool NAME ARGS...) and returns
// what it printed on standard output, failing t when it cannot run.
func Tool(t testing.TB, name string, args ...string) string {
	t.Helper()
	script, err := Script()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", append([]string{script, "tool", name}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	// The console consumer ends at its --timeout-ms with an error and a
	// non-zero status once it has printed everything: that is its normal end.
	if err != nil && !strings.Contains(stderr.String(), "Processed a total of") {
		t.Fatalf("kafka.sh tool %s %v: %v\n%s", name, args, err, stderr.String())
	}
	return stdout.String()
}

// ToolRecord is one record as kafka-console-consumer printed it.
type ToolRecord struct {
	Offset  int64
	Headers map[string]string
	Key     string
	Value   string
}

// ConsoleRead reads partition of topic from the start with Kafka's
// console consumer (read_committed: what a downstream reader of Apache
// Kafka sees), with offsets, headers and keys printed.
func ConsoleRead(t testing.TB, conn kafkaconn.Config, topic string, partition int32) []ToolRecord {
	t.Helper()
	out := Tool(t, "console-consumer", "--bootstrap-server", conn.Brokers, "--topic", topic,
		"--partition", strconv.Itoa(int(partition)), "--offset", "earliest", "--isolation-level", "read_committed",
		"--formatter-property", "print.offset=true", "--formatter-property", "print.headers=true",
		"--formatter-property", "print.key=true", "--timeout-ms", "4000")
	var recs []ToolRecord
	for _, line := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		if line == "" {
			continue
		}
		r, err := parseConsoleLine(line)
		if err != nil {
			t.Fatalf("console consumer line %q: %v", line, err)
		}
		recs = append(recs, r)
	}
	return recs
}

// parseConsoleLine reads "Offset:N<TAB>h1:v1,h2:v2<TAB>key<TAB>value".
func parseConsoleLine(line string) (ToolRecord, error) {
	f := strings.SplitN(line, "\t", 4)
	if len(f) != 4 || !strings.HasPrefix(f[0], "Offset:") {
		return ToolRecord{}, fmt.Errorf("want 4 tab-separated fields, the first \"Offset:N\"")
	}
	off, err := strconv.ParseInt(strings.TrimPrefix(f[0], "Offset:"), 10, 64)
	if err != nil {
		return ToolRecord{}, err
	}
	r := ToolRecord{Offset: off, Headers: map[string]string{}, Key: f[2], Value: f[3]}
	if f[1] != "NO_HEADERS" {
		for _, h := range strings.Split(f[1], ",") {
			k, v, _ := strings.Cut(h, ":")
			r.Headers[k] = v
		}
	}
	return r, nil
}

// TxnState is one transactional id as kafka-transactions describe sees it.
type TxnState struct {
	ProducerID    int64
	ProducerEpoch int16
	State         string
}

// DescribeTransaction asks the transaction coordinator about id with
// kafka-transactions describe.
func DescribeTransaction(t testing.TB, conn kafkaconn.Config, id string) TxnState {
	t.Helper()
	out := Tool(t, "transactions", "--bootstrap-server", conn.Brokers, "describe", "--transactional-id", id)
	rows := table(out)
	if len(rows) != 1 {
		t.Fatalf("kafka-transactions describe %s: %d rows\n%s", id, len(rows), out)
	}
	pid, err1 := strconv.ParseInt(rows[0]["ProducerId"], 10, 64)
	epoch, err2 := strconv.ParseInt(rows[0]["ProducerEpoch"], 10, 16)
	if err1 != nil || err2 != nil {
		t.Fatalf("kafka-transactions describe %s: %v %v\n%s", id, err1, err2, out)
	}
	return TxnState{ProducerID: pid, ProducerEpoch: int16(epoch), State: rows[0]["TransactionState"]}
}

// ListTransactions returns the transactional ids the cluster knows, with
// kafka-transactions list.
func ListTransactions(t testing.TB, conn kafkaconn.Config) map[string]bool {
	t.Helper()
	ids := map[string]bool{}
	for _, row := range table(Tool(t, "transactions", "--bootstrap-server", conn.Brokers, "list")) {
		ids[row["TransactionalId"]] = true
	}
	return ids
}

// table reads a tool's whitespace-aligned table: a header line, then rows.
func table(out string) []map[string]string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) < 2 {
		return nil
	}
	cols := strings.Fields(lines[0])
	var rows []map[string]string
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		row := map[string]string{}
		for i, c := range cols {
			if i < len(f) {
				row[c] = f[i]
			}
		}
		rows = append(rows, row)
	}
	return rows
}
