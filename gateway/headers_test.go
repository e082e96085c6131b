package gateway_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/client/wire"
)

// TestFM29_HeaderTheLedgerCannotKeepRefused: a header name or value that
// is not valid UTF-8 or holds U+0000 is refused, in the JSON body and in
// the binary body, with 400 invalid_request naming the record and the
// header (a JSON body that is not UTF-8: the byte); nothing is written. Before the rule, each was answered 200 and
// the NUL halted the ledger (SQLSTATE 22P05) or the bytes came back as
// U+FFFD.
func TestFM29_HeaderTheLedgerCannotKeepRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.newReplica(nil)
	token := r.mustAcquire(t, "shard:33", "w1", 30*time.Second)
	path := "/v1/leases/shard:33/records"
	// jsonBody puts headers, written as raw JSON, on the second record.
	jsonBody := func(headers string) string {
		return fmt.Sprintf(`{"owner_id":"w1","token":%d,"batch_id":"b1","records":[`+
			`{"value":{"type":"STRING","data":"ok"}},{"value":{"type":"STRING","data":"ok"},"headers":%s}]}`, token, headers)
	}
	binaryBody := func(name string, value []byte) wire.Batch {
		return wire.Batch{OwnerID: "w1", Token: token, BatchID: "b1", Records: []wire.Record{
			{Value: []byte("ok")}, {Value: []byte("ok"), Headers: []wire.Header{{Name: "fine", Value: []byte("x")}, {Name: name, Value: value}}}}}
	}
	cases := []struct {
		name   string
		body   any
		detail string
	}{
		{"json value with NUL", jsonBody(`{"h":"a\u0000b"}`), `records[1]: header "h"`},
		{"json name with NUL", jsonBody(`{"h\u0000":"v"}`), `records[1]: header "h\x00"`},
		// A JSON body must be UTF-8: the decoder would read such bytes as
		// U+FFFD, so the refusal names the byte, not the header.
		{"json value not UTF-8", jsonBody("{\"h\":\"a\xffb\"}"), notUTF8At(jsonBody("{\"h\":\"a\xffb\"}"), "\xff")},
		{"json name not UTF-8", jsonBody("{\"h\xfe\":\"v\"}"), notUTF8At(jsonBody("{\"h\xfe\":\"v\"}"), "\xfe")},
		{"binary value with NUL", binaryBody("h", []byte("a\x00b")), `records[1]: header "h"`},
		{"binary value not UTF-8", binaryBody("h", []byte{'a', 0xff, 'b'}), `records[1]: header "h"`},
		{"binary value half a rune", binaryBody("h", []byte("\xe2\x82")), `records[1]: header "h"`},
		{"binary name with NUL", binaryBody("h\x00", []byte("v")), `records[1]: header "h\x00"`},
		{"binary name not UTF-8", binaryBody("h\xfe", []byte("v")), "records[1]: header name"},
	}
	for _, tc := range cases {
		rep := r.do(t, "POST", path, tc.body)
		detail, _ := rep.body["detail"].(string)
		if rep.status != 400 || rep.code() != "invalid_request" || !strings.Contains(detail, tc.detail) {
			t.Errorf("%s: %d %s, want 400 invalid_request with a detail naming %s", tc.name, rep.status, rep.raw, tc.detail)
		}
	}
	log := &ackLog{}
	b.mustProduceReplied(t, log, "shard:33", token, "b1",
		r.do(t, "POST", path, binaryBody("h", []byte("é \u2028 \U0001F600 \x7f"))))
	if recs := b.checkInvariants(t, "shard:33", log); len(recs) != 3 {
		t.Fatalf("partition holds %d records, want barrier + 2 (a refused body wrote something)", len(recs))
	}
}

func notUTF8At(body, bad string) string {
	return fmt.Sprintf("not UTF-8 at byte %d", strings.Index(body, bad))
}
