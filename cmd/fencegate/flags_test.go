package main

import (
	"fmt"
	"io"
	"testing"

	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/internal/telemetry"
	"github.com/fencegate/fencegate/leasestore"
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

// TestServeFlagDefaults: every serve flag that sets a gateway, lease-store
// or telemetry setting defaults to the library's named default, so that
// the flag, its help text and the library cannot disagree. It parses no
// arguments and no environment (fs.Parse, not parse).
func TestServeFlagDefaults(t *testing.T) {
	t.Parallel()
	var f serveFlags
	fs := flagSet("serve", io.Discard)
	f.register(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	lim, srv := gateway.DefaultLimits(), gateway.DefaultServerConfig()
	for _, c := range []struct {
		name      string
		got, want any
	}{
		{"transaction-timeout", f.txnTimeout, gateway.DefaultTransactionTimeout},
		{"park-after", f.parkAfter, gateway.DefaultParkAfter},
		{"park-after as Config.ParkAfter", f.gatewayParkAfter(), gateway.DefaultParkAfter},
		{"max-handovers", f.maxHandovers, gateway.DefaultMaxConcurrentHandovers},
		{"max-sessions", f.maxSessions, gateway.DefaultMaxSessions},
		{"max-sessions-per-client", f.maxSessionsPerClient, gateway.DefaultMaxSessionsPerClient},
		{"limits", f.limits, lim},
		{"read-header-timeout", f.http.ReadHeaderTimeout, srv.ReadHeaderTimeout},
		{"read-timeout", f.http.ReadTimeout, srv.ReadTimeout},
		{"write-timeout", f.http.WriteTimeout, srv.WriteTimeout},
		{"idle-timeout", f.http.IdleTimeout, srv.IdleTimeout},
		{"max-inflight", f.http.MaxInFlight, srv.MaxInFlight},
		{"max-inflight-per-client", f.http.MaxInFlightPerClient, srv.MaxInFlightPerClient},
		{"max-body-bytes-in-flight", f.http.MaxBodyBytesInFlight, srv.MaxBodyBytesInFlight},
		{"min-ttl", f.minTTL, leasestore.DefaultMinTTL},
		{"max-ttl", f.maxTTL, leasestore.DefaultMaxTTL},
		{"lease-metrics-limit", f.leaseMetricsLimit, telemetry.DefaultLeaseSeriesLimit},
	} {
		if c.got != c.want {
			t.Errorf("--%s defaults to %v, the library to %v", c.name, c.got, c.want)
		}
	}
	// 0 on the command line still never parks, although the library's
	// zero takes the default.
	if err := fs.Parse([]string{"--park-after=0"}); err != nil {
		t.Fatal(err)
	}
	if got := f.gatewayParkAfter(); got != gateway.ParkNever {
		t.Errorf("--park-after=0 is ParkAfter %v, want ParkNever", got)
	}
}
