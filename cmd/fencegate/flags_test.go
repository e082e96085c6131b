package main

import (
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
