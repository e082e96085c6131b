package main

import (
	"context"
	"log/slog"
	"os"
	"testing"

	"github.com/fencegate/fencegate/internal/pgtest"
	"github.com/fencegate/fencegate/loadtest"
)

// runReplicas runs sc on an embedded stack whose n gateway replicas are
// child processes (this test binary stands in for fencegate, see TestMain)
// and returns the report, logged in full. Not parallel: it sets the
// environment of the children.
func runReplicas(t *testing.T, n int, sc loadtest.Scenario) *loadtest.Report {
	t.Helper()
	t.Setenv("FENCEGATE_TEST_MAIN", "1")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	stack, err := loadtest.StartEmbeddedReplicas(ctx, pgtest.ServerURL(), exe, n, log)
	if err != nil {
		t.Fatal(err)
	}
	defer stack.Close()
	rep, err := loadtest.Run(ctx, stack, sc, loadtest.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + rep.Markdown())
	return rep
}
