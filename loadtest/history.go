package loadtest

import (
	"fmt"

	"github.com/fencegate/fencegate/loadtest/report"
	"github.com/fencegate/fencegate/verify"
)

// maxHistoryExamples bounds the findings a report lists.
const maxHistoryExamples = 5

// addHistory adds one partition's history to the run's.
func addHistory(out *report.History, partition int32, h verify.History) {
	out.Answers += h.Ops
	out.Committed += h.Committed
	out.Refused += h.Refused
	out.Unknown += h.Unknown
	out.UnknownLanded += h.UnknownLanded
	out.AbortedReads += len(h.AbortedReads)
	out.LostWrites += len(h.LostWrites)
	out.RefusedCommitted += len(h.RefusedCommitted)
	out.Duplicates += len(h.Duplicates)
	out.DelayedCommits += len(h.DelayedCommits)
	out.Retried += h.Retried
	for _, v := range h.Violations() {
		if len(out.Examples) < maxHistoryExamples {
			out.Examples = append(out.Examples, fmt.Sprintf("partition %d: %s", partition, v))
		}
	}
}
