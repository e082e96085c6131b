package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/internal/kafkatest"
	"github.com/fencegate/fencegate/internal/pgtest"
)

// TestFM92_DebugListenOnlyOnLoopback: --debug-listen takes loopback
// addresses only; serve refuses any other (every interface, a routable
// address, a host name) before it connects to anything. Before, it
// served pprof there without a word.
func TestFM92_DebugListenOnlyOnLoopback(t *testing.T) {
	t.Parallel()
	for addr, ok := range map[string]bool{"127.0.0.1:6060": true, "[::1]:6060": true, "localhost:6060": true,
		":6060": false, "0.0.0.0:6060": false, "10.1.2.3:6060": false, "gateway-0:6060": false, "[::]:6060": false, "6060": false} {
		if err := checkDebugListen(addr); (err == nil) != ok {
			t.Errorf("checkDebugListen(%q) = %v, want ok %v", addr, err, ok)
		}
	}
	db := pgtest.NewEmpty(t)
	f := placementServeFlags(db, &kafkatest.Cluster{Brokers: "127.0.0.1:1"}, routeConfig(t, "shard-output", 4))
	f.debugListen = "0.0.0.0:0"
	if err := serveOnce(t, f); err == nil || !strings.Contains(err.Error(), "not a loopback address") {
		t.Fatalf("serve --debug-listen 0.0.0.0:0: %v, want a refusal", err)
	}
	mf := materializeFlags{commonFlags: commonFlags{configPath: "/nonexistent/routes.yaml"}, debugListen: "0.0.0.0:0"}
	if err := materialize(context.Background(), mf, discard); err == nil || !strings.Contains(err.Error(), "not a loopback address") {
		t.Fatalf("materialize --debug-listen 0.0.0.0:0: %v, want a refusal", err)
	}
}

// TestFM92_EmptyConfigRefused: a config file with no routes or no
// clients (an empty file, the wrong file) is refused at start, naming
// what it lacks. Before, serve started with no routes and no clients.
func TestFM92_EmptyConfigRefused(t *testing.T) {
	t.Parallel()
	client := fmt.Sprintf("clients:\n  - {name: ops, token_sha256: %s, allow: [\"*\"]}\n", gateway.HashToken("ops-token"))
	for name, raw := range map[string]string{
		"empty":        "",
		"comments":     "# nothing yet\n",
		"no clients":   "routes:\n  - {pattern: \"shard:*\", topic: t, partitions: 1}\n",
		"no routes":    client,
		"other yaml":   "kafka:\n  brokers: x\n",
		"empty routes": "routes: []\n" + client,
	} {
		if _, _, _, err := parseGatewayConfig([]byte(raw)); err == nil || !strings.Contains(err.Error(), "at least one of each") {
			t.Errorf("%s: %v, want a refusal", name, err)
		}
	}
	db := pgtest.NewEmpty(t)
	empty := filepath.Join(t.TempDir(), "empty.yaml")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := serveOnce(t, placementServeFlags(db, &kafkatest.Cluster{Brokers: "127.0.0.1:1"}, empty)); err == nil {
		t.Fatal("serve --config <empty file> started")
	}
}

// TestFM92_RouteTopicOfTheTrustedSinkRefused: materialize with the
// kafka sink refuses routes of which one's topic is the trusted topic
// (or its receipts or state) of another's: the sink would read its own
// output as lease records. Before, it started.
func TestFM92_RouteTopicOfTheTrustedSinkRefused(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	k := kafkatest.Start(t, "shard-output", 1, kfake.SeedTopics(1, "shard-output.trusted", "shard-output.trusted.receipts", "shard-output.trusted.state"))
	for _, suffix := range []string{".trusted", ".trusted.receipts", ".trusted.state"} {
		cfg := filepath.Join(t.TempDir(), "fencegate.yaml")
		raw := fmt.Sprintf("transactional_id_prefix: t\nroutes:\n  - {pattern: \"shard:*\", topic: %s, partitions: 1}\n"+
			"  - {pattern: \"other:*\", topic: %s%s, partitions: 1}\n"+
			"clients:\n  - {name: ops, token_sha256: %s, allow: [\"*\"]}\n", k.Topic, k.Topic, suffix, gateway.HashToken("ops-token"))
		if err := os.WriteFile(cfg, []byte(raw), 0o600); err != nil {
			t.Fatal(err)
		}
		sf := placementServeFlags(db, k, cfg)
		mf := materializeFlags{listen: "127.0.0.1:0", sinks: "kafka", trustedName: "trusted", commonFlags: sf.commonFlags, noMirror: true}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := materialize(ctx, mf, discard)
		cancel()
		if err == nil || !strings.Contains(err.Error(), "the trusted sink writes") {
			t.Errorf("routes on %s and %s%s: %v, want a refusal", k.Topic, k.Topic, suffix, err)
		}
	}
}
