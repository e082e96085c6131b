package main

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
)

// TestUsageErrorsExitTwoAndPrintOnce: a command line the command cannot
// run exits 2 and says why once.
func TestUsageErrorsExitTwoAndPrintOnce(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"serve", "--no-such-flag"}, "flag provided but not defined: -no-such-flag"},
		{[]string{"leases"}, "usage: fencegate leases"},
		{[]string{"leases", "show"}, "usage: fencegate leases"},
		{[]string{"leases", "list", "-o", "yaml"}, "-o must be table or json"},
		{[]string{"serve", "--barrier-key", "k"}, "--barrier-key is refused on the command line"},
		{[]string{"nosuchcommand"}, `unknown command "nosuchcommand"`},
	} {
		var out, errb bytes.Buffer
		code := run(context.Background(), tc.args, &out, &errb)
		if code != 2 {
			t.Errorf("%v: exit %d, want 2 (stderr %q)", tc.args, code, errb.String())
		}
		if n := strings.Count(errb.String(), tc.says); n != 1 {
			t.Errorf("%v: stderr says %q %d times, want once:\n%s", tc.args, tc.says, n, errb.String())
		}
	}
}

// TestHelpNamesEnvironmentAndDefaults: --help lists every flag with its
// default and the FENCEGATE_* variable that sets it, and exits 0.
func TestHelpNamesEnvironmentAndDefaults(t *testing.T) {
	t.Parallel()
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"serve", "-h"}, &out, &errb); code != 0 {
		t.Fatalf("serve -h: exit %d", code)
	}
	for _, want := range []string{"-listen", "[FENCEGATE_LISTEN]", "-min-ttl", "(default 100ms)", "[FENCEGATE_DRAIN_TIMEOUT]", "[FENCEGATE_KAFKA_BROKERS]"} {
		if !strings.Contains(errb.String(), want) {
			t.Errorf("serve -h lacks %q:\n%s", want, errb.String())
		}
	}
}

// TestOutputFlagsIgnoreEnvironment: a variable that happens to be named
// like an output or selection flag (FENCEGATE_JSON, left in the shell by
// another tool) does not reach that flag; only settings read FENCEGATE_*.
// Not parallel: it sets the environment.
func TestOutputFlagsIgnoreEnvironment(t *testing.T) {
	t.Setenv("FENCEGATE_JSON", "r.json")
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"version"}, &out, &errb); code != 0 {
		t.Fatalf("FENCEGATE_JSON=r.json fencegate version: exit %d: %s", code, errb.String())
	}
	if !strings.HasPrefix(out.String(), "fencegate ") {
		t.Fatalf("FENCEGATE_JSON=r.json fencegate version printed %q, want the text form", out.String())
	}
	// The materializer's FENCEGATE_PARTITIONS (0-7) is no count for
	// routes set-partitions, whose connection flags still read theirs.
	t.Setenv("FENCEGATE_PARTITIONS", "0-7")
	t.Setenv("FENCEGATE_KAFKA_BROKERS", "10.0.0.1:9092")
	var f routesFlags
	fs := flagSet("routes set-partitions", io.Discard)
	f.register(fs)
	if err := parse(fs, nil); err != nil || f.partitions != 0 || f.brokers != "10.0.0.1:9092" {
		t.Fatalf("routes set-partitions under FENCEGATE_PARTITIONS=0-7: %v, partitions %d, brokers %q", err, f.partitions, f.brokers)
	}
}

// TestBadEnvironmentValueNamesVariableAndFlag: a FENCEGATE_* value that
// does not parse is a usage error (exit 2) naming the variable and the
// flag it sets. Not parallel: it sets the environment.
func TestBadEnvironmentValueNamesVariableAndFlag(t *testing.T) {
	t.Setenv("FENCEGATE_MAX_RECORDS", "many")
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"serve"}, &out, &errb); code != 2 {
		t.Fatalf("FENCEGATE_MAX_RECORDS=many fencegate serve: exit %d, want 2: %s", code, errb.String())
	}
	for _, want := range []string{"FENCEGATE_MAX_RECORDS", "--max-records", `"many"`} {
		if !strings.Contains(errb.String(), want) {
			t.Errorf("the error lacks %s: %s", want, errb.String())
		}
	}
}
