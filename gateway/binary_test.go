package gateway_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/fencegate/fencegate/barrier"
	"github.com/fencegate/fencegate/client/wire"
	"github.com/fencegate/fencegate/gateway"
)

// TestBinaryBodyWritesWhatJSONWrites: the same batch sent as JSON and as
// the binary body lands as the same records (keys, values, null and empty
// kept apart, the worker's headers), each stamped with its own batch id.
func TestBinaryBodyWritesWhatJSONWrites(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.newReplica(nil)
	token := r.mustAcquire(t, "shard:31", "w1", 30*time.Second)
	recs := []wire.Record{
		{Key: []byte("k0"), Value: bytes.Repeat([]byte{0, 0xff, '"'}, 300), Headers: []wire.Header{{Name: "app", Value: []byte("x")}, {Name: "trace", Value: []byte{}}}},
		{Key: nil, Value: []byte("null key")},
		{Key: []byte{}, Value: nil},
	}
	jsonRecs := make([]any, len(recs))
	for i, rc := range recs {
		m := map[string]any{}
		if rc.Key != nil {
			m["key"] = map[string]any{"type": "BINARY", "data": base64.StdEncoding.EncodeToString(rc.Key)}
		}
		if rc.Value != nil {
			m["value"] = map[string]any{"type": "BINARY", "data": base64.StdEncoding.EncodeToString(rc.Value)}
		}
		hs := map[string]string{}
		for _, h := range rc.Headers {
			hs[h.Name] = string(h.Value)
		}
		m["headers"] = hs
		jsonRecs[i] = m
	}
	log := &ackLog{}
	b.mustProduceReplied(t, log, "shard:31", token, "as-json",
		r.do(t, "POST", "/v1/leases/shard:31/records", map[string]any{"owner_id": "w1", "token": token, "batch_id": "as-json", "records": jsonRecs}))
	b.mustProduceReplied(t, log, "shard:31", token, "as-binary",
		r.do(t, "POST", "/v1/leases/shard:31/records", wire.Batch{OwnerID: "w1", Token: token, BatchID: "as-binary", Records: recs}))
	b.checkInvariants(t, "shard:31", log)
	got := readUserRecords(t, b, "shard:31")
	if len(got["as-json"]) != len(recs) || fmt.Sprint(got["as-json"]) != fmt.Sprint(got["as-binary"]) {
		t.Fatalf("JSON batch landed as\n%v\nbinary batch as\n%v", got["as-json"], got["as-binary"])
	}
	for i, rc := range recs {
		if want := describe(rc.Key, rc.Value, rc.Headers); got["as-binary"][i] != want {
			t.Errorf("record %d landed as %s, want %s", i, got["as-binary"][i], want)
		}
	}
}

// TestFM19_BadBinaryBodyRefusedNothingWritten: a malformed or
// rule-breaking binary body gets the same 4xx codes as JSON, and nothing
// is written.
func TestFM19_BadBinaryBodyRefusedNothingWritten(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.newReplica(func(c *gateway.Config) {
		c.Limits = gateway.Limits{MaxRecords: 10, MaxRecordBytes: 1024, MaxRequestBytes: 64 << 10}
	})
	token := r.mustAcquire(t, "shard:32", "w1", 30*time.Second)
	path := "/v1/leases/shard:32/records"
	batch := func(mod func(*wire.Batch)) wire.Batch {
		bt := wire.Batch{OwnerID: "w1", Token: token, BatchID: "b1", Records: []wire.Record{{Key: []byte("k"), Value: []byte("v")}}}
		mod(&bt)
		return bt
	}
	good := wire.Append(nil, batch(func(*wire.Batch) {}))
	cases := []struct {
		name   string
		body   any
		status int
		code   string
	}{
		{"json under the binary type", rawBinary(`{"owner_id":"w1"}`), 400, "invalid_request"},
		{"truncated", rawBinary(good[:len(good)-1]), 400, "invalid_request"},
		{"trailing byte", rawBinary(append(slices.Clone(good), 0)), 400, "invalid_request"},
		{"empty owner", batch(func(b *wire.Batch) { b.OwnerID = "" }), 400, "invalid_request"},
		{"empty batch id", batch(func(b *wire.Batch) { b.BatchID = "" }), 400, "invalid_request"},
		{"control character in batch id", batch(func(b *wire.Batch) { b.BatchID = "a\nb" }), 400, "invalid_request"},
		{"no records", batch(func(b *wire.Batch) { b.Records = nil }), 400, "invalid_request"},
		{"reserved header", batch(func(b *wire.Batch) {
			b.Records[0].Headers = []wire.Header{{Name: "FenceGate-Token", Value: []byte("999")}}
		}), 400, "invalid_request"},
		{"header twice", batch(func(b *wire.Batch) {
			b.Records[0].Headers = []wire.Header{{Name: "h", Value: []byte("1")}, {Name: "h", Value: []byte("2")}}
		}), 400, "invalid_request"},
		{"too many records", batch(func(b *wire.Batch) { b.Records = make([]wire.Record, 11) }), 413, "payload_too_large"},
		{"record too large", batch(func(b *wire.Batch) { b.Records[0].Value = make([]byte, 2000) }), 413, "payload_too_large"},
		{"body too large", batch(func(b *wire.Batch) { b.Records[0].Value = make([]byte, 70<<10) }), 413, "payload_too_large"},
		{"zero token", batch(func(b *wire.Batch) { b.Token = 0 }), 400, "invalid_request"},
	}
	for _, tc := range cases {
		rep := r.do(t, "POST", path, tc.body)
		if rep.status != tc.status || rep.code() != tc.code {
			t.Errorf("%s: %d %s, want %d %s", tc.name, rep.status, rep.raw, tc.status, tc.code)
		}
	}
	log := &ackLog{}
	b.mustProduceReplied(t, log, "shard:32", token, "b1", r.do(t, "POST", path, rawBinary(good)))
	if recs := b.checkInvariants(t, "shard:32", log); len(recs) != 2 {
		t.Fatalf("partition holds %d records, want barrier + 1 (a refused body wrote something)", len(recs))
	}
}

// readUserRecords reads a lease's partition (read_committed) and returns,
// per batch id, each record as describe renders it, in offset order.
func readUserRecords(t *testing.T, b *testBundle, name string) map[string][]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	opts, err := b.kafka.Conn.KgoOpts()
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(append(opts, kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{b.kafka.Topic: {b.partitionOf(name): kgo.NewOffset().AtStart()}}))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	want := len(b.read(t, name)) // what read_committed holds now
	out := map[string][]string{}
	for seen := 0; seen < want; {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d records: %v", seen, want, ctx.Err())
		}
		fs.EachRecord(func(rec *kgo.Record) {
			seen++
			var batch string
			var own []wire.Header
			for _, h := range rec.Headers {
				switch {
				case h.Key == barrier.HeaderBatch:
					batch = string(h.Value)
				case !barrier.Reserved(h.Key):
					own = append(own, wire.Header{Name: h.Key, Value: h.Value})
				}
			}
			if batch != "" {
				out[batch] = append(out[batch], describe(rec.Key, rec.Value, own))
			}
		})
	}
	return out
}

// describe renders a record with null and empty apart and headers sorted.
func describe(key, value []byte, hs []wire.Header) string {
	show := func(b []byte) string {
		if b == nil {
			return "null"
		}
		return fmt.Sprintf("%q", b)
	}
	names := make([]string, len(hs))
	for i, h := range hs {
		names[i] = h.Name + "=" + string(h.Value)
	}
	slices.Sort(names)
	return show(key) + " " + show(value) + " [" + strings.Join(names, ",") + "]"
}
