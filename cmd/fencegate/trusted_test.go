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
	mf := materializeFlags{listen: freeAddr(t), sinks: "kafka", trustedName: "trusted", commonFlags: sf.commonFlags}
	mf.databaseURL = "postgres://nobody@127.0.0.1:1/none" // never dialled
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- materialize(ctx, mf, discard) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("materialize: %v", err)
		}
	}()
	call := func(method, path string, body any) map[string]any {
		raw, _ := json.Marshal(body)
		req, _ := http.NewRequest(method, "http://"+addr+path, bytes.NewReader(raw))
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
