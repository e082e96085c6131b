package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/client"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/internal/kafkatest"
	"github.com/fencegate/fencegate/internal/pgtest"
)

// TestLeasesWatchAndPruneEvents runs `serve`, then `leases watch -o json`
// while a lease is taken (its events come as JSON lines, the renewal
// none), and `leases prune-events`, which deletes only older events.
func TestLeasesWatchAndPruneEvents(t *testing.T) {
	t.Parallel()
	db := pgtest.NewEmpty(t)
	k := kafkatest.Start(t, "shard-output", 16)
	cfg := filepath.Join(t.TempDir(), "fencegate.yaml")
	yaml := fmt.Sprintf("transactional_id_prefix: t\nroutes:\n  - {pattern: \"shard:*\", topic: shard-output, partitions: 16}\n"+
		"clients:\n  - {name: ops, token_sha256: %s, allow: [\"*\"]}\n", gateway.HashToken("dev-token"))
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan string, 1)
	done := make(chan error, 1)
	f := serveFlags{listen: "127.0.0.1:0", replica: "r1", minTTL: time.Millisecond, maxTTL: time.Hour,
		txnTimeout: 10 * time.Second, commonFlags: commonFlags{databaseURL: db.URL, brokers: k.Brokers,
			configPath: cfg, barrierKey: "0123456789abcdef0123", migrate: true, dev: true}}
	go func() { done <- serve(ctx, f, slog.New(slog.NewTextHandler(io.Discard, nil)), ready) }()
	var base string
	select {
	case addr := <-ready:
		base = "http://" + addr
	case err := <-done:
		t.Fatalf("serve: %v", err)
	}
	wctx, stop := context.WithCancel(ctx)
	pr, pw := io.Pipe()
	watched := make(chan int, 1)
	go func() {
		var errb bytes.Buffer
		watched <- run(wctx, []string{"leases", "watch", "--gateway", base, "--prefix", "shard:", "-o", "json"}, pw, &errb)
		_ = pw.Close()
	}()
	lines := bufio.NewScanner(pr)
	acquire := func(i int) {
		req, _ := http.NewRequest("POST", base+"/v1/leases", strings.NewReader(fmt.Sprintf(`{"name":"shard:%d","owner_id":"ix-1","ttl_ms":60000}`, i)))
		req.Header.Set("Authorization", "Bearer dev-token")
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}
	// The stream opens in the background: take a lease each tick until
	// the first event is printed.
	first := make(chan struct{})
	go func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			acquire(i)
			select {
			case <-first:
				return
			case <-tick.C:
			}
		}
	}()
	var evs []client.Event
	for len(evs) < 2 && lines.Scan() {
		var e client.Event
		if err := json.Unmarshal(lines.Bytes(), &e); err != nil {
			t.Fatalf("watch line %q: %v", lines.Text(), err)
		}
		if len(evs) == 0 && e.Kind != "acquired" {
			continue // the stream opened within a handover
		}
		if len(evs) == 0 {
			close(first)
		}
		evs = append(evs, e)
	}
	if len(evs) < 2 || evs[0].Kind != "acquired" || evs[1].Kind != "activated" || evs[0].Name != evs[1].Name {
		t.Fatalf("watched %+v, want a lease's acquired then activated", evs)
	}
	stop()
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	if code := <-watched; code != 0 {
		t.Fatalf("leases watch exit %d after an interrupt, want 0", code)
	}
	var out, errb bytes.Buffer
	if code := run(ctx, []string{"leases", "prune-events", "--database-url", db.URL, "--older-than", "1h"}, &out, &errb); code != 0 {
		t.Fatalf("prune-events: %d %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "deleted 0 lease events older than 1h0m0s") {
		t.Fatalf("prune-events of fresh events: %s", out.String())
	}
	if code := run(ctx, []string{"leases", "prune-events", "--database-url", db.URL, "--older-than", "0s"}, &out, &errb); code == 0 {
		t.Fatal("prune-events --older-than 0s was accepted")
	}
}
