package gateway

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"testing"

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
	lim := Limits{MaxRecords: 8, MaxRecordBytes: 256, MaxRequestBytes: 4096}
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
		size := len(r.Key) + len(r.Value)
		seen := map[string]bool{}
		for _, h := range r.Headers {
			if barrier.Reserved(h.Key) || h.Key == "" || seen[h.Key] {
				t.Fatalf("accepted header %q (reserved, empty or twice)", h.Key)
			}
			seen[h.Key] = true
			size += len(h.Key) + len(h.Value)
		}
		if size > lim.MaxRecordBytes {
			t.Fatalf("accepted a record of %d bytes", size)
		}
	}
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
