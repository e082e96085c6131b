package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/internal/kafkatest"
	"github.com/fencegate/fencegate/internal/pgtest"
	"github.com/fencegate/fencegate/internal/syncbuf"
)

// discard is a logger for tests that do not read the log.
var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

// writeFile writes b to a new file named name in t's directory with mode.
func writeFile(t *testing.T, name, b string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(b), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil { // past the umask
		t.Fatal(err)
	}
	return p
}

// TestFM45_ServeRefusesDevelopmentSecrets: serve refuses to start on a
// secret that is public: the development barrier key (in the source),
// the Kubernetes example's placeholder key (from a file, as the manifests
// mount it), either as a verify-only key, and a config accepting the
// development bearer token dev-token (deploy/dev/fencegate.yaml itself,
// or its hash in another file). The materializer refuses the same keys.
// Where serve used to start on each, it names the cause and never the
// key; `fencegate dev` (f.dev) still runs on the development key and file.
func TestFM45_ServeRefusesDevelopmentSecrets(t *testing.T) {
	t.Parallel()
	db := pgtest.NewEmpty(t)
	k := kafkatest.Start(t, "shard-output", 16)
	own := routeConfig(t, k.Topic, 16)
	devHash := writeFile(t, "dev-hash.yaml", "routes:\n  - {pattern: \"shard:*\", topic: "+k.Topic+", partitions: 16}\n"+
		"clients:\n  - {name: ops, token_sha256: "+gateway.HashToken("ops-token")+", allow: [\"*\"]}\n"+
		"  - {name: sneaky, token_sha256: "+strings.ToUpper(gateway.HashToken(devToken))+", allow: [\"shard:1\"]}\n", 0o600)
	devFile := writeFile(t, "dev.yaml", strings.ReplaceAll(readFile(t, "../../deploy/dev/fencegate.yaml"), "shard-output", k.Topic), 0o600)
	placeholder := writeFile(t, "barrier-key", "REPLACE-with-openssl-rand-hex-32\n", 0o600)
	for _, c := range []struct {
		name, config, key, keyFile, want string
	}{
		{"development key", own, devBarrierKey, "", "development barrier key"},
		{"development key, verify-only", own, "0123456789abcdef0123," + devBarrierKey, "", "barrier key 2 of 2: it is the development barrier key"},
		{"example placeholder from a file", own, "", placeholder, "placeholder of the deployment examples"},
		{"example placeholder of the materializer", own, "0123456789abcdef0123,REPLACE-with-the-same-key", "", "placeholder"},
		{"development file", devFile, "0123456789abcdef0123", "", `client "dev-worker" accepts the development bearer token "dev-token"`},
		{"development token's hash in another file", devHash, "0123456789abcdef0123", "", `client "sneaky" accepts the development bearer token`},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := placementServeFlags(db, k, c.config)
			f.barrierKey, f.barrierKeyFile = c.key, c.keyFile
			err := serveOnce(t, f)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("serve: %v, want a refusal naming %q", err, c.want)
			}
			if strings.Contains(err.Error(), devBarrierKey) || strings.Contains(err.Error(), "rand-hex-32") {
				t.Fatalf("the refusal repeats the key: %v", err)
			}
			if c.config != own {
				return // the materializer authenticates no one: the token is the gateway's to refuse
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			err = materialize(ctx, materializeFlags{listen: "127.0.0.1:0", commonFlags: f.commonFlags}, discard)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("materialize: %v, want a refusal naming %q", err, c.want)
			}
		})
	}
	t.Run("fencegate dev", func(t *testing.T) {
		f := placementServeFlags(db, k, devFile)
		f.barrierKey, f.dev = devBarrierKey, true
		if err := serveOnce(t, f); err != nil {
			t.Fatalf("serve as dev runs it, on the development key and file: %v", err)
		}
	})
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestFM45_ReadableKeyFileWarns: serve started on a barrier key file that
// group or others may read logs a WARN naming the file and its mode (never
// the key) and starts; a 0600 file logs nothing of the kind.
func TestFM45_ReadableKeyFileWarns(t *testing.T) {
	t.Parallel()
	db := pgtest.NewEmpty(t)
	k := kafkatest.Start(t, "shard-output", 16)
	const key = "0123456789abcdef0123-not-to-be-logged"
	for _, c := range []struct {
		mode os.FileMode
		warn bool
	}{{0o644, true}, {0o640, true}, {0o604, true}, {0o600, false}, {0o400, false}} {
		p := writeFile(t, "barrier-key", key+"\n", c.mode)
		f := placementServeFlags(db, k, routeConfig(t, k.Topic, 16))
		f.barrierKey, f.barrierKeyFile = "", p
		var logs syncbuf.Buffer
		if err := serveOnceLogged(t, f, slog.New(slog.NewTextHandler(&logs, nil))); err != nil {
			t.Fatalf("mode %#o: serve: %v", c.mode, err)
		}
		out := logs.String()
		var line string
		for _, l := range strings.Split(out, "\n") {
			if strings.Contains(l, "barrier key file is readable") {
				line = l
			}
		}
		switch {
		case strings.Contains(out, key):
			t.Fatalf("mode %#o: the log holds the key:\n%s", c.mode, out)
		case c.warn && (!strings.Contains(line, "level=WARN") || !strings.Contains(line, "path="+p) ||
			!strings.Contains(line, fmt.Sprintf("mode=%#o", c.mode))):
			t.Fatalf("mode %#o: want a WARN with path and mode, got %q in:\n%s", c.mode, line, out)
		case !c.warn && line != "":
			t.Fatalf("mode %#o: warned: %s", c.mode, line)
		}
	}
}

// serveOnceLogged is serveOnce with the log of serve going to log.
func serveOnceLogged(t *testing.T, f serveFlags, log *slog.Logger) error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- serve(ctx, f, log, ready) }()
	select {
	case <-ready:
		cancel()
		return <-done
	case err := <-done:
		if err == nil {
			err = errors.New("serve returned nil before it listened")
		}
		return err
	}
}
