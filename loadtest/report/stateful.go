package report

import (
	"fmt"
	"io"
)

// I6Text is invariant I6's name and statement, the stateful run's verdict
// (loadtest --stateful).
var I6Text = InvariantText{"I6", "exactly-once processing",
	"per lease, the ledger holds items 0..n-1 (n the lease's checkpoint), each exactly once, in order, across every takeover."}

// StatefulFigures are a --stateful run's: workers resume from the lease's
// checkpoint after every new generation and send items i..j with the
// checkpoint j+1; I6 is checked on the ledger, and the naive baseline
// (resume point kept apart from its writes) is counted the same way on
// its topic.
type StatefulFigures struct {
	// I6 counts items checked and violations (gaps + duplicates +
	// out-of-order + beyond the checkpoint).
	I6    Invariant  `json:"I6"`
	Items ItemCounts `json:"items"`
	// Takeovers are grants to another owner than the lease's previous
	// grant (lease_events). Resumes are checkpoint reads a worker resumed
	// from, ResumesFromOther those whose checkpoint another owner wrote.
	Takeovers        int64 `json:"takeovers"`
	Resumes          int64 `json:"resumes"`
	ResumesFromOther int64 `json:"resumes_from_other"`
	// LedgerBehind counts checkpoint reads answered 503 ledger_behind and
	// retried. ResumeWaitMs is from a generation's acquire to its
	// checkpoint read's answer (the ledger catching up included).
	LedgerBehind int64     `json:"ledger_behind"`
	ResumeWaitMs Quantiles `json:"resume_wait_ms"`
	// Ambiguous batches (answer lost or generation ended with the commit
	// unknown) as the next checkpoint read resolved them: landed (the
	// checkpoint is the batch's), not landed (the checkpoint is still at
	// the batch's first item, the batch is sent again), or taken over
	// (another owner's checkpoint came first; the ledger decides).
	AmbiguousLanded    int64 `json:"ambiguous_landed"`
	AmbiguousNotLanded int64 `json:"ambiguous_not_landed"`
	AmbiguousTakenOver int64 `json:"ambiguous_taken_over"`
	// StaleItemBatches are item batches frozen workers sent with their
	// overtaken token after waking (all must be refused).
	StaleItemBatches int64 `json:"stale_item_batches"`
	// DroppedValues are the item values a --ledger-values drop ledger
	// kept as a digest only, read back from the raw topic with their
	// digest checked (0: a keep ledger).
	DroppedValues int64 `json:"dropped_values,omitempty"`
	// Naive is the naive baseline's count of its topic (nil: not run).
	Naive *NaiveItems `json:"naive,omitempty"`
	// FencedState is the workers' own table written through
	// client/fencedb (nil: no database to write).
	FencedState *FencedState `json:"fenced_state,omitempty"`
}

// FencedState is the check of the stateful workers' own table, written
// through client/fencedb after each acknowledged batch (and by frozen
// workers after waking): writes applied and refused (Failed: errors other
// than a refusal), receipts filed, and what broke the rule.
type FencedState struct {
	Applied  int64    `json:"applied"`
	Refused  int64    `json:"refused"`
	Failed   int64    `json:"failed"`
	Receipts int64    `json:"receipts"`
	Pass     bool     `json:"pass"`
	Examples []string `json:"examples,omitempty"`
}

// Fail records one breach.
func (f *FencedState) Fail(format string, args ...any) {
	if len(f.Examples) < 5 {
		f.Examples = append(f.Examples, fmt.Sprintf(format, args...))
	}
}

// Passed says whether the table kept the rule (true when not run).
func (f *FencedState) Passed() bool { return f == nil || f.Pass }

// ItemCounts is a per-lease sequence check summed over the leases.
type ItemCounts struct {
	Leases int `json:"leases"`
	// Items is the sum of n over the leases; Records the item records read.
	Items      int64 `json:"items"`
	Records    int64 `json:"records"`
	Gaps       int64 `json:"gaps"`
	Duplicates int64 `json:"duplicates"`
	OutOfOrder int64 `json:"out_of_order"`
	// Beyond counts records of items at or past n (written without the
	// checkpoint that covers them).
	Beyond int64 `json:"beyond"`
}

// Violations is the sum of every kind of violation.
func (c ItemCounts) Violations() int64 { return c.Gaps + c.Duplicates + c.OutOfOrder + c.Beyond }

// Add sums o into c.
func (c *ItemCounts) Add(o ItemCounts) {
	c.Leases += o.Leases
	c.Items += o.Items
	c.Records += o.Records
	c.Gaps += o.Gaps
	c.Duplicates += o.Duplicates
	c.OutOfOrder += o.OutOfOrder
	c.Beyond += o.Beyond
}

// NaiveItems are the naive stateful baseline's: its resume point is a row
// of its own, read at acquire and written after each batch, apart from the
// records; its faults are the gateway phase's freeze (a holder checks its
// lease, freezes past the TTL, writes anyway) and crashes (a holder dies
// between its write and its resume point's update, either way round).
type NaiveItems struct {
	Items     ItemCounts `json:"items"`
	Takeovers int64      `json:"takeovers"`
	Freezes   int64      `json:"freezes"`
	Crashes   int64      `json:"crashes"`
}

// stateRows are the I6 table's rows: a label, the gateway's cell and the
// naive baseline's.
func (f *StatefulFigures) stateRows() [][3]string {
	naive := func(fn func(n *NaiveItems) string) string {
		if f.Naive == nil {
			return "not run"
		}
		return fn(f.Naive)
	}
	d := func(v int64) string { return fmt.Sprint(v) }
	it := f.Items
	return [][3]string{
		{"leases", fmt.Sprint(it.Leases), naive(func(n *NaiveItems) string { return fmt.Sprint(n.Items.Leases) })},
		{"takeovers (owner changes)", d(f.Takeovers), naive(func(n *NaiveItems) string { return d(n.Takeovers) })},
		{"resumes from the checkpoint (from another owner's)", fmt.Sprintf("%d (%d)", f.Resumes, f.ResumesFromOther), "-"},
		{"acquire to checkpoint answered p50 / p99 (ledger_behind retries)", fmt.Sprintf("%.1f / %.1f ms (%d)",
			f.ResumeWaitMs.P50, f.ResumeWaitMs.P99, f.LedgerBehind), "-"},
		{"faults", fmt.Sprintf("stale item batches sent %d", f.StaleItemBatches),
			naive(func(n *NaiveItems) string { return fmt.Sprintf("freezes %d, crashes %d", n.Freezes, n.Crashes) })},
		{"ambiguous batches resolved by the checkpoint", fmt.Sprintf("%d landed, %d not landed, %d taken over",
			f.AmbiguousLanded, f.AmbiguousNotLanded, f.AmbiguousTakenOver), "no checkpoint"},
		{"items checked (records read; values read back from the raw topic by digest)", fmt.Sprintf("%d (%d; %d)", it.Items, it.Records, f.DroppedValues),
			naive(func(n *NaiveItems) string { return fmt.Sprintf("%d (%d)", n.Items.Items, n.Items.Records) })},
		{"gaps", d(it.Gaps), naive(func(n *NaiveItems) string { return d(n.Items.Gaps) })},
		{"duplicates", d(it.Duplicates), naive(func(n *NaiveItems) string { return d(n.Items.Duplicates) })},
		{"out of order", d(it.OutOfOrder), naive(func(n *NaiveItems) string { return d(n.Items.OutOfOrder) })},
		{"beyond the checkpoint", d(it.Beyond), "-"},
		{"own table through fencedb: applied / refused / receipts", f.fencedCell(), "-"},
	}
}

// writeMarkdown writes the I6 table.
func (f *StatefulFigures) writeMarkdown(w io.Writer) {
	fmt.Fprintf(w, "\n%s %s: %s (%s)\n\n", I6Text.ID, I6Text.Name, passText(f.I6.Pass), I6Text.Statement)
	fmt.Fprintln(w, "| stateful | gateway (checkpoint in the batch) | naive (resume point apart) |")
	fmt.Fprintln(w, "|---|---|---|")
	for _, row := range f.stateRows() {
		fmt.Fprintf(w, "| %s | %s | %s |\n", row[0], row[1], row[2])
	}
	for _, ex := range f.I6.Examples {
		fmt.Fprintf(w, "- %s\n", ex)
	}
}

// fencedCell is the fenced-state row's gateway cell.
func (f *StatefulFigures) fencedCell() string {
	fs := f.FencedState
	if fs == nil {
		return "not measured"
	}
	cell := fmt.Sprintf("%d / %d / %d", fs.Applied, fs.Refused, fs.Receipts)
	if !fs.Pass {
		cell += fmt.Sprintf(" FAIL (%d errors) %v", fs.Failed, fs.Examples)
	}
	return cell
}
