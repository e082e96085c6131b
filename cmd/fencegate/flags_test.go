package main

import (
	"fmt"
	"io"
	"testing"
)

// TestFlagsFromEnvironment: FENCEGATE_<FLAG> sets a flag, the command line
// wins over it.
func TestFlagsFromEnvironment(t *testing.T) {
	t.Setenv("FENCEGATE_KAFKA_BROKERS", "10.0.0.1:9092")
	t.Setenv("FENCEGATE_MAX_RECORDS", "7")
	t.Setenv("FENCEGATE_LISTEN", "127.0.0.1:1")
	var f serveFlags
	fs := flagSet("serve", io.Discard)
	f.register(fs)
	if err := parse(fs, []string{"--listen", "127.0.0.1:2"}); err != nil {
		t.Fatal(err)
	}
	if f.brokers != "10.0.0.1:9092" || f.limits.MaxRecords != 7 {
		t.Fatalf("environment not applied: brokers %q, max records %d", f.brokers, f.limits.MaxRecords)
	}
	if f.listen != "127.0.0.1:2" {
		t.Fatalf("command line did not win: listen %q", f.listen)
	}
	t.Setenv("FENCEGATE_MAX_RECORDS", "many")
	if err := parse(fs, nil); err == nil {
		t.Fatal("a bad environment value was accepted")
	}
}

func TestParsePartitions(t *testing.T) {
	t.Parallel()
	got, err := parsePartitions("0-2, 7,9-9")
	if err != nil || fmt.Sprint(got) != "[0 1 2 7 9]" {
		t.Fatalf("parsePartitions = %v, %v", got, err)
	}
	for _, bad := range []string{"x", "3-1", "-1", "1-"} {
		if _, err := parsePartitions(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if got, err := parsePartitions(""); err != nil || len(got) != 0 {
		t.Fatalf("empty spec: %v %v", got, err)
	}
}
