package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/fencegate/fencegate/internal/kafkatest"
	"github.com/fencegate/fencegate/internal/pgtest"
	"github.com/fencegate/fencegate/materializer"
)

// TestMaterializeKafkaSinkNeedsNoLedger: `materialize --sinks kafka`
// runs without a ledger database and writes a batch acknowledged by
// serve to the trusted topic, once, with its provenance.
func TestMaterializeKafkaSinkNeedsNoLedger(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	k := kafkatest.Start(t, "shard-output", 4)
	sf := placementServeFlags(db, k, routeConfig(t, k.Topic, 4))
	addr := startServeFlags(t, sf)
	mf := materializeFlags{listen: "127.0.0.1:0", sinks: "kafka", trustedName: "trusted", commonFlags: sf.commonFlags, noMirror: true}
	mf.databaseURL = "postgres://nobody@127.0.0.1:1/none" // never dialled
	startMaterialize(t, mf)
	call := caller(t, addr)
	lease := call("POST", "/v1/leases", map[string]any{"name": "shard:1", "owner_id": "w", "ttl_ms": 30000})
	token := int64(lease["token"].(float64))
	part := int32(lease["partition"].(float64))
	recs := []map[string]any{}
	for i := range 5 {
		recs = append(recs, map[string]any{"value": map[string]any{"type": "STRING", "data": fmt.Sprintf("v%d", i)}})
	}
	call("POST", "/v1/leases/shard:1/records", map[string]any{"owner_id": "w", "token": token, "batch_id": "b1", "records": recs})
	got := readTrusted(t, k.Brokers, k.Topic+".trusted", part, 5)
	for i, r := range got {
		var pv materializer.Provenance
		h := r.Headers[len(r.Headers)-1]
		if h.Key != materializer.HeaderTrusted || json.Unmarshal(h.Value, &pv) != nil || pv.Seq != i || pv.Token != token || string(r.Value) != fmt.Sprintf("v%d", i) {
			t.Fatalf("trusted record %d: %s %v", i, r.Value, r.Headers)
		}
	}
}

// startMaterialize runs materialize with mf until the test ends.
func startMaterialize(t *testing.T, mf materializeFlags) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- materialize(ctx, mf, discard) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("materialize: %v", err)
		}
	})
}

// caller returns a function that calls serve at addr with the ops token
// and fails the test on any answer of 300 or more.
func caller(t *testing.T, addr string) func(method, path string, body any) map[string]any {
	return func(method, path string, body any) map[string]any {
		t.Helper()
		var rd *bytes.Reader
		if body != nil {
			raw, _ := json.Marshal(body)
			rd = bytes.NewReader(raw)
		} else {
			rd = bytes.NewReader(nil)
		}
		req, _ := http.NewRequest(method, "http://"+addr+path, rd)
		req.Header.Set("Authorization", "Bearer ops-token")
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&out)
		if resp.StatusCode >= 300 {
			t.Fatalf("%s %s: %d %v", method, path, resp.StatusCode, out)
		}
		return out
	}
}

// TestMaterializeKafkaSinkServesCheckpoints: with the kafka sink alone,
// its mirror of fences and checkpoints lets serve answer the next
// owner's checkpoint read with the checkpoint of the last committed
// batch.
func TestMaterializeKafkaSinkServesCheckpoints(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	k := kafkatest.Start(t, "shard-output", 4)
	sf := placementServeFlags(db, k, routeConfig(t, k.Topic, 4))
	addr := startServeFlags(t, sf)
	mf := materializeFlags{listen: "127.0.0.1:0", sinks: "kafka", trustedName: "trusted", commonFlags: sf.commonFlags}
	startMaterialize(t, mf)
	call := caller(t, addr)
	first := call("POST", "/v1/leases", map[string]any{"name": "shard:1", "owner_id": "w1", "ttl_ms": 30000})
	token := int64(first["token"].(float64))
	rec := []map[string]any{{"value": map[string]any{"type": "STRING", "data": "x"}}}
	cp := map[string]any{"type": "STRING", "data": "pos-42"}
	call("POST", "/v1/leases/shard:1/records", map[string]any{"owner_id": "w1", "token": token, "batch_id": "b1", "records": rec, "checkpoint": cp})
	call("DELETE", fmt.Sprintf("/v1/leases/shard:1?owner_id=w1&token=%d", token), nil)
	next := call("POST", "/v1/leases", map[string]any{"name": "shard:1", "owner_id": "w2", "ttl_ms": 30000})
	got := call("GET", fmt.Sprintf("/v1/leases/shard:1/checkpoint?owner_id=w2&token=%d&wait=30s", int64(next["token"].(float64))), nil)
	c, _ := got["checkpoint"].(map[string]any)
	if c == nil || c["batch_id"] != "b1" {
		t.Fatalf("checkpoint read: %v, want batch b1's", got)
	}
	v, _ := c["value"].(map[string]any)
	if v["type"] != "STRING" || v["data"] != "pos-42" { // kept as written, through the trusted sink's mirror too (FM97)
		t.Fatalf("checkpoint value %v, want the STRING pos-42", v)
	}
}

// readTrusted reads want records of topic/partition read_committed.
func readTrusted(t *testing.T, brokers, topic string, p int32, want int) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(brokers, ",")...), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {p: kgo.NewOffset().AtStart()}}))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out []*kgo.Record
	for len(out) < want {
		f := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("%s/%d: %d records in 60 s, want %d", topic, p, len(out), want)
		}
		f.EachRecord(func(r *kgo.Record) { out = append(out, r) })
	}
	if len(out) != want {
		t.Fatalf("%s/%d: %d records, want %d", topic, p, len(out), want)
	}
	return out
}
