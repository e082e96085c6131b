package loadtest

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"time"
)

// stall is how long a reader of the lease topic (the materializer's
// ledger, the trusted sink) may make no progress at all before the run
// fails: after broker faults either may have minutes of work to do again,
// and it is judged on reaching the end, not on a guess at how fast it
// gets there. One rule for both waits.
const stall = 2 * time.Minute

// positions reads a reader's position in each partition of the lease
// topic.
type positions func(context.Context) (map[int32]int64, error)

// waitProgress polls read until every partition's position reaches its
// end in ends (an end of 0: nothing to read), for as long as some
// position keeps moving: it gives up after quiet without a move, naming
// the partitions still short.
func waitProgress(ctx context.Context, ends []int64, quiet time.Duration, read positions) error {
	var last map[int32]int64
	moved := time.Now()
	for time.Since(moved) < quiet && ctx.Err() == nil {
		got, err := read(ctx)
		if err == nil && caughtUp(got, ends) {
			return nil
		}
		if err == nil && !maps.Equal(got, last) {
			last, moved = got, time.Now()
		}
		wait(ctx, 100*time.Millisecond)
	}
	return fmt.Errorf("no progress for %s short of the end (partition: position/end: %s)", quiet, behind(last, ends))
}

// behind lists the partitions whose position is short of its end.
func behind(at map[int32]int64, ends []int64) string {
	var out []string
	for p, end := range ends {
		if end > 0 && at[int32(p)] < end {
			out = append(out, fmt.Sprintf("%d: %d/%d", p, at[int32(p)], end))
		}
	}
	return strings.Join(out, ", ")
}

// caughtUp reports whether every partition's position reaches its end.
func caughtUp(at map[int32]int64, ends []int64) bool {
	for p, end := range ends {
		if end > 0 && at[int32(p)] < end {
			return false
		}
	}
	return true
}
