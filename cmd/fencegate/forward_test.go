package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/internal/kafkatest"
	"github.com/fencegate/fencegate/internal/pgtest"
	"github.com/fencegate/fencegate/internal/syncbuf"
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
	var kafka string
	first, _ := startDev(t, func() []string {
		kafka = freeAddr(t)
		return []string{"dev", "--database-url", dbURL, "--listen", freeAddr(t), "--kafka-listen", kafka, "--materializer-listen", freeAddr(t)}
	})
	second, _ := startDev(t, func() []string {
		return []string{"dev", "--join", "--database-url", dbURL, "--listen", freeAddr(t), "--kafka-listen", kafka}
	})
	for i, at := range []struct{ acquire, write string }{{first, second}, {second, first}} {
		name := fmt.Sprintf("shard:%d", 70+i)
		var grant struct{ Token int64 }
		devCall(t, "POST", at.acquire, "/v1/leases", fmt.Sprintf(`{"name":%q,"owner_id":"w","ttl_ms":10000}`, name), http.StatusCreated, &grant)
		body := fmt.Sprintf(`{"owner_id":"w","token":%d,"batch_id":"b1","records":[{"value":{"type":"STRING","data":"v"}}]}`, grant.Token)
		devCall(t, "POST", at.write, "/v1/leases/"+name+"/records", body, http.StatusOK, nil)
		devCall(t, "PATCH", at.write, "/v1/leases/"+name, fmt.Sprintf(`{"owner_id":"w","token":%d,"ttl_ms":10000}`, grant.Token), http.StatusOK, nil)
	}
}

// startDev runs the fencegate command mkArgs builds until the test ends
// and waits for its gateway at --listen to be ready; it returns that
// address and stop, which ends the command and returns its exit code.
// The addresses come from freeAddr, so another process may take one
// before the command binds it: a command that stops on "address already
// in use" is started again with the arguments mkArgs builds next (up to
// three times).
func startDev(t *testing.T, mkArgs func() []string) (listen string, stop func() int) {
	t.Helper()
	for attempt := 1; ; attempt++ {
		args := mkArgs()
		listen = args[slices.Index(args, "--listen")+1]
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan int, 1)
		var stderr syncbuf.Buffer
		go func() { done <- run(ctx, args, &bytes.Buffer{}, &stderr) }()
		code, exited := waitGateway(t, listen, args, done, &stderr)
		if !exited {
			var once sync.Once
			stop = func() int {
				once.Do(func() { cancel(); code = <-done })
				return code
			}
			t.Cleanup(func() { stop() })
			return listen, stop
		}
		cancel()
		if attempt == 3 || !strings.Contains(stderr.String(), "address already in use") {
			t.Fatalf("%v stopped with exit %d:\n%s", args, code, stderr.String())
		}
	}
}

// waitGateway waits until the fencegate command args, running with its
// exit code sent to done, listens at listen itself (its "listening" log
// line names the address) and answers /readyz there, or exits. A ready
// answer alone could be another process's that took the address first (a
// 404 for every gateway route, once in CI).
func waitGateway(t *testing.T, listen string, args []string, done chan int, stderr *syncbuf.Buffer) (code int, exited bool) {
	t.Helper()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(60 * time.Second)
	for !loggedListening(stderr.String(), listen) || !gatewayReady(listen) {
		select {
		case code := <-done:
			return code, true
		case <-deadline:
			t.Fatalf("%v not ready within 60s:\n%s", args, stderr.String())
		case <-tick.C:
		}
	}
	return 0, false
}

// loggedListening says whether log has a "listening" line naming addr.
func loggedListening(log, addr string) bool {
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, "listening") && strings.Contains(line, addr) {
			return true
		}
	}
	return false
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

// TestForwardingOverHTTPS: two serve replicas on HTTPS forward to each
// other when each trusts the other's certificate (--replica-ca-file); a
// replica that cannot verify the holder's certificate sends it nothing,
// not even the credential, and answers 421 toward it.
func TestForwardingOverHTTPS(t *testing.T) {
	t.Parallel()
	db := pgtest.NewEmpty(t)
	k := kafkatest.Start(t, "shard-output", 16)
	ca := kafkatest.NewCA(t, "replicas-ca")
	pair := ca.Server(t, "replica")
	tlsOn := gateway.ServerConfig{TLSCertFile: pair.CertFile, TLSKeyFile: pair.KeyFile}
	cred := writeFile(t, "replica-credential", strings.Repeat("cd", 32)+"\n", 0o600)
	config := routeConfig(t, k.Topic, 16)
	replica := func(name, caFile string) string {
		f := placementServeFlags(db, k, config)
		f.replica, f.listen, f.http, f.replicaCredFile, f.replicaCAFile = name, freeAddr(t), tlsOn, cred, caFile
		return startServeFlags(t, f)
	}
	holder := replica("r1", ca.CertFile)
	trusting, blind := replica("r2", ca.CertFile), replica("r3", "")
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool}}, Timeout: 30 * time.Second}
	call := func(addr, path, body string) (int, map[string]any) { return postOps(t, hc, addr, path, body) }
	status, grant := call(holder, "/v1/leases", `{"name":"shard:9","owner_id":"w","ttl_ms":60000}`)
	if status != http.StatusCreated {
		t.Fatalf("acquire: %d %v", status, grant)
	}
	batch := fmt.Sprintf(`{"owner_id":"w","token":%v,"batch_id":"b1","records":[{"value":{"type":"STRING","data":"v"}}]}`, grant["token"])
	if status, res := call(trusting, "/v1/leases/shard:9/records", batch); status != http.StatusOK {
		t.Fatalf("produce forwarded over HTTPS: %d %v", status, res)
	}
	status, res := call(blind, "/v1/leases/shard:9/records", batch)
	if status != http.StatusMisdirectedRequest || res["holder_url"] != "https://"+holder {
		t.Fatalf("produce at a replica that cannot verify the holder: %d %v, want 421 toward https://%s", status, res, holder)
	}
}

// startServeFlags runs serve with f until the test ends and returns its
// listen address.
func startServeFlags(t *testing.T, f serveFlags) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready, done := make(chan string, 1), make(chan error, 1)
	go func() { done <- serve(ctx, f, discard, ready) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve %s: %v", f.replica, err)
		}
	})
	select {
	case addr := <-ready:
		return addr
	case err := <-done:
		done <- nil
		t.Fatalf("serve %s: %v", f.replica, err)
	}
	return ""
}

// TestFM88_MutualTLSReplicasForwardWithTheirCertificate: replicas that
// require mutual TLS (--tls-client-ca) forward to each other: the
// forwarder presents its client certificate (--replica-client-cert), and
// the produce sent to the replica without the lease is answered by the
// holder (200). Before, the forwarder presented none, the holder's
// handshake refused it, and every forward ended in 421.
func TestFM88_MutualTLSReplicasForwardWithTheirCertificate(t *testing.T) {
	t.Parallel()
	db := pgtest.NewEmpty(t)
	k := kafkatest.Start(t, "shard-output", 16)
	ca := kafkatest.NewCA(t, "replicas-ca")
	pair, own, worker := ca.Server(t, "replica"), ca.Client(t, "replica-forwarder"), ca.Client(t, "worker")
	mtls := gateway.ServerConfig{TLSCertFile: pair.CertFile, TLSKeyFile: pair.KeyFile, TLSClientCAFile: ca.CertFile}
	cred := writeFile(t, "replica-credential", strings.Repeat("ef", 32)+"\n", 0o600)
	config := routeConfig(t, k.Topic, 16)
	replica := func(name string) string {
		f := placementServeFlags(db, k, config)
		f.replica, f.listen, f.http, f.replicaCredFile, f.replicaCAFile = name, freeAddr(t), mtls, cred, ca.CertFile
		f.replicaClientCert, f.replicaClientKey = own.CertFile, own.KeyFile
		return startServeFlags(t, f)
	}
	holder, other := replica("r1"), replica("r2")
	cert, err := tls.LoadX509KeyPair(worker.CertFile, worker.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool, Certificates: []tls.Certificate{cert}}},
		Timeout: 30 * time.Second}
	call := func(addr, path, body string) (int, map[string]any) { return postOps(t, hc, addr, path, body) }
	status, grant := call(holder, "/v1/leases", `{"name":"shard:9","owner_id":"w","ttl_ms":60000}`)
	if status != http.StatusCreated {
		t.Fatalf("acquire: %d %v", status, grant)
	}
	batch := fmt.Sprintf(`{"owner_id":"w","token":%v,"batch_id":"b1","records":[{"value":{"type":"STRING","data":"v"}}]}`, grant["token"])
	if status, res := call(other, "/v1/leases/shard:9/records", batch); status != http.StatusOK {
		t.Fatalf("produce forwarded between mutual-TLS replicas: %d %v, want 200 from the holder", status, res)
	}
}

// postOps POSTs body to https://addr+path as the operator client through
// hc, and returns the status and the decoded JSON answer.
func postOps(t *testing.T, hc *http.Client, addr, path, body string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest("POST", "https://"+addr+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer ops-token")
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}
