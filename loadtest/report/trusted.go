package report

import (
	"fmt"
	"io"
)

// TrustedCheck compares the trusted topic (docs/design.md, "The trusted
// topic") with the acknowledged batches, as LedgerCheck does the ledger,
// and with the ledger itself.
type TrustedCheck struct {
	LedgerCheck
	// Records is how many records the trusted topic holds.
	Records int64 `json:"records"`
	// NotInLedger and NotInTrusted count the records of one and not the
	// other (by lease, owner, batch id and seq): 0 unless a retry older
	// than the dedup window was accepted again.
	NotInLedger  int64 `json:"not_in_ledger"`
	NotInTrusted int64 `json:"not_in_trusted"`
	// OutOfOrder counts records whose source offset is not above the
	// previous one of their partition, or whose token is below an
	// earlier one of their lease.
	OutOfOrder int64 `json:"out_of_order"`
	// MaterializerKills is how many times the materializer child was
	// killed (--kill-materializer-every).
	MaterializerKills int64 `json:"materializer_kills"`
	// SecondJoins and SecondLeaves count a second sink instance's starts
	// (each confirmed by the group: both instances with partitions) and
	// stops (--trusted-rebalance-every).
	SecondJoins  int64 `json:"second_joins"`
	SecondLeaves int64 `json:"second_leaves"`
	// SecondJoinMaxS is the longest join: from the instance's start to
	// the group's assignment of partitions to both.
	SecondJoinMaxS float64 `json:"second_join_max_s"`
	// CatchUpS is how long the trusted sink took, after the ledger check,
	// to reach the end of every partition: its backlog at the end of the
	// run.
	CatchUpS float64 `json:"catch_up_s"`
}

// Finish sets Pass.
func (c *TrustedCheck) Finish() {
	c.LedgerCheck.Finish()
	c.Pass = c.Pass && c.NotInLedger == 0 && c.NotInTrusted == 0 && c.OutOfOrder == 0
}

func (c *TrustedCheck) writeMarkdown(w io.Writer) {
	if c == nil {
		return
	}
	fmt.Fprintf(w, "trusted topic == acked batches == ledger: %s; %d acked batches, missing %d, duplicated %d (%s), %d records, "+
		"not in the ledger %d, not in the trusted topic %d, out of order %d, materializer kills %d, second instance joins %d (slowest %.1f s) and leaves %d, "+
		"caught up %.1f s after the ledger check\n\n",
		passText(c.Pass), c.AckedBatches, c.Missing, c.Duplicated, c.extraText(), c.Records, c.NotInLedger, c.NotInTrusted,
		c.OutOfOrder, c.MaterializerKills, c.SecondJoins, c.SecondJoinMaxS, c.SecondLeaves, c.CatchUpS)
}
