package materializer_test

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/fencegate/fencegate/client/wire"

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
// beyond the ledger's integer, which wrapped onto seq 0; a header name
// twice, of which the ledger kept the last) each get
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
	twice := data("shard:1", 3, "twice", 0)
	twice.headers = []kafka.Header{{Key: "h", Value: []byte("1")}, {Key: "h", Value: []byte("2")}}
	first := b.write(1, bar("shard:1", 3), data("shard:1", 3, "before", 0), nulHeader) - 1
	last := b.write(1, data("shard:1", 3, "nul\x00stamp", 0), data("shard:1", 3, hugeBatchID(), 0), notUTF8,
		data("shard:1", 3, "wrap", 1<<32), twice, data("shard:1", 3, "after", 0))
	want := []refusedReceipt{
		{first + 1, `header "h" holds a NUL`, ""},
		{first + 2, "fencegate-batch is not valid UTF-8 without NUL", "shard:1"},
		{first + 3, "SQLSTATE 54000", ""},
		{first + 4, `header "h" is not valid UTF-8`, "shard:1"},
		{first + 5, "fencegate-seq 4294967296 exceeds", "shard:1"},
		{first + 6, `header "h" appears twice`, "shard:1"},
	}
	m := b.newMaterializer(nil)
	b.runUntil(m, b.db, 1, last)
	checkRefused(t, b.db, want, "before", "after")
	c := m.Counts()
	if c[materializer.Malformed] != 6 || c[materializer.Accepted] != 2 || c[materializer.Barrier] != 1 {
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

// TestFM29_RecordsReachTheLedgerByteExact: keys and values of any bytes
// (null and empty kept apart) and headers of any UTF-8 without NUL, sent
// through the gateway in the JSON body and in the binary body, are in the
// ledger byte for byte.
func TestFM29_RecordsReachTheLedgerByteExact(t *testing.T) {
	t.Parallel()
	b := setup(t)
	srv := b.gateway()
	w := &worker{t: t, url: srv.URL, owner: "w1"}
	if st := w.acquire("shard:29", false); st != http.StatusCreated {
		t.Fatalf("acquire: %d", st)
	}
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	headers := []wire.Header{{Name: "text", Value: []byte("é \u2028 \U0001F600 \ufffd \"q\" back\\slash \x01\x7f")},
		{Name: "empty", Value: []byte{}}, {Name: "ünï \t", Value: []byte("x")}}
	recs := []wire.Record{{Key: all, Value: []byte{0xff, 0, 0xfe, '"'}, Headers: headers}, {Key: nil, Value: []byte{}}, {Key: []byte{}, Value: nil}}
	jsonRecs := make([]any, len(recs))
	for i, r := range recs {
		m := map[string]any{}
		for field, v := range map[string][]byte{"key": r.Key, "value": r.Value} {
			if v != nil {
				m[field] = map[string]any{"type": "BINARY", "data": base64.StdEncoding.EncodeToString(v)}
			}
		}
		hs := map[string]string{}
		for _, h := range r.Headers {
			hs[h.Name] = string(h.Value)
		}
		m["headers"] = hs
		jsonRecs[i] = m
	}
	if st, out := w.call("POST", "/v1/leases/shard:29/records", map[string]any{"owner_id": "w1", "token": w.token,
		"batch_id": "as-json", "records": jsonRecs}); st != http.StatusOK {
		t.Fatalf("JSON body: %d %v", st, out)
	}
	w.postBinary("/v1/leases/shard:29/records", wire.Batch{OwnerID: "w1", Token: w.token, BatchID: "as-binary", Records: recs})
	p := b.partition("shard:29")
	b.runUntil(b.newMaterializer(nil), b.db, p, b.last(p))
	for _, batch := range []string{"as-json", "as-binary"} {
		rows, err := b.db.Pool.Query(t.Context(), `SELECT key, key IS NULL, value, value IS NULL, headers::text
			FROM accepted_records WHERE batch_id = $1 ORDER BY seq`, batch)
		if err != nil {
			t.Fatal(err)
		}
		i := 0
		for ; rows.Next(); i++ {
			var key, value []byte
			var noKey, noValue bool
			var hs string
			if err := rows.Scan(&key, &noKey, &value, &noValue, &hs); err != nil {
				t.Fatal(err)
			}
			want := recs[i]
			if !bytes.Equal(key, want.Key) || noKey != (want.Key == nil) || !bytes.Equal(value, want.Value) || noValue != (want.Value == nil) {
				t.Errorf("%s record %d: key %q (null %v) value %q (null %v), want %q %q", batch, i, key, noKey, value, noValue, want.Key, want.Value)
			}
			var got map[string]string
			if err := json.Unmarshal([]byte(hs), &got); err != nil {
				t.Fatal(err)
			}
			if len(got) != len(want.Headers) {
				t.Errorf("%s record %d: headers %q, want %q", batch, i, got, want.Headers)
			}
			for _, h := range want.Headers {
				if v, ok := got[h.Name]; !ok || v != string(h.Value) {
					t.Errorf("%s record %d: header %q is %q in the ledger, want %q", batch, i, h.Name, v, h.Value)
				}
			}
		}
		rows.Close()
		if i != len(recs) {
			t.Fatalf("%s: %d records in the ledger, want %d", batch, i, len(recs))
		}
	}
}

// postBinary sends a produce in the binary body and wants 200.
func (w *worker) postBinary(path string, batch wire.Batch) {
	w.t.Helper()
	req, _ := http.NewRequest("POST", w.url+path, bytes.NewReader(wire.Append(nil, batch)))
	req.Header.Set("Authorization", "Bearer t")
	req.Header.Set("Content-Type", wire.ContentType)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		w.t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		raw, _ := io.ReadAll(resp.Body)
		w.t.Fatalf("binary body: %d %s", resp.StatusCode, raw)
	}
}

// TestNULHeaderRepeatIsMalformedWhateverTheChunk: a record with a NUL in a
// header that repeats a batch applied just before it in the same chunk is
// malformed, as it is alone in a chunk of its own. It was filed a
// duplicate in the one case (the repeat never reached the jsonb cast that
// refuses it) and malformed in the other, so the ledger depended on where
// chunks began: TestFM67_MaterializerLinksCutAndHealed once saw the
// ledger built through its faults differ from a clean replay.
func TestNULHeaderRepeatIsMalformedWhateverTheChunk(t *testing.T) {
	t.Parallel()
	b := setup(t)
	repeat := data("shard:1", 3, "g", 0)
	repeat.headers = []kafka.Header{{Key: "h", Value: []byte("a\x00b")}}
	last := b.write(1, bar("shard:1", 3), data("shard:1", 3, "g", 0), repeat)
	b.runUntil(b.newMaterializer(nil), b.db, 1, last)
	one := pgtest.New(t)
	b.runUntil(b.newMaterializerOn(one, func(c *materializer.Config) { c.MaxBatch = 1 }), one, 1, last)
	for name, db := range map[string]*pgtest.DB{"one chunk": b.db, "a record a chunk": one} {
		if n := count(t, db, `SELECT count(*) FROM rejected_records WHERE reason = 'malformed' AND lease IS NULL`); n != 1 {
			t.Errorf("%s: %d malformed receipts without the record's fields, want 1:\n%s", name, n, snapshot(t, db))
		}
	}
	if got, want := snapshot(t, b.db), snapshot(t, one); got != want {
		t.Fatalf("the ledger depends on the chunking:\n%s\nrecord by record:\n%s", got, want)
	}
}
