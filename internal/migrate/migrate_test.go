package migrate_test

import (
	"context"
	"sync"
	"testing"
	"testing/fstest"

	"github.com/fencegate/fencegate/internal/migrate"
	"github.com/fencegate/fencegate/internal/pgtest"
)

// TestConcurrentApplyOnAnEmptyDatabase: replicas (or Kubernetes init
// containers) migrating one empty database at once all succeed, and each
// migration is applied once between them. The record table used to be
// created outside the advisory lock, and concurrent CREATE TABLE IF NOT
// EXISTS collided on pg_type's unique index: two of three failed.
func TestConcurrentApplyOnAnEmptyDatabase(t *testing.T) {
	t.Parallel()
	line := migrate.Line{Dir: "m", Table: "test_migrations", LockID: 4242, Files: fstest.MapFS{
		"m/0001_a.sql": {Data: []byte("CREATE TABLE a (id int)")},
		"m/0002_b.sql": {Data: []byte("CREATE TABLE b (id int)")},
	}}
	for round := range 3 {
		db := pgtest.NewEmpty(t)
		const runs = 4
		var wg sync.WaitGroup
		applied := make([][]int, runs)
		errs := make([]error, runs)
		for i := range runs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				applied[i], errs[i] = line.Apply(context.Background(), db.Pool)
			}()
		}
		wg.Wait()
		total := 0
		for i := range runs {
			if errs[i] != nil {
				t.Fatalf("round %d: run %d of %d: %v", round, i, runs, errs[i])
			}
			total += len(applied[i])
		}
		if total != 2 {
			t.Fatalf("round %d: %d migrations applied between %d runs, want 2 (each once)", round, total, runs)
		}
	}
}
