package materializer_test

import (
	"encoding/hex"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/fencegate/fencegate/internal/pgtest"
	"github.com/fencegate/fencegate/materializer"
)

// hugeBatchID is a batch id whose dedup key cannot enter the ledger's
// btree index (at most 2704 bytes a row; random hex does not compress).
func hugeBatchID() string {
	b := make([]byte, 2000)
	r := rand.New(rand.NewPCG(20, 30))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return hex.EncodeToString(b)
}

// refusedReceipt is one malformed receipt as the test expects it.
type refusedReceipt struct {
	offset int64
	cause  string // a part of the detail
	lease  string // "" for NULL
}

// TestFM30_RecordTheLedgerCannotApplyIsRefusedAndThePartitionGoesOn:
// records written straight into the topic that the ledger cannot keep (a
// NUL in a worker's header value, which jsonb refuses with SQLSTATE
// 22P05; a NUL in a stamp header; a batch id too large for the dedup
// key's index, SQLSTATE 54000; a header value that is not UTF-8; a seq
// beyond the ledger's integer, which wrapped onto seq 0) each get
// a malformed receipt with its offset and cause, and the partition goes
// on: the records before and after them are accepted, with the same
// ledger whatever the chunk size. Before, the first of them stopped Run
// with the Postgres error, on every restart.
func TestFM30_RecordTheLedgerCannotApplyIsRefusedAndThePartitionGoesOn(t *testing.T) {
	t.Parallel()
	b := setup(t)
	nulHeader := data("shard:1", 3, "nul-header", 0)
	nulHeader.headers = []kafka.Header{{Key: "h", Value: []byte("a\x00b")}}
	notUTF8 := data("shard:1", 3, "not-utf8", 0)
	notUTF8.headers = []kafka.Header{{Key: "h", Value: []byte{'a', 0xff}}}
	first := b.write(1, bar("shard:1", 3), data("shard:1", 3, "before", 0), nulHeader) - 1
	last := b.write(1, data("shard:1", 3, "nul\x00stamp", 0), data("shard:1", 3, hugeBatchID(), 0), notUTF8,
		data("shard:1", 3, "wrap", 1<<32), data("shard:1", 3, "after", 0))
	want := []refusedReceipt{
		{first + 1, "SQLSTATE 22P05", ""},
		{first + 2, "fencegate-batch is not valid UTF-8 without NUL", "shard:1"},
		{first + 3, "SQLSTATE 54000", ""},
		{first + 4, `header "h" is not valid UTF-8`, "shard:1"},
		{first + 5, "fencegate-seq 4294967296 exceeds", "shard:1"},
	}
	m := b.newMaterializer(nil)
	b.runUntil(m, b.db, 1, last)
	checkRefused(t, b.db, want, "before", "after")
	c := m.Counts()
	if c[materializer.Malformed] != 5 || c[materializer.Accepted] != 2 || c[materializer.Barrier] != 1 {
		t.Fatalf("verdict counts %v", c)
	}
	ref := snapshot(t, b.db)
	one := pgtest.New(t)
	b.runUntil(b.newMaterializerOn(one, func(c *materializer.Config) { c.MaxBatch = 1 }), one, 1, last)
	if got := snapshot(t, one); got != ref {
		t.Fatalf("record by record, the ledger differs:\n%s\nwant:\n%s", got, ref)
	}
}

// checkRefused checks the malformed receipts and that exactly the batches
// accepted are in the ledger.
func checkRefused(t *testing.T, db *pgtest.DB, want []refusedReceipt, accepted ...string) {
	t.Helper()
	rows, err := db.Pool.Query(t.Context(), `SELECT "offset", detail, coalesce(lease, ''), batch_id IS NULL, owner_id IS NULL
		FROM rejected_records WHERE reason = 'malformed' ORDER BY "offset"`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var i int
	for ; rows.Next(); i++ {
		var got refusedReceipt
		var noBatch, noOwner bool
		if err := rows.Scan(&got.offset, &got.cause, &got.lease, &noBatch, &noOwner); err != nil {
			t.Fatal(err)
		}
		if i >= len(want) || got.offset != want[i].offset || !strings.Contains(got.cause, want[i].cause) || got.lease != want[i].lease {
			t.Fatalf("malformed receipt %d: %+v, want %+v", i, got, want)
		}
		if want[i].lease == "" && (!noBatch || !noOwner) {
			t.Errorf("receipt at %d keeps fields of the record the ledger refused", got.offset)
		}
	}
	if i != len(want) {
		t.Fatalf("%d malformed receipts, want %d", i, len(want))
	}
	var batches []string
	if err := db.Pool.QueryRow(t.Context(), `SELECT coalesce(array_agg(batch_id ORDER BY "offset"), '{}') FROM accepted_records`).Scan(&batches); err != nil {
		t.Fatal(err)
	}
	if strings.Join(batches, ",") != strings.Join(accepted, ",") {
		t.Fatalf("ledger holds batches %q, want %q", batches, accepted)
	}
}
