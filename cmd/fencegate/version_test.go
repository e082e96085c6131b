package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
)

// TestVersion: `fencegate --version` and `fencegate version --json` name
// the version, commit and librdkafka version (the fields of
// fencegate_build_info), and exit 0.
func TestVersion(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"--version"}, {"-version"}, {"version"}} {
		var out, errb bytes.Buffer
		if code := run(context.Background(), args, &out, &errb); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errb.String())
		}
		if !strings.HasPrefix(out.String(), "fencegate ") || !strings.Contains(out.String(), "librdkafka 2.") ||
			!strings.Contains(out.String(), "commit ") {
			t.Errorf("%v printed %q", args, out.String())
		}
	}
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"version", "--json"}, &out, &errb); code != 0 {
		t.Fatalf("version --json: exit %d: %s", code, errb.String())
	}
	var b map[string]string
	if err := json.Unmarshal(out.Bytes(), &b); err != nil {
		t.Fatalf("version --json: %v: %s", err, out.String())
	}
	for _, k := range []string{"version", "commit", "go_version", "librdkafka_version"} {
		if b[k] == "" {
			t.Errorf("version --json lacks %s: %s", k, out.String())
		}
	}
}
