package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/internal/kafkatest"
	"github.com/fencegate/fencegate/internal/pgtest"
)

// startServe runs `serve` in process with f's HTTP settings on a fresh
// database and broker, a client "ops" (bearer ops-token, every lease) and
// a client "cert-worker" known only by its certificate's common name. It
// returns the listen address.
func startServe(t *testing.T, http gateway.ServerConfig) string {
	t.Helper()
	return startServeOn(t, pgtest.NewEmpty(t), http)
}

// startServeOn is startServe on the database db (serve migrates it).
func startServeOn(t *testing.T, db *pgtest.DB, http gateway.ServerConfig) string {
	t.Helper()
	clients := fmt.Sprintf("  - {name: ops, token_sha256: %s, allow: [\"*\"]}\n  - {name: cert-worker, certificate_cn: worker-7, allow: [\"shard:7*\"]}\n"+
		"  - {name: other, token_sha256: %s, allow: [\"*\"]}\n", gateway.HashToken("ops-token"), gateway.HashToken("other-token"))
	return startServeWith(t, db, http, clients, false)
}

// startServeWith runs `serve` in process on db and a fresh broker with
// the route shard:* (16 partitions) and clients (YAML list items); dev
// lets the config name the development token, as `fencegate dev` does.
// It returns the listen address.
func startServeWith(t *testing.T, db *pgtest.DB, http gateway.ServerConfig, clients string, dev bool) string {
	t.Helper()
	k := kafkatest.Start(t, "shard-output", 16)
	cfg := filepath.Join(t.TempDir(), "fencegate.yaml")
	yaml := "transactional_id_prefix: t\nroutes:\n  - {pattern: \"shard:*\", topic: shard-output, partitions: 16}\nclients:\n" + clients
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	f := serveFlags{listen: "127.0.0.1:0", replica: "r1", minTTL: time.Millisecond, maxTTL: time.Hour,
		txnTimeout: 10 * time.Second, http: http, commonFlags: commonFlags{databaseURL: db.URL, brokers: k.Brokers,
			configPath: cfg, barrierKey: "0123456789abcdef0123", migrate: true, dev: dev}}
	go func() { done <- serve(ctx, f, slog.New(slog.NewTextHandler(io.Discard, nil)), ready) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	select {
	case addr := <-ready:
		return addr
	case err := <-done:
		done <- nil
		t.Fatalf("serve: %v", err)
	}
	return ""
}

// curl runs the real curl and returns its HTTP status (0: no answer) and
// output.
func curl(t *testing.T, args ...string) (int, string) {
	t.Helper()
	out, _ := exec.Command("curl", append([]string{"-sS", "--max-time", "20", "-o", "/dev/stderr", "-w", "%{http_code}"}, args...)...).CombinedOutput()
	s := string(out)
	var code int
	if len(s) >= 3 {
		_, _ = fmt.Sscanf(s[len(s)-3:], "%d", &code)
	}
	return code, s
}

func requireCurl(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl is not installed")
	}
}

// writeAtomically replaces path as a certificate renewal does: write
// aside, rename over.
func writeAtomically(t *testing.T, path, from string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	tmp := path + ".new"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// TestHTTPS: the gateway serves HTTPS from --tls-cert/--tls-key; curl and
// the Go SDK take a lease and produce over it; plain HTTP to the port is
// refused; a certificate renewed in place is served to new connections
// without a restart.
func TestHTTPS(t *testing.T) {
	requireCurl(t)
	ca := kafkatest.NewCA(t, "gateway-ca")
	first := ca.Server(t, "gateway")
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	writeAtomically(t, certFile, first.CertFile)
	writeAtomically(t, keyFile, first.KeyFile)
	addr := startServe(t, gateway.ServerConfig{TLSCertFile: certFile, TLSKeyFile: keyFile})
	base := "https://" + addr

	code, out := curl(t, "--cacert", ca.CertFile, "-H", "Authorization: Bearer ops-token", "-H", "Content-Type: application/json",
		"-d", `{"name":"shard:1","owner_id":"curl","ttl_ms":60000}`, base+"/v1/leases")
	if code != http.StatusCreated {
		t.Fatalf("curl acquire over HTTPS: %d %s", code, out)
	}
	if code, out := curl(t, base+"/healthz"); code != 0 || !strings.Contains(out, "certificate") {
		t.Fatalf("curl without the CA: %d %s (want a certificate error)", code, out)
	}
	if code, out := curl(t, "http://"+addr+"/healthz"); code != http.StatusBadRequest {
		t.Fatalf("plain HTTP to the HTTPS port: %d %s", code, out)
	}

	// Go's client (what the SDK uses), one keep-alive connection.
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool}}, Timeout: 30 * time.Second}
	post := func(path, body string) (int, map[string]any) {
		req, _ := http.NewRequest("POST", base+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer ops-token")
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("Go client over HTTPS: %v", err)
		}
		defer resp.Body.Close()
		var out map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode, out
	}
	status, grant := post("/v1/leases", `{"name":"shard:2","owner_id":"go","ttl_ms":60000}`)
	if status != http.StatusCreated {
		t.Fatalf("Go client acquire over HTTPS: %d %v", status, grant)
	}
	status, res := post("/v1/leases/shard:2/records", fmt.Sprintf(`{"owner_id":"go","token":%v,"batch_id":"b-1",`+
		`"records":[{"value":{"type":"STRING","data":"over tls"}}]}`, grant["token"]))
	if offs, _ := res["offsets"].([]any); status != http.StatusOK || len(offs) != 1 {
		t.Fatalf("Go client produce over HTTPS: %d %v", status, res)
	}

	// Renewal: new connections get the new certificate.
	served := func() string {
		conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: ca.Pool, ServerName: "127.0.0.1"})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].SerialNumber.String()
	}
	before := served()
	second := ca.Server(t, "gateway")
	writeAtomically(t, keyFile, second.KeyFile)
	writeAtomically(t, certFile, second.CertFile)
	want := mustParse(t, second.CertFile).SerialNumber.String()
	if before == want {
		t.Fatal("the renewed certificate has the old serial")
	}
	// The files are checked at every handshake: the next one sees them.
	if got := served(); got != want {
		t.Fatalf("serving serial %s after the renewal, want %s", got, want)
	}
	if code, out := curl(t, "--cacert", ca.CertFile, base+"/healthz"); code != http.StatusOK {
		t.Fatalf("curl after the renewal: %d %s", code, out)
	}
	// A renewal that does not load (a key written half) keeps the last
	// good pair in service.
	if err := os.WriteFile(keyFile, []byte("-----BEGIN EC PRIVATE KEY-----\ntrunc"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := served(); got != want {
		t.Fatalf("serving serial %s after a broken renewal, want the last good %s", got, want)
	}
}

func mustParse(t *testing.T, certFile string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(certFile)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(pemBlock(t, b))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestMutualTLS: with --tls-client-ca the gateway refuses a client without
// a certificate at the handshake; a verified certificate whose common name
// is a client's certificate_cn stands in for the bearer token (and its
// patterns apply); an unknown common name without a token is 401; a
// bearer token still works over mutual TLS.
func TestMutualTLS(t *testing.T) {
	requireCurl(t)
	ca := kafkatest.NewCA(t, "gateway-ca")
	srv := ca.Server(t, "gateway")
	clients := kafkatest.NewCA(t, "worker-ca")
	addr := startServe(t, gateway.ServerConfig{TLSCertFile: srv.CertFile, TLSKeyFile: srv.KeyFile, TLSClientCAFile: clients.CertFile})
	base := "https://" + addr
	worker, stranger := clients.Client(t, "worker-7"), clients.Client(t, "worker-8")
	foreign := kafkatest.NewCA(t, "other-ca").Client(t, "worker-7")

	if code, out := curl(t, "--cacert", ca.CertFile, "-H", "Authorization: Bearer ops-token", base+"/v1/leases"); code != 0 {
		t.Fatalf("no client certificate: %d %s (want the handshake refused)", code, out)
	}
	if code, out := curl(t, "--cacert", ca.CertFile, "--cert", foreign.CertFile, "--key", foreign.KeyFile, base+"/v1/leases"); code != 0 {
		t.Fatalf("a certificate of another CA: %d %s (want the handshake refused)", code, out)
	}
	withCert := []string{"--cacert", ca.CertFile, "--cert", worker.CertFile, "--key", worker.KeyFile, "-H", "Content-Type: application/json"}
	code, out := curl(t, append(withCert, "-d", `{"name":"shard:71","owner_id":"w7","ttl_ms":60000}`, base+"/v1/leases")...)
	if code != http.StatusCreated {
		t.Fatalf("acquire by certificate: %d %s", code, out)
	}
	if code, out := curl(t, append(withCert, "-d", `{"name":"shard:5","owner_id":"w7","ttl_ms":60000}`, base+"/v1/leases")...); code != http.StatusForbidden {
		t.Fatalf("acquire outside the certificate client's patterns: %d %s", code, out)
	}
	if code, out := curl(t, "--cacert", ca.CertFile, "--cert", stranger.CertFile, "--key", stranger.KeyFile, base+"/v1/leases"); code != http.StatusUnauthorized {
		t.Fatalf("unknown certificate name without a token: %d %s", code, out)
	}
	if code, out := curl(t, "--cacert", ca.CertFile, "--cert", stranger.CertFile, "--key", stranger.KeyFile,
		"-H", "Authorization: Bearer ops-token", base+"/v1/leases"); code != http.StatusOK {
		t.Fatalf("bearer token over mutual TLS: %d %s", code, out)
	}
}

func pemBlock(t *testing.T, b []byte) []byte {
	t.Helper()
	blk, _ := pem.Decode(b)
	if blk == nil {
		t.Fatal("no PEM block")
	}
	return blk.Bytes
}

// TestFM44_TwoCommonNamesRefused: over mutual TLS, a verified client
// certificate whose subject holds two common names ("intruder", then the
// certificate_cn "worker-7" of cert-worker) names no client: 401, though
// Go's Subject.CommonName is the last one, "worker-7", and a CA whose
// policy checked only the first would have signed it. The same CA's
// one-name certificate for worker-7 still authenticates.
func TestFM44_TwoCommonNamesRefused(t *testing.T) {
	t.Parallel()
	ca := kafkatest.NewCA(t, "gateway-ca")
	srv := ca.Server(t, "gateway")
	clients := kafkatest.NewCA(t, "worker-ca")
	addr := startServe(t, gateway.ServerConfig{TLSCertFile: srv.CertFile, TLSKeyFile: srv.KeyFile, TLSClientCAFile: clients.CertFile})
	get := func(cert kafkatest.Pair) (int, string) {
		t.Helper()
		c := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
			RootCAs: ca.Pool, Certificates: []tls.Certificate{cert.TLS}}}}
		defer c.CloseIdleConnections()
		resp, err := c.Get("https://" + addr + "/v1/leases?prefix=shard:7")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	two := clients.ClientWithCNs(t, "intruder", "worker-7")
	if cn := mustParse(t, two.CertFile).Subject.CommonName; cn != "worker-7" {
		t.Fatalf("Go reads the two-name certificate as %q; the test expects the last name", cn)
	}
	if code, body := get(two); code != http.StatusUnauthorized || !strings.Contains(body, "common name") {
		t.Fatalf("a certificate with two common names: %d %s, want 401 naming the cause", code, body)
	}
	if code, body := get(clients.ClientWithCNs(t, "worker-7", "worker-7")); code != http.StatusUnauthorized {
		t.Fatalf("a certificate naming worker-7 twice: %d %s, want 401", code, body)
	}
	if code, body := get(clients.Client(t, "worker-7")); code != http.StatusOK {
		t.Fatalf("the one-name certificate of worker-7: %d %s", code, body)
	}
}

// TestFM42_ServeRefusesPlainAdvertiseURLOverHTTPS: a replica serving HTTPS
// that advertises an http:// URL would have other replicas send its
// workers, bearer tokens included, over plain HTTP; serve refuses to start
// and names the flag. Before: it started without a word.
func TestFM42_ServeRefusesPlainAdvertiseURLOverHTTPS(t *testing.T) {
	t.Parallel()
	ca := kafkatest.NewCA(t, "gateway-ca")
	pair := ca.Server(t, "gateway")
	cfg := filepath.Join(t.TempDir(), "fencegate.yaml")
	yaml := "transactional_id_prefix: t\nroutes:\n  - {pattern: \"shard:*\", topic: shard-output, partitions: 16}\n" +
		"clients:\n  - {name: ops, token_sha256: " + gateway.HashToken("ops-token") + ", allow: [\"*\"]}\n"
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, adv := range []string{"http://gw1.example.internal:8080", "gw1.example.internal:8080"} {
		f := serveFlags{listen: "127.0.0.1:0", replica: "r1", advertise: adv, minTTL: time.Millisecond, maxTTL: time.Hour,
			http: gateway.ServerConfig{TLSCertFile: pair.CertFile, TLSKeyFile: pair.KeyFile},
			commonFlags: commonFlags{databaseURL: "postgres://nobody@127.0.0.1:1/none", brokers: "127.0.0.1:1",
				configPath: cfg, barrierKey: "0123456789abcdef0123"}}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := serve(ctx, f, slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
		cancel()
		if err == nil || !strings.Contains(err.Error(), "--advertise-url") {
			t.Errorf("serve over HTTPS advertising %s: %v, want a refusal naming --advertise-url", adv, err)
		}
	}
}
