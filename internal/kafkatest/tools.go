package kafkatest

import (
	"strconv"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/internal/kafkadev"
	"github.com/fencegate/fencegate/kafkaconn"
)

// Kafka's own command-line tools (kafkadev's), failing t when they
// cannot run.

// Tool runs one of Kafka's tools (kafka.sh tool NAME ARGS...) and returns
// what it printed on standard output, failing t when it cannot run.
func Tool(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := kafkadev.Tool(name, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// ToolRecord is one record as kafka-console-consumer printed it.
type ToolRecord = kafkadev.ToolRecord

// ConsoleRead reads partition of topic from the start with Kafka's
// console consumer (read_committed), ending after 4 s without a record.
func ConsoleRead(t testing.TB, conn kafkaconn.Config, topic string, partition int32) []ToolRecord {
	t.Helper()
	recs, err := kafkadev.ConsoleRead(conn.Brokers, topic, partition, 4)
	if err != nil {
		t.Fatal(err)
	}
	return recs
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
