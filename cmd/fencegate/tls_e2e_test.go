package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
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
	"github.com/fencegate/fencegate/internal/syncbuf"
	"github.com/fencegate/fencegate/kafkaconn"
)

// TestSecureStackEndToEnd: gateway and materializer, as `serve` and
// `materialize` run them, reach a cluster that speaks only SASL_SSL with
// SCRAM-SHA-512 and requires client certificates, from the same flags
// (the materializer's password from a file, the gateway's from the
// environment). The barrier key rotates: a first gateway signs with the
// old key, a second with the new one while the materializer verifies with
// both; every record lands in the ledger and no barrier is refused.
// Neither component logs a password or a key.
func TestSecureStackEndToEnd(t *testing.T) {
	const (
		saslPass = "sasl-pw-5e1f0a"
		oldKey   = "old-barrier-key-77aa0123456789"
		newKey   = "new-barrier-key-88bb0123456789"
	)
	clientCA := kafkatest.NewCA(t, "clients")
	k := kafkatest.StartTLS(t, kafkatest.NewCA(t, "brokers"), kafkatest.TLSOptions{ClientCA: clientCA,
		SASL: kafkaconn.MechanismSCRAMSHA512, User: "fencegate", Password: saslPass}, "shard-output", 16)
	db := pgtest.NewEmpty(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "fencegate.yaml")
	yaml := fmt.Sprintf("transactional_id_prefix: t\nroutes:\n  - {pattern: \"shard:*\", topic: shard-output, partitions: 16}\n"+
		"clients:\n  - {name: ops, token_sha256: %s, allow: [\"*\"]}\n", gateway.HashToken("ops-token"))
	pwFile := filepath.Join(dir, "sasl-password")
	for p, b := range map[string]string{cfg: yaml, pwFile: saslPass + "\n"} {
		if err := os.WriteFile(p, []byte(b), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	conn := k.Conn
	common := commonFlags{databaseURL: db.URL, brokers: conn.Brokers, configPath: cfg, migrate: true,
		saslMech: conn.SASLMechanism, saslUser: conn.SASLUser,
		kafka: kafkaconn.Config{SecurityProtocol: conn.SecurityProtocol, CAFile: conn.CAFile, CertFile: conn.CertFile, KeyFile: conn.KeyFile}}
	logs := &syncbuf.Buffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// The materializer: password from the file, both keys.
	mf := materializeFlags{commonFlags: common, listen: freeAddr(t)}
	mf.kafka.SASLPasswordFile = pwFile
	mf.barrierKey = newKey + "," + oldKey
	mdone := make(chan error, 1)
	go func() { mdone <- materialize(ctx, mf, log) }()
	defer func() { cancel(); <-mdone }()

	// Two gateway generations, one per key.
	produced := 0
	for i, key := range []string{oldKey, newKey + "," + oldKey} {
		f := serveFlags{listen: "127.0.0.1:0", replica: fmt.Sprintf("r%d", i), minTTL: time.Millisecond, maxTTL: time.Hour,
			txnTimeout: 10 * time.Second, commonFlags: common}
		f.saslPassword, f.barrierKey, f.migrate = saslPass, key, i == 0
		gctx, gcancel := context.WithCancel(ctx)
		ready, done := make(chan string, 1), make(chan error, 1)
		go func() { done <- serve(gctx, f, log, ready) }()
		var addr string
		select {
		case addr = <-ready:
		case err := <-done:
			t.Fatalf("serve: %v", err)
		}
		lease := fmt.Sprintf("shard:%d", i+1)
		grant := postJSON(t, "http://"+addr+"/v1/leases", fmt.Sprintf(`{"name":%q,"owner_id":"w","ttl_ms":60000}`, lease), http.StatusCreated)
		postJSON(t, "http://"+addr+"/v1/leases/"+lease+"/records", fmt.Sprintf(`{"owner_id":"w","token":%v,"batch_id":"b",`+
			`"records":[{"value":{"type":"STRING","data":"a"}},{"value":{"type":"STRING","data":"b"}}]}`, grant["token"]), http.StatusOK)
		produced += 2
		gcancel()
		if err := <-done; err != nil {
			t.Fatalf("serve %d: %v", i, err)
		}
	}

	// The ledger over SASL_SSL + mTLS: every record, both barriers.
	deadline := time.Now().Add(30 * time.Second)
	var counts map[string]int64
	for {
		counts = status(t, "http://"+mf.listen+"/v1/status")
		if counts["accepted"] == int64(produced) && counts["barrier"] == 2 {
			break
		}
		if time.Now().After(deadline) || counts["bad_barrier"] > 0 {
			t.Fatalf("materializer verdicts %v, want %d accepted and 2 barriers", counts, produced)
		}
		waitABit(ctx)
	}
	out := logs.String()
	for _, secret := range []string{saslPass, "old-barrier-key", "new-barrier-key"} {
		if strings.Contains(out, secret) {
			t.Errorf("a secret (%s...) is in the logs", secret[:6])
		}
	}
	if !strings.Contains(out, "protocol=SASL_SSL") {
		t.Errorf("the logs do not say how Kafka was reached:\n%s", out)
	}
}

// waitABit yields between polls of the materializer's progress.
func waitABit(ctx context.Context) {
	tm := time.NewTimer(50 * time.Millisecond)
	defer tm.Stop()
	select {
	case <-ctx.Done():
	case <-tm.C:
	}
}

func postJSON(t *testing.T, url, body string, want int) map[string]any {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer ops-token")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	if resp.StatusCode != want {
		t.Fatalf("POST %s: %d %v", url, resp.StatusCode, out)
	}
	return out
}

func status(t *testing.T, url string) map[string]int64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		return nil // not listening yet
	}
	defer resp.Body.Close()
	var body struct {
		Verdicts map[string]int64 `json:"verdicts"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	return body.Verdicts
}

// TestServeRefusesWrongCA: serve against a TLS cluster whose certificate
// another CA signed does not start, and says which file to check.
func TestServeRefusesWrongCA(t *testing.T) {
	k := kafkatest.StartTLS(t, kafkatest.NewCA(t, "brokers"), kafkatest.TLSOptions{}, "shard-output", 16)
	cfg := filepath.Join(t.TempDir(), "fencegate.yaml")
	if err := os.WriteFile(cfg, []byte("routes:\n  - {pattern: \"shard:*\", topic: shard-output, partitions: 16}\n"+
		"clients:\n  - {name: ops, token_sha256: "+gateway.HashToken("ops-token")+", allow: [\"*\"]}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	wrong := kafkatest.NewCA(t, "someone-else").CertFile
	t.Setenv("FENCEGATE_BARRIER_KEY", "0123456789abcdef0123")
	var stderr bytes.Buffer
	code := run(context.Background(), []string{"serve", "--config", cfg, "--kafka-brokers", k.Brokers,
		"--kafka-security-protocol", "SSL", "--kafka-ca-file", wrong, "--database-url", "postgres://nobody@127.0.0.1:1/none"}, &bytes.Buffer{}, &stderr)
	if code == 0 || !strings.Contains(stderr.String(), "not signed by a CA in "+wrong) {
		t.Fatalf("serve with the wrong CA: exit %d: %s", code, stderr.String())
	}
	t.Logf("%s", strings.TrimSpace(lastLine(stderr.String())))
}
