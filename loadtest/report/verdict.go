package report

import (
	"fmt"
	"io"
	"strings"
)

// failures are the run's failures, each named: a check that failed, a
// check that checked nothing although the run asked for load, and a
// figure that nothing explains (a worker error with no fault injected, a
// network fault after which no batch came). Finish sets Pass from them.
func (rep *Report) failures() []string {
	var out []string
	fail := func(ok bool, format string, args ...any) {
		if !ok {
			out = append(out, fmt.Sprintf(format, args...))
		}
	}
	for _, row := range rep.invariantRows() {
		fail(row.Inv.Pass, "%s: %d violations", row.Name, row.Inv.Violations)
	}
	l := rep.Ledger
	fail(l.Pass || l.NotChecked, "ledger: missing %d, duplicated %d, extra batches nothing explains %d", l.Missing, l.Duplicated, l.Unexplained)
	fail(rep.History.Pass(), "history: %d findings", rep.History.findings())
	if empty := rep.unchecked(); len(empty) > 0 {
		out = append(out, "nothing was checked: "+strings.Join(empty, ", "))
	}
	g := rep.Gateway
	fail(g.Errors == 0 || len(rep.Scenario.Faults) > 0, "worker errors with no fault injected to explain them: %d%s", g.Errors, breakdown(g.ErrorsByCall))
	rep.sectionFailures(failAfterErrors, fail)
	fail(g.StaleAccepted == 0, "stale writes accepted: %d", g.StaleAccepted)
	fail(g.DefiniteButCommitted == 0, "definite refusals found committed: %d", g.DefiniteButCommitted)
	fail(g.SessionsAfterRun <= 0, "sessions left after the run: %d", g.SessionsAfterRun)
	rep.sectionFailures(failAtEnd, fail)
	return out
}

// unchecked names the checks that checked nothing in a run that asked
// for load (a scenario with leases and a duration): a misconfigured
// reader or a gateway that granted nothing passes every check vacuously.
func (rep *Report) unchecked() []string {
	if rep.Scenario.Leases == 0 || rep.Scenario.DurationS <= 0 {
		return nil // no load asked
	}
	inv := rep.Invariants
	var out []string
	for _, c := range []struct {
		empty bool
		what  string
	}{
		{inv.I1.Checked == 0, "no grant (I1)"},
		{inv.I2.Checked == 0, "no record read (I2)"},
		{inv.I3.Checked == 0, "no acknowledged batch (I3)"},
		{inv.I4.Checked == 0, "no acknowledged acquire (I4)"},
		{rep.History.Answers == 0, "no produce answer (history)"},
		{!rep.Ledger.NotChecked && rep.Ledger.AckedBatches == 0, "no acknowledged batch in the ledger check"},
	} {
		if c.empty {
			out = append(out, c.what)
		}
	}
	return out
}

func unrecovered(n *NetFault) int {
	if n == nil {
		return 0
	}
	return n.Unrecovered
}

// writeFailures writes the run's failures, one a line (nothing when it
// passed).
func (rep *Report) writeFailures(w io.Writer) {
	for _, f := range rep.Failures {
		fmt.Fprintf(w, "- FAIL: %s\n", f)
	}
	if len(rep.Failures) > 0 {
		fmt.Fprintln(w)
	}
}

// errorsWhy says why the run's worker errors are a figure and not a
// verdict (the faults it injected), or nothing when there are none or
// nothing explains them (they are then a failure).
func (rep *Report) errorsWhy() string {
	if rep.Gateway.Errors == 0 || len(rep.Scenario.Faults) == 0 {
		return ""
	}
	return " (not a verdict: the run injected " + strings.Join(rep.Scenario.Faults, ", ") + ")"
}
