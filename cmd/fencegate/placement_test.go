package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/internal/kafkatest"
	"github.com/fencegate/fencegate/internal/pgtest"
	"github.com/fencegate/fencegate/leasestore"
	"github.com/fencegate/fencegate/txnmap"
)

// routeConfig writes a config routing shard:* to topic with partitions
// partitions and returns its path.
func routeConfig(t *testing.T, topic string, partitions int) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), fmt.Sprintf("fencegate-%d.yaml", partitions))
	yaml := fmt.Sprintf("transactional_id_prefix: t\nroutes:\n  - {pattern: \"shard:*\", topic: %s, partitions: %d}\n"+
		"clients:\n  - {name: ops, token_sha256: %s, allow: [\"*\"]}\n", topic, partitions, gateway.HashToken("ops-token"))
	if err := os.WriteFile(p, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func placementServeFlags(db *pgtest.DB, k *kafkatest.Cluster, cfg string) serveFlags {
	return serveFlags{listen: "127.0.0.1:0", replica: "r1", minTTL: time.Millisecond, maxTTL: time.Hour,
		txnTimeout: 10 * time.Second, commonFlags: commonFlags{databaseURL: db.URL, brokers: k.Brokers,
			configPath: cfg, barrierKey: "0123456789abcdef0123", migrate: true}}
}

// serveOnce starts serve with f and stops it once it listens (nil), or
// returns why it refused to start.
func serveOnce(t *testing.T, f serveFlags) error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- serve(ctx, f, slog.New(slog.NewTextHandler(io.Discard, nil)), ready) }()
	select {
	case <-ready:
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("serve stopped with %v", err)
		}
		return nil
	case err := <-done:
		if err == nil {
			t.Fatal("serve returned nil before it listened")
		}
		return err
	}
}

// TestFM31_StartRefusesRouteTopicMismatch: serve and materialize refuse
// to start when the route names more or fewer partitions than its topic
// has, naming both counts.
func TestFM31_StartRefusesRouteTopicMismatch(t *testing.T) {
	t.Parallel()
	db := pgtest.NewEmpty(t)
	k := kafkatest.Start(t, "shard-output", 16)
	for _, n := range []int{32, 8} {
		cfg := routeConfig(t, k.Topic, n)
		want := fmt.Sprintf("names %d partitions but topic %s has 16", n, k.Topic)
		if err := serveOnce(t, placementServeFlags(db, k, cfg)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("serve with %d partitions on a 16-partition topic: %v", n, err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		mf := materializeFlags{listen: "127.0.0.1:0", commonFlags: placementServeFlags(db, k, cfg).commonFlags}
		err := materialize(ctx, mf, slog.New(slog.NewTextHandler(io.Discard, nil)))
		cancel()
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("materialize with %d partitions on a 16-partition topic: %v", n, err)
		}
	}
}

// TestFM31_ServeRefusesUnrecordedPartitionChange: serve records the
// route's placement on first start; after the topic grows, serve with
// the grown config refuses, naming set-partitions, until set-partitions
// records the new count.
func TestFM31_ServeRefusesUnrecordedPartitionChange(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t) // the ledger too: set-partitions reads its positions
	k := kafkatest.Start(t, "shard-output", 16)
	if err := serveOnce(t, placementServeFlags(db, k, routeConfig(t, k.Topic, 16))); err != nil {
		t.Fatalf("first start: %v", err)
	}
	if err := kafkatest.GrowTopic(k.Conn, k.Topic, 32); err != nil {
		t.Fatal(err)
	}
	grown := routeConfig(t, k.Topic, 32)
	err := serveOnce(t, placementServeFlags(db, k, grown))
	if err == nil || !strings.Contains(err.Error(), "recorded placement (version 1") || !strings.Contains(err.Error(), "fencegate routes set-partitions") {
		t.Fatalf("serve with 32 partitions over a recorded 16: %v", err)
	}
	t.Logf("refused: %v", err)
	if code, out := setPartitionsCmd(t, db, k, grown, 32); code != 0 || !strings.Contains(out, "placement version 2 recorded") {
		t.Fatalf("set-partitions: exit %d: %s", code, out)
	}
	if err := serveOnce(t, placementServeFlags(db, k, grown)); err != nil {
		t.Fatalf("serve after set-partitions: %v", err)
	}
}

// setPartitionsCmd runs `fencegate routes set-partitions` on db and k.
func setPartitionsCmd(t *testing.T, db *pgtest.DB, k *kafkatest.Cluster, cfg string, n int) (int, string) {
	t.Helper()
	var out bytes.Buffer
	code := run(context.Background(), []string{"routes", "set-partitions", "--config", cfg, "--pattern", "shard:*",
		"--partitions", fmt.Sprint(n), "--database-url", db.URL, "--kafka-brokers", k.Brokers}, &out, &out)
	return code, out.String()
}

// TestFM31_SetPartitionsRefusesLiveLeaseAndLaggingLedger: set-partitions
// refuses while a lease of the route is live, while the topic has
// another count and while the ledger has not read a partition to its
// last stable offset; then it records version 2.
func TestFM31_SetPartitionsRefusesLiveLeaseAndLaggingLedger(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	k := kafkatest.Start(t, "shard-output", 16)
	ctx := context.Background()
	store, err := leasestore.New(db.Pool, leasestore.Config{ValidateName: txnmap.ValidateName})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.RecordFirstPlacement(ctx, "shard:*", k.Topic, 16); err != nil {
		t.Fatal(err)
	}
	lease, err := store.Acquire(ctx, "shard:5", "w1", 5*time.Minute, "r1", "c", "")
	if err != nil {
		t.Fatal(err)
	}
	if err := kafkatest.GrowTopic(k.Conn, k.Topic, 32); err != nil {
		t.Fatal(err)
	}
	cfg := routeConfig(t, k.Topic, 16) // the config may still name the old count
	steps := []struct {
		name string
		n    int
		want string
		then func()
	}{
		{"live lease", 32, "1 leases of route \"shard:*\" are live (shard:5)", func() {
			if err := store.Abandon(ctx, "shard:5", lease.Token); err != nil {
				t.Fatal(err)
			}
			produceTo(t, k, 5)
		}},
		{"topic of another size", 64, fmt.Sprintf("topic %s has 32 partitions, not 64", k.Topic), func() {}},
		{"ledger behind", 32, fmt.Sprintf("the ledger is behind on %s/5 (at offset 0 of 1)", k.Topic), func() {
			if _, err := db.Pool.Exec(ctx, `INSERT INTO consumer_positions VALUES ($1, 5, 1)`, k.Topic); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, s := range steps {
		code, out := setPartitionsCmd(t, db, k, cfg, s.n)
		if code != 1 || !strings.Contains(out, s.want) {
			t.Fatalf("%s: exit %d, want 1 saying %q:\n%s", s.name, code, s.want, out)
		}
		s.then()
	}
	if code, out := setPartitionsCmd(t, db, k, cfg, 32); code != 0 {
		t.Fatalf("caught up: exit %d: %s", code, out)
	}
	ps, err := store.Placements(ctx)
	if p := ps["shard:*"]; err != nil || p.Version != 2 || p.Partitions != 32 || p.Topic != k.Topic {
		t.Fatalf("recorded placement: %+v %v", p, err)
	}
}

// produceTo writes one plain record to partition p of k's topic.
func produceTo(t *testing.T, k *kafkatest.Cluster, p int32) {
	t.Helper()
	opts, err := k.Conn.KgoOpts()
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(append(opts, kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: k.Topic, Partition: p, Value: []byte("x")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
}
