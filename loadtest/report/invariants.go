package report

import "fmt"

// Invariant is one invariant's verdict with counts.
type Invariant struct {
	Pass       bool     `json:"pass"`
	Checked    int      `json:"checked"`
	Violations int      `json:"violations"`
	Examples   []string `json:"examples,omitempty"`
}

// Fail counts one violation and keeps the first five as examples.
func (inv *Invariant) Fail(format string, args ...any) {
	inv.Violations++
	if len(inv.Examples) < 5 {
		inv.Examples = append(inv.Examples, fmt.Sprintf(format, args...))
	}
}

// LedgerCheck compares the materializer's ledger with the acknowledged
// batches.
type LedgerCheck struct {
	Pass         bool `json:"pass"`
	AckedBatches int  `json:"acked_batches"`
	Missing      int  `json:"missing"`
	Duplicated   int  `json:"duplicated"`
	// Extra are ledger batches nobody acknowledged. One that an answer to
	// one of its attempts explains is allowed, and ExtraBecause counts
	// them by that answer (an outcome unknown may have committed; a 200
	// to a write the harness does not count as an acknowledged batch,
	// a frozen worker's). Unexplained are the others, a failure: a batch
	// nobody was told is or may be committed.
	Extra        int            `json:"extra"`
	ExtraBecause map[string]int `json:"extra_because,omitempty"`
	Unexplained  int            `json:"extra_unexplained"`
	// NotChecked: no materializer ran (--materializer=false), so there is
	// no ledger to compare; the verdict leaves it out.
	NotChecked bool `json:"not_checked,omitempty"`
}

// Finish sets Pass: nothing missing, nothing duplicated, no extra batch
// that nothing explains.
func (c *LedgerCheck) Finish() {
	c.Pass = c.Missing == 0 && c.Duplicated == 0 && c.Unexplained == 0
}

// extraText is the extra batches and why they are there.
func (c LedgerCheck) extraText() string {
	if c.Extra == 0 {
		return "extra 0"
	}
	why := make(map[string]int64, len(c.ExtraBecause))
	for k, v := range c.ExtraBecause {
		why[k] = int64(v)
	}
	return fmt.Sprintf("extra %d: explained (not a verdict) by %s; unexplained %d", c.Extra, counts(why), c.Unexplained)
}

// InvariantText is an invariant's name and statement as docs/design.md
// ("Invariants and where they are enforced") writes them; the Markdown and
// the HTML report both take them from Invariants, and
// TestInvariantTextIsTheDesignsText holds them to the design.
type InvariantText struct {
	ID, Name, Statement string
}

// Invariants are the invariants the harness checks, in report order.
var Invariants = []InvariantText{
	{"I1", "token order", "per lease name, granted tokens strictly increase."},
	{"I2", "no stale write", "in every lease partition, read committed, no data record with token T appears after a barrier with a token above T, and every data record's token equals that of the latest barrier before it."},
	{"I3", "no acknowledged loss", "every batch answered 200 is present, committed, in order, and in the ledger."},
	{"I4", "no early acknowledgement", "no acquire is answered before its epoch bump."},
}

// invariantRows pairs each of Invariants with its verdict in rep.
func (rep *Report) invariantRows() []invariantRow {
	inv := rep.Invariants
	verdicts := map[string]Invariant{"I1": inv.I1, "I2": inv.I2, "I3": inv.I3, "I4": inv.I4}
	rows := make([]invariantRow, len(Invariants))
	for i, t := range Invariants {
		rows[i] = invariantRow{Name: t.ID + " " + t.Name, Means: t.Statement, Inv: verdicts[t.ID]}
	}
	return rows
}
