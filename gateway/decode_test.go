package gateway

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/fencegate/fencegate/barrier"
	"github.com/fencegate/fencegate/client/wire"
	"github.com/fencegate/fencegate/txnmap"
)

// FuzzFM19_DecodeProduce: the produce decoder never panics, refuses with a
// 4xx code, and whatever it accepts respects every limit and rule.
func FuzzFM19_DecodeProduce(f *testing.F) {
	seeds := []string{
		`{"owner_id":"w","token":1,"batch_id":"b","records":[{"key":{"type":"STRING","data":"k"},"value":{"type":"BINARY","data":"aGk="}}]}`,
		`{"owner_id":"w","token":"1","batch_id":"b","records":[]}`,
		`{"owner_id":"w","token":1,"batch_id":"b","records":[{"value":{"type":"JSON","data":{"a":[1,2]}},"headers":{"h":"v"}}]}`,
		`{"owner_id":"w","token":1,"batch_id":"b","records":[{"headers":{"fencegate-token":"9"}}]}`,
		`{"topic":"x"}`, `[]`, `{`, ``, `null`,
	}
	for _, s := range seeds {
		f.Add([]byte(s), false)
	}
	for _, b := range []wire.Batch{
		{OwnerID: "w", Token: 1, BatchID: "b", Records: []wire.Record{{Key: []byte("k"), Value: []byte("hi"),
			Headers: []wire.Header{{Name: "h", Value: []byte("v")}}}}},
		{OwnerID: "w", Token: 1, BatchID: "b", Records: []wire.Record{{Headers: []wire.Header{{Name: "fencegate-token", Value: []byte("9")}}}}},
		{OwnerID: "w", Token: 1, BatchID: "b", Records: []wire.Record{{Headers: []wire.Header{{Name: "h"}, {Name: "h"}}}}},
		{OwnerID: "", Token: 1, BatchID: "b", Records: []wire.Record{{}}},
	} {
		f.Add(wire.Append(nil, b), true)
	}
	f.Add([]byte(`{"owner_id":"w","token":1,"batch_id":"b","records":[{"headers":{"h":"a\u0000b"}}]}`), false)
	f.Add([]byte("{\"owner_id\":\"w\",\"token\":1,\"batch_id\":\"b\",\"records\":[{\"headers\":{\"h\":\"a\xffb\"}}]}"), false)
	f.Add(wire.Append(nil, wire.Batch{OwnerID: "w", Token: 1, BatchID: "b", Records: []wire.Record{
		{Headers: []wire.Header{{Name: "h", Value: []byte("a\x00\xffb")}}}}}), true)
	lim := Limits{MaxRecords: 8, MaxRecordBytes: 256, MaxRequestBytes: 4096, MaxHeaders: 8, MaxHeaderBytes: 256}
	f.Fuzz(func(t *testing.T, body []byte, binary bool) {
		ct := "application/json"
		if binary {
			ct = wire.ContentType
		}
		req, err := decodeProduce(body, ct, "shard:1", lim)
		if err != nil {
			if s := statusOf(err.Code); s < 400 || s >= 500 {
				t.Fatalf("refusal with status %d (%s)", s, err.Code)
			}
			return
		}
		if !binary && !utf8.Valid(body) {
			t.Fatalf("accepted a JSON body that is not UTF-8: %q", body)
		}
		checkAccepted(t, req, lim)
	})
}

func checkAccepted(t *testing.T, req ProduceRequest, lim Limits) {
	t.Helper()
	if req.Token <= 0 || req.Owner == "" || req.BatchID == "" {
		t.Fatalf("accepted without token/owner/batch: %+v", req)
	}
	if len(req.Records) == 0 || len(req.Records) > lim.MaxRecords {
		t.Fatalf("accepted %d records", len(req.Records))
	}
	for _, r := range req.Records {
		if len(r.Headers) > lim.MaxHeaders {
			t.Fatalf("accepted %d headers", len(r.Headers))
		}
		size := len(r.Key) + len(r.Value)
		seen := map[string]bool{}
		for _, h := range r.Headers {
			if barrier.Reserved(h.Key) || h.Key == "" || seen[h.Key] {
				t.Fatalf("accepted header %q (reserved, empty or twice)", h.Key)
			}
			seen[h.Key] = true
			checkKept(t, h.Key, h.Value)
			size += len(h.Key) + len(h.Value)
		}
		if size > lim.MaxRecordBytes {
			t.Fatalf("accepted a record of %d bytes", size)
		}
	}
}

// checkKept fails unless the ledger keeps the header byte-exact: UTF-8
// without NUL (what jsonb text holds), and the same bytes after the JSON
// round trip the ledger's headers column takes.
func checkKept(t *testing.T, name string, value []byte) {
	t.Helper()
	if !utf8.ValidString(name) || !utf8.Valid(value) || strings.ContainsRune(name, 0) || bytes.IndexByte(value, 0) >= 0 {
		t.Fatalf("accepted header %q = %q, which the ledger cannot keep", name, value)
	}
	raw, err := json.Marshal(map[string]string{name: string(value)})
	if err != nil {
		t.Fatal(err)
	}
	var back map[string]string
	if err := json.Unmarshal(raw, &back); err != nil || len(back) != 1 || back[name] != string(value) {
		t.Fatalf("header %q = %q comes back from JSON as %q (%v)", name, value, back, err)
	}
}

// FuzzFM29_BinaryHeaders: the binary body accepts a header exactly when
// the ledger can keep it (and the other rules hold), and what it accepts
// is the bytes sent: header name and value, key and value.
func FuzzFM29_BinaryHeaders(f *testing.F) {
	for _, s := range [][2]string{{"h", "v"}, {"h", "a\x00b"}, {"h\x00", "v"}, {"h", "\xff"}, {"\xe2\x82", "v"},
		{"h", "\U0001F600 \u2028 \ufffd"}, {"fencegate-x", "v"}, {"", "v"}} {
		f.Add(s[0], []byte(s[1]), []byte("k"), []byte{0, 0xff})
	}
	lim := Limits{MaxRecords: 8, MaxRecordBytes: 256, MaxRequestBytes: 4096, MaxHeaders: 8, MaxHeaderBytes: 256}
	f.Fuzz(func(t *testing.T, name string, hv, key, value []byte) {
		body := wire.Append(nil, wire.Batch{OwnerID: "w", Token: 1, BatchID: "b",
			Records: []wire.Record{{Key: key, Value: value, Headers: []wire.Header{{Name: name, Value: hv}}}}})
		req, err := decodeProduce(body, wire.ContentType, "shard:1", lim)
		checkHeaderVerdict(t, name, hv, len(key)+len(value), lim, req, err)
		if err == nil && (!bytes.Equal(req.Records[0].Key, key) || !bytes.Equal(req.Records[0].Value, value)) {
			t.Fatalf("key %q value %q decoded as %q %q", key, value, req.Records[0].Key, req.Records[0].Value)
		}
	})
}

// FuzzFM29_JSONHeaders: the JSON body, the header written with its bytes
// as they are (only quote, backslash and control characters escaped):
// accepted exactly when the ledger can keep it, and decoded to the bytes
// sent.
func FuzzFM29_JSONHeaders(f *testing.F) {
	for _, s := range [][2]string{{"h", "v"}, {"h", "a\x00b"}, {"h\x00", "v"}, {"h", "\xff"}, {"\xe2\x82", "v"},
		{"h", "\U0001F600 \u2028 \ufffd \"\\"}, {"fencegate-x", "v"}, {"", "v"}} {
		f.Add(s[0], s[1])
	}
	lim := Limits{MaxRecords: 8, MaxRecordBytes: 256, MaxRequestBytes: 4096, MaxHeaders: 8, MaxHeaderBytes: 256}
	f.Fuzz(func(t *testing.T, name, hv string) {
		body := fmt.Appendf(nil, `{"owner_id":"w","token":1,"batch_id":"b","records":[{"headers":{%s:%s}}]}`, jsonText(name), jsonText(hv))
		req, err := decodeProduce(body, "application/json", "shard:1", lim)
		checkHeaderVerdict(t, name, []byte(hv), 0, lim, req, err)
	})
}

// jsonText writes s as a JSON string, its bytes as they are but for quote,
// backslash and control characters.
func jsonText(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20:
			fmt.Fprintf(&b, "\\u%04x", c)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// checkHeaderVerdict: a batch of one record with one header (and size
// bytes of key and value) is accepted exactly when the header is
// keepable, named and within the limit, and then carries the header's
// bytes.
func checkHeaderVerdict(t *testing.T, name string, value []byte, size int, lim Limits, req ProduceRequest, err *Error) {
	t.Helper()
	keep := utf8.ValidString(name) && utf8.Valid(value) && !strings.ContainsRune(name, 0) && bytes.IndexByte(value, 0) < 0
	want := keep && name != "" && !barrier.Reserved(name) && size+len(name)+len(value) <= lim.MaxRecordBytes
	if (err == nil) != want {
		t.Fatalf("header %q = %q: accepted %v (%v), want %v", name, value, err == nil, err, want)
	}
	if err != nil {
		return
	}
	hs := req.Records[0].Headers
	if len(hs) != 1 || hs[0].Key != name || !bytes.Equal(hs[0].Value, value) {
		t.Fatalf("header %q = %q decoded as %q", name, value, hs)
	}
	checkKept(t, name, value)
}

// FuzzFM19_DecodeAcquire: accepted acquires carry a valid name, an owner
// and a positive TTL.
func FuzzFM19_DecodeAcquire(f *testing.F) {
	for _, s := range []string{`{"name":"shard:1","owner_id":"w","ttl_ms":1000}`,
		`{"name":"shard:1","owner_id":"w","ttl_ms":1000,"token":5}`, `{"name":"a/b"}`, `{}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := decodeAcquire(body)
		if err != nil {
			if err.Code != CodeInvalidRequest {
				t.Fatalf("refusal with code %s", err.Code)
			}
			return
		}
		if txnmap.ValidateName(req.Name) != nil || req.Owner == "" || req.TTL <= 0 || req.Token < 0 {
			t.Fatalf("accepted %+v", req)
		}
		if !json.Valid(body) {
			t.Fatalf("accepted invalid JSON %q", body)
		}
	})
}

// BenchmarkDecodeProduce decodes one batch of 100 records of 1 KiB as the
// produce handler does, from JSON (BINARY values, base64) and from the
// binary body the SDK sends.
func BenchmarkDecodeProduce(b *testing.B) {
	value := bytes.Repeat([]byte("x"), 1024)
	recs := make([]map[string]any, 100)
	val := map[string]any{"type": "BINARY", "data": base64.StdEncoding.EncodeToString(value)}
	for i := range recs {
		recs[i] = map[string]any{"key": map[string]any{"type": "STRING", "data": "k"}, "value": val}
	}
	jsonBody, _ := json.Marshal(map[string]any{"owner_id": "w", "token": 1, "batch_id": "b", "records": recs})
	batch := wire.Batch{OwnerID: "w", Token: 1, BatchID: "b", Records: make([]wire.Record, 100)}
	for i := range batch.Records {
		batch.Records[i] = wire.Record{Key: []byte("k"), Value: value}
	}
	for _, c := range []struct {
		name, contentType string
		body              []byte
	}{
		{"json", "application/json", jsonBody},
		{"binary", wire.ContentType, wire.Append(nil, batch)},
	} {
		b.Run(c.name, func(b *testing.B) {
			lim := Limits{}
			lim.fill()
			b.SetBytes(int64(len(c.body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := decodeProduce(c.body, c.contentType, "shard:1", lim); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestRefusedBodiesNamedInJSONTerms: a body the decoder refuses is
// answered invalid_request naming the JSON member (its path), the JSON
// type it must have and the value it holds; a syntax error names its
// byte. Every JSON request body is covered: acquire (and a new
// generation, its token), renew and the JSON produce body.
func TestRefusedBodiesNamedInJSONTerms(t *testing.T) {
	acquire := func(b []byte) *Error { _, err := decodeAcquire(b); return err }
	renew := func(b []byte) *Error { _, _, _, err := decodeRenew(b); return err }
	produce := func(b []byte) *Error { _, err := decodeJSONProduce(b, "shard:1", DefaultLimits()); return err }
	long := strings.Repeat("7", 50)
	cases := []struct {
		name   string
		decode func([]byte) *Error
		body   string
		want   string
	}{
		{"renew token as string", renew, `{"owner_id":"w","token":"5","ttl_ms":1000}`, `member "token" must be an integer, got string "5"`},
		{"renew token as fraction", renew, `{"owner_id":"w","token":1.5,"ttl_ms":1000}`, `member "token" must be an integer, got number 1.5`},
		{"renew token too big", renew, `{"owner_id":"w","token":` + long + `,"ttl_ms":1000}`,
			`member "token" must be an integer of at most 64 bits, got number 7777777777777777777777777777777777777777... (50 bytes)`},
		{"renew unknown member", renew, `{"owner_id":"w","token":1,"ttl":1000}`, `unknown member "ttl"; the members here are owner_id, token, ttl_ms`},
		{"renew cut off", renew, `{"owner_id":"w",`, `malformed JSON: the body ends after 16 bytes, before its value is complete`},
		{"acquire ttl as string", acquire, `{"name":"shard:1","owner_id":"w","ttl_ms":"1000"}`, `member "ttl_ms" must be an integer, got string "1000"`},
		{"acquire owner as boolean", acquire, `{"name":"shard:1","owner_id":true,"ttl_ms":1000}`, `member "owner_id" must be a string, got boolean true`},
		{"acquire name as array", acquire, `{"name":["shard:1"],"owner_id":"w","ttl_ms":1000}`, `member "name" must be a string, got an array`},
		{"acquire topic", acquire, `{"name":"shard:1","owner_id":"w","ttl_ms":1000,"topic":"t"}`, `unknown member "topic"; the members here are name, owner_id, ttl_ms, token`},
		{"acquire not an object", acquire, `[1]`, `the body must be an object, got an array`},
		{"acquire empty", acquire, ``, `the body is empty; it must be an object`},
		{"acquire bad escape", acquire, `{"name":"\x"}`, `malformed JSON at byte 9: invalid character 'x' in string escape code`},
		{"acquire trailing data", acquire, `{"name":"shard:1"} {}`, `malformed JSON: data after the object`},
		{"regenerate token as string", acquire, `{"name":"shard:1","owner_id":"w","ttl_ms":1000,"token":"7"}`, `member "token" must be an integer, got string "7"`},
		{"regenerate token as object", acquire, `{"name":"shard:1","owner_id":"w","ttl_ms":1000,"token":{"n":7}}`, `member "token" must be an integer, got an object`},
		{"produce token as string", produce, `{"owner_id":"w","token":"5","batch_id":"b","records":[]}`, `member "token" must be an integer, got string "5"`},
		{"produce records as object", produce, `{"owner_id":"w","token":1,"batch_id":"b","records":{}}`, `member "records" must be an array, got an object`},
		{"produce record as number", produce, `{"owner_id":"w","token":1,"batch_id":"b","records":[{},1]}`, `member "records[1]" must be an object, got number 1`},
		{"produce key as string", produce, `{"owner_id":"w","token":1,"batch_id":"b","records":[{"key":"k"}]}`, `member "records[0].key" must be an object, got string "k"`},
		{"produce type as number", produce, `{"owner_id":"w","token":1,"batch_id":"b","records":[{"value":{"type":5,"data":"x"}}]}`, `member "records[0].value.type" must be a string, got number 5`},
		{"produce unknown record member", produce, `{"owner_id":"w","token":1,"batch_id":"b","records":[{"partition":3}]}`, `unknown member "records[0].partition"; the members here are key, value, headers`},
		{"produce unknown encoded member", produce, `{"owner_id":"w","token":1,"batch_id":"b","records":[{"key":{"typ":"STRING"}}]}`, `unknown member "records[0].key.typ"; the members here are type, data`},
		{"produce broken data", produce, `{"owner_id":"w","token":1,"batch_id":"b","records":[{"value":{"type":"JSON","data":[1,}}]}`,
			`malformed JSON at byte 86: invalid character '}' looking for beginning of value`},
		{"produce STRING data as number", produce, `{"owner_id":"w","token":1,"batch_id":"b","records":[{"value":{"type":"STRING","data":5}}]}`,
			`records[0]: value.data must be a string, got number 5`},
		{"produce BINARY data as object", produce, `{"owner_id":"w","token":1,"batch_id":"b","records":[{"key":{"type":"BINARY","data":{"a":1}}}]}`,
			`records[0]: key.data must be a base64 string, got an object`},
		{"produce unknown type", produce, `{"owner_id":"w","token":1,"batch_id":"b","records":[{"value":{"type":"AVRO","data":"x"}}]}`,
			`records[0]: value.type must be BINARY, STRING or JSON, got string "AVRO"`},
		{"produce no type", produce, `{"owner_id":"w","token":1,"batch_id":"b","records":[{"value":{"data":"x"}}]}`,
			`records[0]: value.type is required: BINARY, STRING or JSON`},
		{"produce headers as number", produce, `{"owner_id":"w","token":1,"batch_id":"b","records":[{"headers":5}]}`,
			`records[0]: headers must be an object of string values, got number 5`},
		{"produce header as boolean", produce, `{"owner_id":"w","token":1,"batch_id":"b","records":[{"headers":{"a":"b","h":true}}]}`,
			`records[0]: headers must be an object of string values, got boolean true for "h"`},
		{"produce long string", produce, `{"owner_id":"w","token":"` + long + `"}`,
			`member "token" must be an integer, got string "7777777777777777777777777777777777777777"... (50 bytes)`},
	}
	for _, tc := range cases {
		err := tc.decode([]byte(tc.body))
		if err == nil || err.Code != CodeInvalidRequest || err.Detail != tc.want {
			t.Errorf("%s: %v, want invalid_request: %s", tc.name, err, tc.want)
		}
	}
}

// FuzzRefusalExplainsInvalidJSON: refusal never panics, and a body that
// is not JSON always gets its own explanation (never the fast decoder's
// words).
func FuzzRefusalExplainsInvalidJSON(f *testing.F) {
	for _, s := range []string{`{"token":"5"}`, `{"owner_id":"w",`, `[1]`, `{"records":[{"value":{"data":[[[}]}`, ``, `{"a" 1}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		msg := refusal(body, reflect.TypeFor[*produceBody]())
		if msg == "" && !json.Valid(body) {
			t.Fatalf("no explanation for invalid JSON %q", body)
		}
	})
}
