package sdktest

import (
	"bytes"
	"encoding/json"
	"flag"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/gateway"
)

var update = flag.Bool("update", false, "rewrite ../client/testdata/replies from the real gateway")

// repliesDir holds the gateway replies that the SDK's unit tests replay.
const repliesDir = "../client/testdata/replies"

// send sends one raw request and returns the reply.
func send(t testing.TB, base, bearer, method, path string, body any) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, base+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, raw
}

func batch(owner string, tok int64, id string, n int) map[string]any {
	recs := make([]map[string]any, n)
	for i := range recs {
		recs[i] = map[string]any{"value": map[string]any{"type": "STRING", "data": "v"}}
	}
	return map[string]any{"owner_id": owner, "token": tok, "batch_id": id, "records": recs}
}

// TestRecordedRepliesMatchTheGateway makes the real gateway send each
// problem reply that client/testdata/replies holds and checks that the
// recording still has its status, code, reason, cause and members: the
// SDK's unit tests replay what the gateway really sends. Run with -update
// to record them anew.
func TestRecordedRepliesMatchTheGateway(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a := b.newReplica(func(c *gateway.Config) { c.Limits.MaxRecords = 4; c.CommitTimeout = time.Second })
	other := b.newReplica(nil)
	got := map[string][]byte{}
	record := func(name string, wantStatus int, status int, raw []byte) {
		t.Helper()
		if status != wantStatus {
			t.Fatalf("%s: %d %s, want %d", name, status, raw, wantStatus)
		}
		got[name] = raw
	}
	grant := func(base, name, owner string, tok int64) int64 {
		t.Helper()
		body := map[string]any{"name": name, "owner_id": owner, "ttl_ms": 30000}
		if tok > 0 {
			body["token"] = tok
		}
		status, raw := send(t, base, token, "POST", "/v1/leases", body)
		if status != http.StatusCreated {
			t.Fatalf("grant %s: %d %s", name, status, raw)
		}
		var g struct{ Token int64 }
		_ = json.Unmarshal(raw, &g)
		return g.Token
	}

	tok := grant(a.url, "shard:100", "w1", 0)
	s, raw := send(t, a.url, token, "POST", "/v1/leases", map[string]any{"name": "shard:100", "owner_id": "w2", "ttl_ms": 30000})
	record("lease_held", http.StatusConflict, s, raw)
	s, raw = send(t, a.url, token, "POST", "/v1/leases", map[string]any{"name": "shard:100", "owner_id": "w2", "ttl_ms": 30000, "token": tok})
	record("lease_lost_not_owner", http.StatusConflict, s, raw)
	s, raw = send(t, a.url, token, "POST", "/v1/leases/shard:100/records", batch("w9", tok, "b", 1))
	record("lease_lost_session", http.StatusConflict, s, raw)
	s, raw = send(t, other.url, token, "POST", "/v1/leases/shard:100/records", batch("w1", tok, "b", 1))
	record("misdirected", http.StatusMisdirectedRequest, s, raw)
	s, raw = send(t, a.url, token, "POST", "/v1/leases/shard:100/records", batch("w1", tok, "b", 5))
	record("payload_too_large", http.StatusRequestEntityTooLarge, s, raw)
	s, raw = send(t, a.url, "", "GET", "/v1/leases/shard:100", nil)
	record("unauthorized", http.StatusUnauthorized, s, raw)

	entered, release := b.holdEndTxn()
	s, raw = send(t, a.url, token, "POST", "/v1/leases/shard:100/records", batch("w1", tok, "held", 1))
	<-entered
	close(release)
	record("generation_ended", http.StatusConflict, s, raw)

	tok = grant(a.url, "shard:101", "w1", 0)
	if err := a.gateway().Drain(bg); err != nil {
		t.Fatal(err)
	}
	s, raw = send(t, other.url, token, "PATCH", "/v1/leases/shard:101", map[string]any{"owner_id": "w1", "token": tok, "ttl_ms": 30000})
	record("not_holder", http.StatusConflict, s, raw)
	s, raw = send(t, a.url, token, "POST", "/v1/leases", map[string]any{"name": "shard:102", "owner_id": "w1", "ttl_ms": 30000})
	record("draining", http.StatusServiceUnavailable, s, raw)

	// ledger_behind: the ledger applied the barrier of the lease's first
	// generation, then stopped before the second's.
	stop := b.runLedger()
	tok = grant(other.url, "shard:103", "w1", 0)
	q := "/v1/leases/shard:103/checkpoint?owner_id=w1&wait=10s&token="
	if s, raw = send(t, other.url, token, "GET", q+strconv.FormatInt(tok, 10), nil); s != http.StatusOK {
		t.Fatalf("checkpoint read with the ledger running: %d %s", s, raw)
	}
	stop()
	tok = grant(other.url, "shard:103", "w1", tok)
	s, raw = send(t, other.url, token, "GET", strings.Replace(q, "10s", "50ms", 1)+strconv.FormatInt(tok, 10), nil)
	record("ledger_behind", http.StatusServiceUnavailable, s, raw)

	if *update {
		if err := os.MkdirAll(repliesDir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, raw := range got {
			if err := os.WriteFile(filepath.Join(repliesDir, name+".json"), raw, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	files, _ := filepath.Glob(filepath.Join(repliesDir, "*.json"))
	if len(files) != len(got) {
		t.Errorf("%s holds %d replies, the gateway was made to send %d (run with -update)", repliesDir, len(files), len(got))
	}
	for name, raw := range got {
		rec, err := os.ReadFile(filepath.Join(repliesDir, name+".json"))
		if err != nil {
			t.Errorf("%s: %v (run with -update)", name, err)
			continue
		}
		var sent, kept map[string]any
		if err := json.Unmarshal(raw, &sent); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(rec, &kept); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if k, s := slices.Sorted(maps.Keys(kept)), slices.Sorted(maps.Keys(sent)); !slices.Equal(k, s) {
			t.Errorf("%s: recorded members %v, the gateway sends %v (run with -update)", name, k, s)
		}
		for _, m := range []string{"type", "title", "status", "code", "reason", "cause"} {
			if kept[m] != sent[m] {
				t.Errorf("%s: recorded %s %v, the gateway sends %v (run with -update)", name, m, kept[m], sent[m])
			}
		}
	}
}
