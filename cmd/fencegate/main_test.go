package main

import (
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

	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/internal/kafkatest"
	"github.com/fencegate/fencegate/internal/pgtest"
)

// TestServeAndOperatorCommands runs `serve` as the binary would, takes a
// lease over HTTP, and checks `leases list`, `leases show` and /metrics.
func TestServeAndOperatorCommands(t *testing.T) {
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
	ready := make(chan string, 1)
	done := make(chan error, 1)
	f := serveFlags{listen: "127.0.0.1:0", replica: "r1", minTTL: time.Millisecond, maxTTL: time.Hour,
		txnTimeout: 10 * time.Second, commonFlags: commonFlags{databaseURL: db.URL, brokers: k.Brokers,
			configPath: cfg, barrierKey: "0123456789abcdef0123", migrate: true,
			// The operator commands' default token is dev-token, which only
			// the gateway of `fencegate dev` accepts (FM45).
			dev: true}}
	go func() { done <- serve(ctx, f, slog.New(slog.NewTextHandler(io.Discard, nil)), ready) }()
	var addr string
	select {
	case addr = <-ready:
	case err := <-done:
		t.Fatalf("serve: %v", err)
	}
	base := "http://" + addr
	req, _ := http.NewRequest("POST", base+"/v1/leases", strings.NewReader(`{"name":"shard:42","owner_id":"ix-1","ttl_ms":60000}`))
	req.Header.Set("Authorization", "Bearer dev-token")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("acquire: %v %v", resp, err)
	}
	resp.Body.Close()

	var out, errb bytes.Buffer
	if code := run(ctx, []string{"leases", "list", "--gateway", base, "--prefix", "shard:"}, &out, &errb); code != 0 {
		t.Fatalf("leases list: %d %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "shard:42") || !strings.Contains(out.String(), "ix-1") || !strings.Contains(out.String(), "active") {
		t.Fatalf("leases list output:\n%s", out.String())
	}
	out.Reset()
	if code := run(ctx, []string{"leases", "show", "--gateway", base, "shard:42"}, &out, &errb); code != 0 {
		t.Fatalf("leases show: %d %s", code, errb.String())
	}
	for _, want := range []string{"owner:       ix-1", "activated", "acquired", "epoch:       0"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("leases show lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	// Flags after the lease name, JSON output.
	if code := run(ctx, []string{"leases", "show", "shard:42", "--gateway", base, "-o", "json"}, &out, &errb); code != 0 {
		t.Fatalf("leases show NAME --gateway -o json: %d %s", code, errb.String())
	}
	var view gateway.LeaseView
	if err := json.Unmarshal(out.Bytes(), &view); err != nil || view.Name != "shard:42" || view.OwnerID != "ix-1" || len(view.Events) == 0 {
		t.Fatalf("leases show -o json: %+v %v\n%s", view, err, out.String())
	}
	mresp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(mresp.Body)
	mresp.Body.Close()
	if !strings.Contains(string(raw), "fencegate_epoch_bumps_total") {
		t.Fatalf("/metrics lacks fencegate_epoch_bumps_total")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("serve stopped with %v", err)
	}
}
