package loadtest

import (
	"context"
	"strings"
	"testing"
	"time"
)

// A reader slower in all than the quiet bound, but moving, is waited for;
// one that stops short fails, naming the partition.
func TestWaitProgressWaitsWhileMovingAndFailsWhenStopped(t *testing.T) {
	ends := []int64{0, 40}
	quiet := 300 * time.Millisecond
	pos := int64(0)
	moving := func(context.Context) (map[int32]int64, error) {
		pos++
		return map[int32]int64{1: pos}, nil
	}
	start := time.Now()
	if err := waitProgress(context.Background(), ends, quiet, moving); err != nil {
		t.Fatalf("a reader that moves at every question: %v", err)
	}
	if took := time.Since(start); took < 2*quiet {
		t.Fatalf("caught up after %s: the test needs a reader slower in all than the quiet bound %s", took, quiet)
	}
	stopped := func(context.Context) (map[int32]int64, error) {
		return map[int32]int64{1: 7}, nil
	}
	err := waitProgress(context.Background(), ends, quiet, stopped)
	if err == nil || !strings.Contains(err.Error(), "1: 7/40") {
		t.Fatalf("a reader stopped at 7 of 40: %v", err)
	}
}
