package main

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/kafkatest"
	"github.com/fencegate/fencegate/internal/pgtest"
	"github.com/fencegate/fencegate/internal/syncbuf"
)

// TestMaterializeNamesItsComponentOnce: given the logger `fencegate dev`
// gives it (component=materializer), every line the materializer logs,
// its HTTP port's "listening" included, names the component once.
func TestMaterializeNamesItsComponentOnce(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	k := kafkatest.Start(t, "shard-output", 16)
	mf := materializeFlags{listen: "127.0.0.1:0", commonFlags: placementServeFlags(db, k, routeConfig(t, k.Topic, 16)).commonFlags}
	logs := &syncbuf.Buffer{}
	log := slog.New(slog.NewTextHandler(logs, nil)).With("component", "materializer")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- materialize(ctx, mf, log) }()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(logs.String(), "msg=listening") {
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("the materializer did not log listening in 30 s (stopped: %v):\n%s", <-done, logs)
		}
		waitABit(ctx)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("materialize: %v", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		if n := strings.Count(line, "component="); n != 1 {
			t.Errorf("component named %d times: %s", n, line)
		}
	}
}
