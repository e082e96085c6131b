package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestServeAndMaterializeNeedConfig: without --config the long-running
// components refuse to start and say what to do; they never fall back to
// the development file (bearer dev-token on every lease).
func TestServeAndMaterializeNeedConfig(t *testing.T) {
	t.Setenv("FENCEGATE_CONFIG", "")
	_ = os.Unsetenv("FENCEGATE_CONFIG")
	for _, sub := range []string{"serve", "materialize"} {
		var stderr bytes.Buffer
		code := run(context.Background(), []string{sub, "--database-url", "postgres://nobody@127.0.0.1:1/none"}, &bytes.Buffer{}, &stderr)
		if code == 0 || !strings.Contains(stderr.String(), "no --config") || !strings.Contains(stderr.String(), "fencegate dev") {
			t.Errorf("%s without --config: exit %d, %q", sub, code, stderr.String())
		}
		t.Logf("%s: %s", sub, strings.TrimSpace(stderr.String()))
	}
}

// TestSecretsNeverInArgv: --barrier-key and --kafka-sasl-password are
// refused on the command line in every form, and the refusal does not
// repeat the value; the environment sets them.
func TestSecretsNeverInArgv(t *testing.T) {
	const value = "do-not-print-me-0123456789"
	for _, args := range [][]string{
		{"serve", "--barrier-key", value},
		{"serve", "-barrier-key=" + value},
		{"materialize", "--kafka-sasl-password", value},
		{"dev", "--barrier-key=" + value},
		{"leases", "list", "--token", value},
		{"loadtest", "--token=" + value},
	} {
		var stderr bytes.Buffer
		code := run(context.Background(), args, &bytes.Buffer{}, &stderr)
		out := stderr.String()
		if code == 0 || !strings.Contains(out, "refused on the command line") || strings.Contains(out, value) {
			t.Errorf("%v: exit %d, %q", args, code, out)
		}
	}
	t.Setenv("FENCEGATE_BARRIER_KEY", value+",older-key-0123456789")
	var f serveFlags
	fs := flagSet("serve", &bytes.Buffer{})
	f.register(fs)
	if err := parse(fs, nil); err != nil {
		t.Fatal(err)
	}
	sign, previous, err := f.barrierKeys(discard)
	if err != nil || string(sign) != value || len(previous) != 1 || string(previous[0]) != "older-key-0123456789" {
		t.Fatalf("keys from the environment: %q %q %v", sign, previous, err)
	}
	// -h shows the flag but never the value.
	var help bytes.Buffer
	if code := run(context.Background(), []string{"serve", "-h"}, &bytes.Buffer{}, &help); code != 0 || strings.Contains(help.String(), value) ||
		!strings.Contains(help.String(), "FENCEGATE_BARRIER_KEY only") {
		t.Fatalf("help: exit %d: %s", code, help.String())
	}
}

// TestBarrierKeyFile: one key a line, the first signs; not both a file
// and the variable; no key at all is an error naming both ways.
func TestBarrierKeyFile(t *testing.T) {
	t.Parallel()
	p := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(p, []byte("new-key-0123456789abcdef\n\nold-key-0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f := commonFlags{barrierKeyFile: p}
	sign, previous, err := f.barrierKeys(discard)
	if err != nil || string(sign) != "new-key-0123456789abcdef" || len(previous) != 1 {
		t.Fatalf("file: %q %q %v", sign, previous, err)
	}
	f.barrierKey = "x"
	if _, _, err := f.barrierKeys(discard); err == nil || !strings.Contains(err.Error(), "give one") {
		t.Fatalf("both: %v", err)
	}
	if _, _, err := (&commonFlags{}).barrierKeys(discard); err == nil || !strings.Contains(err.Error(), "FENCEGATE_BARRIER_KEY or --barrier-key-file") {
		t.Fatalf("none: %v", err)
	}
}
