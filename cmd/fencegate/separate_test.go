package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/pgtest"
	"github.com/fencegate/fencegate/loadtest"
	"github.com/fencegate/fencegate/loadtest/report"
	"github.com/fencegate/fencegate/loadtest/stack"
)

// TestDebugListenerOffByDefault: serve has no debug listener unless
// --debug-listen names one.
func TestDebugListenerOffByDefault(t *testing.T) {
	t.Parallel()
	var f serveFlags
	fs := flagSet("serve", io.Discard)
	f.register(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if f.debugListen != "" {
		t.Fatalf("--debug-listen defaults to %q, want off", f.debugListen)
	}
}

// TestSeparateProcesses runs a short scenario with the broker, the
// gateway (its debug listener on), the materializer and both baselines as
// child processes: the invariants hold, every process has CPU and memory
// figures, the gateway serves pprof on the debug listener and not on its
// API port.
func TestSeparateProcesses(t *testing.T) {
	t.Setenv("FENCEGATE_TEST_MAIN", "1")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	debugAddr := ln.Addr().String()
	ln.Close()
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	stk, err := stack.StartSeparateProcesses(ctx, pgtest.ServerURL(), exe,
		stack.SeparateOptions{GatewayDebugListen: debugAddr, BareProducers: 1}, log)
	if err != nil {
		t.Fatal(err)
	}
	defer stk.Close()
	sc := loadtest.Defaults()
	sc.Leases, sc.WorkersPerLease, sc.BatchSize, sc.RecordSize = 4, 1, 20, 256
	sc.Duration, sc.Rate = 2*time.Second, 10
	sc.FreezeEvery, sc.ChurnEvery, sc.Naive = 0, 0, false
	rep, err := loadtest.Run(ctx, stk, sc, loadtest.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + rep.Markdown())
	if !rep.Pass {
		t.Fatal("invariants failed")
	}
	if rep.CPU == nil || rep.Bare == nil || rep.Bare.Records == 0 || rep.Direct.Records == 0 {
		t.Fatalf("missing figures: cpu %+v bare %+v direct %+v", rep.CPU, rep.Bare, rep.Direct)
	}
	if rep.CPU.GatewaySecondsPerGiB <= 0 || rep.CPU.DirectSecondsPerGiB <= 0 || rep.CPU.BareSecondsPerGiB <= 0 {
		t.Fatalf("CPU per GiB not measured: %+v", rep.CPU)
	}
	if rep.CPU.Phases["gateway"].CPU[report.ProcGateway] <= 0 {
		t.Fatalf("the gateway process used no CPU in the gateway phase: %+v", rep.CPU.Phases)
	}
	for _, p := range []string{report.ProcBroker, report.ProcGateway, report.ProcMaterializer,
		report.ProcHarness, report.ProcDirect, report.ProcBare} {
		if rep.RSSMiB[p] <= 0 {
			t.Errorf("no resident memory for %s: %v", p, rep.RSSMiB)
		}
	}
	get := func(url string) (int, string) {
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("http://" + debugAddr + "/debug/pprof/"); code != http.StatusOK || !strings.Contains(body, "goroutine") {
		t.Fatalf("debug listener: %d %.200s", code, body)
	}
	if code, _ := get(stk.GatewayURL + "/debug/pprof/"); code == http.StatusOK {
		t.Fatal("the API port serves pprof")
	}
}
