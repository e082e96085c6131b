package main

import (
	"context"
	"log/slog"
	"os"
	"testing"

	"github.com/fencegate/fencegate/internal/pgtest"
	"github.com/fencegate/fencegate/loadtest"
	"github.com/fencegate/fencegate/loadtest/report"
	"github.com/fencegate/fencegate/loadtest/stack"
)

// runReplicas runs sc on an embedded stack whose n gateway replicas are
// child processes (this test binary stands in for fencegate, see TestMain)
// and returns the report, logged in full. Not parallel: it sets the
// environment of the children.
func runReplicas(t *testing.T, n int, sc loadtest.Scenario) *report.Report {
	t.Helper()
	t.Setenv("FENCEGATE_TEST_MAIN", "1")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	stk, err := stack.StartEmbeddedReplicas(ctx, pgtest.ServerURL(), exe, n, log)
	if err != nil {
		t.Fatal(err)
	}
	defer stk.Close()
	rep, err := loadtest.Run(ctx, stk, sc, loadtest.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + rep.Markdown())
	return rep
}
