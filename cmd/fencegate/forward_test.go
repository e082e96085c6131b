package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/kafkatest"
	"github.com/fencegate/fencegate/internal/pgtest"
)

// TestFM45_ServeRefusesPublicReplicaCredentials: serve refuses a replica
// credential everyone can read (the development one, an example's
// placeholder) and one too short to be a secret, naming the cause and never
// the credential; a real one starts, and so does dev on its own.
func TestFM45_ServeRefusesPublicReplicaCredentials(t *testing.T) {
	t.Parallel()
	db := pgtest.NewEmpty(t)
	k := kafkatest.Start(t, "shard-output", 16)
	config := routeConfig(t, k.Topic, 16)
	for _, c := range []struct{ name, cred, want string }{
		{"development credential", devReplicaCredential, "the development one"},
		{"example placeholder", "REPLACE-with-openssl-rand-hex-32", "placeholder"},
		{"too short", "0123456789", "at least 32"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := placementServeFlags(db, k, config)
			f.replicaCredFile = writeFile(t, "replica-credential", c.cred+"\n", 0o600)
			err := serveOnce(t, f)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("serve: %v, want a refusal naming %q", err, c.want)
			}
			if strings.Contains(err.Error(), c.cred) {
				t.Fatalf("the refusal repeats the credential: %v", err)
			}
		})
	}
	t.Run("a real credential", func(t *testing.T) {
		f := placementServeFlags(db, k, config)
		f.replicaCredFile = writeFile(t, "replica-credential", strings.Repeat("ab", 32)+"\n", 0o600)
		if err := serveOnce(t, f); err != nil {
			t.Fatalf("serve: %v", err)
		}
	})
	t.Run("fencegate dev", func(t *testing.T) {
		f := placementServeFlags(db, k, config)
		f.replicaCred, f.dev = devReplicaCredential, true
		if err := serveOnce(t, f); err != nil {
			t.Fatalf("serve as dev runs it: %v", err)
		}
	})
}

// TestDevJoinForwards: `fencegate dev` and `fencegate dev --join` forward
// to each other out of the box: a lease taken at one is written and
// renewed through the other (200, not 421).
func TestDevJoinForwards(t *testing.T) {
	t.Parallel()
	dbURL := newDevDatabaseURL(t)
	first, second, kafka := freeAddr(t), freeAddr(t), freeAddr(t)
	startDev(t, "dev", "--database-url", dbURL, "--listen", first, "--kafka-listen", kafka, "--materializer-listen", freeAddr(t))
	startDev(t, "dev", "--join", "--database-url", dbURL, "--listen", second, "--kafka-listen", kafka)
	for i, at := range []struct{ acquire, write string }{{first, second}, {second, first}} {
		name := fmt.Sprintf("shard:%d", 70+i)
		var grant struct{ Token int64 }
		devCall(t, "POST", at.acquire, "/v1/leases", fmt.Sprintf(`{"name":%q,"owner_id":"w","ttl_ms":10000}`, name), http.StatusCreated, &grant)
		body := fmt.Sprintf(`{"owner_id":"w","token":%d,"batch_id":"b1","records":[{"value":{"type":"STRING","data":"v"}}]}`, grant.Token)
		devCall(t, "POST", at.write, "/v1/leases/"+name+"/records", body, http.StatusOK, nil)
		devCall(t, "PATCH", at.write, "/v1/leases/"+name, fmt.Sprintf(`{"owner_id":"w","token":%d,"ttl_ms":10000}`, grant.Token), http.StatusOK, nil)
	}
}

// startDev runs the fencegate command args until the test ends and waits
// for its gateway at --listen to be ready.
func startDev(t *testing.T, args ...string) {
	t.Helper()
	listen := args[len(args)-1]
	for i, a := range args {
		if a == "--listen" {
			listen = args[i+1]
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	var stderr syncBuffer
	go func() { done <- run(ctx, args, &bytes.Buffer{}, &stderr) }()
	t.Cleanup(func() { cancel(); <-done })
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(60 * time.Second)
	for !gatewayReady(listen) {
		select {
		case code := <-done:
			done <- code
			t.Fatalf("%v stopped with exit %d:\n%s", args, code, stderr.String())
		case <-deadline:
			t.Fatalf("%v not ready within 60s:\n%s", args, stderr.String())
		case <-tick.C:
		}
	}
}

// devCall sends body to the gateway at addr with the development token
// and decodes the answer into out, failing unless it has status want.
func devCall(t *testing.T, method, addr, path, body string, want int, out any) {
	t.Helper()
	req, _ := http.NewRequest(method, "http://"+addr+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+devToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		t.Fatalf("%s %s at %s: %d %s, want %d", method, path, addr, resp.StatusCode, raw, want)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatal(err)
		}
	}
}
