package main

import (
	"bytes"
	"net/http"
	"os"
	"path/filepath"
	"testing"
)

// TestDevConfigFilesAgree: the development file built into the binary is
// deploy/dev/fencegate.yaml, byte for byte (the harness and the docs name
// the repository's copy).
func TestDevConfigFilesAgree(t *testing.T) {
	t.Parallel()
	repo, err := os.ReadFile(filepath.Join(repoRoot, devConfig))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(repo, devConfigYAML) {
		t.Fatalf("%s and cmd/fencegate/devconfig.yaml differ: change both", devConfig)
	}
}

// TestDevRunsOutsideTheRepository: `fencegate dev` without --config,
// started in a directory that is not the repository, serves the
// development routes (its file is built in). It used to stop at
// `open deploy/dev/fencegate.yaml`. Not parallel: it changes directory.
func TestDevRunsOutsideTheRepository(t *testing.T) {
	dbURL := newDevDatabaseURL(t)
	t.Chdir(t.TempDir())
	listen, stop := startDev(t, func() []string {
		return []string{"dev", "--database-url", dbURL, "--listen", freeAddr(t),
			"--kafka-listen", freeAddr(t), "--materializer-listen", freeAddr(t)}
	})
	req, _ := http.NewRequest("POST", "http://"+listen+"/v1/leases",
		bytes.NewReader([]byte(`{"name":"shard:7","owner_id":"w","ttl_ms":10000}`)))
	req.Header.Set("Authorization", "Bearer "+devToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("acquire of shard:7 with dev-token on the built-in file: %d", resp.StatusCode)
	}
	if code := stop(); code != 0 {
		t.Fatalf("dev exited %d after cancel", code)
	}
}

// gatewayReady says whether the gateway at listen answers /readyz 200.
func gatewayReady(listen string) bool {
	resp, err := http.Get("http://" + listen + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}
