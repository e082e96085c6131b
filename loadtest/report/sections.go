package report

import (
	"fmt"
	"io"
)

// The report's part of each scenario of the harness's table (package
// loadtest, ScenarioTable, names it by the JSON key of its member): where
// the Markdown summary writes it and the failures it adds to the
// verdict. WriteMarkdown and failures walk this table at their places
// instead of asking each member in turn; a scenario whose member is nil
// (not run) writes and fails nothing. The report imports nothing of
// fencegate, so the harness's table names this one, not the other way
// round (TestScenarioTableIsWhole holds the two together).

// place is where in the summary, or in the list of failures, a section
// is written.
type place int

// The places of the summary and of the failures.
const (
	// instead: the section is the whole summary (a run not driven by the
	// runner's phases: the mixed fleet).
	instead place = iota
	afterScenario
	afterLedger
	afterBaselines
	afterProcesses
	// failAfterErrors and failAtEnd are the places in the failures.
	failAfterErrors
	failAtEnd
)

// part is what a section writes at one place.
type part struct {
	at    place
	write func(rep *Report, w io.Writer)
}

// failFunc adds a failure unless ok.
type failFunc func(ok bool, format string, args ...any)

// section is the report's part of one scenario.
type section struct {
	// key is the JSON key of the Report member that holds its figures.
	key   string
	parts []part
	// failAt is where its failures stand in the list; fail adds them.
	failAt place
	fail   func(rep *Report, fail failFunc)
}

// sections is the table, in the order the summary writes a place's
// sections and the verdict lists a place's failures.
func sections() []section {
	return []section{
		{key: "net_fault", parts: []part{{afterProcesses, func(rep *Report, w io.Writer) { rep.NetFault.write(w) }}}, failAt: failAfterErrors,
			fail: func(rep *Report, fail failFunc) {
				fail(rep.NetFault == nil || rep.NetFault.Unrecovered == 0, "network fault rounds after which no batch was acknowledged: %d", unrecovered(rep.NetFault))
			}},
		{key: "broker_faults", parts: []part{{afterProcesses, func(rep *Report, w io.Writer) { rep.BrokerFaults.write(w, rep.History) }}}, failAt: failAfterErrors,
			fail: func(rep *Report, fail failFunc) {
				fail(rep.BrokerFaults.Pass(), "broker faults: none applied, or one not applied, never whole again, or a lease not served within one TTL after it, or Kafka's console consumer read otherwise than fencegate's reader")
			}},
		{key: "mixed", parts: []part{{instead, writeMixed}}, failAt: failAfterErrors,
			fail: func(rep *Report, fail failFunc) {
				if m := rep.Mixed; m != nil {
					m.finish()
					fail(m.Pass, "mixed fleet: a check failed or is missing")
				}
			}},
		{key: "stateful", parts: []part{{afterScenario, writeStatefulLine}, {afterBaselines, func(rep *Report, w io.Writer) {
			if rep.Stateful != nil {
				rep.Stateful.writeMarkdown(w)
			}
		}}}, failAt: failAtEnd,
			fail: func(rep *Report, fail failFunc) {
				if s := rep.Stateful; s != nil {
					fail(s.I6.Pass, "I6: %d violations", s.I6.Violations)
					fail(s.FencedState.Passed(), "fenced state: the workers' own table broke the rule")
				}
			}},
		{key: "balanced", parts: []part{{afterBaselines, func(rep *Report, w io.Writer) {
			if rep.Balanced != nil {
				rep.Balanced.writeMarkdown(w)
			}
		}}}, failAt: failAtEnd,
			fail: func(rep *Report, fail failFunc) {
				fail(rep.Balanced == nil || rep.Balanced.Pass, "balanced: the re-serve gaps or the worker-visible errors are over their bounds")
			}},
		{key: "trusted", parts: []part{{afterLedger, func(rep *Report, w io.Writer) { rep.Trusted.writeMarkdown(w) }}}, failAt: failAtEnd,
			fail: func(rep *Report, fail failFunc) {
				fail(rep.Trusted == nil || rep.Trusted.Pass, "trusted topic: it does not hold each acknowledged batch once, in order, as the ledger does")
			}},
	}
}

// Sections are the JSON keys of the Report members that hold a
// scenario's figures, in the table's order: the keys the harness's
// scenario table may name.
func Sections() []string {
	var out []string
	for _, s := range sections() {
		out = append(out, s.key)
	}
	return out
}

// writeSections writes the sections' parts at place at.
func (rep *Report) writeSections(w io.Writer, at place) {
	for _, s := range sections() {
		for _, p := range s.parts {
			if p.at == at {
				p.write(rep, w)
			}
		}
	}
}

// summaryInstead is the section written instead of the summary (nil:
// the runner's summary).
func (rep *Report) summaryInstead() func(*Report, io.Writer) {
	if rep.Mixed == nil {
		return nil
	}
	for _, s := range sections() {
		for _, p := range s.parts {
			if p.at == instead {
				return p.write
			}
		}
	}
	return nil
}

// sectionFailures adds the sections' failures at place at.
func (rep *Report) sectionFailures(at place, fail failFunc) {
	for _, s := range sections() {
		if s.failAt == at && s.fail != nil {
			s.fail(rep, fail)
		}
	}
}

// writeMixed is the mixed fleet's summary.
func writeMixed(rep *Report, w io.Writer) {
	rep.Mixed.writeMarkdown(w)
	rep.writeInvariants(w)
	fmt.Fprintf(w, "\nstale writes accepted: %d; definite refusals found committed: %d; sessions left after the run: %s; errors: %d%s%s\n",
		rep.Gateway.StaleAccepted, rep.Gateway.DefiniteButCommitted, rep.sessionsLeft().Text, rep.Gateway.Errors,
		breakdown(rep.Gateway.ErrorsByCall), rep.errorsWhy())
	rep.History.write(w)
}

// writeStatefulLine says that the workers were stateful.
func writeStatefulLine(rep *Report, w io.Writer) {
	if rep.Scenario.Stateful {
		fmt.Fprint(w, "stateful workers: items resumed from the lease's checkpoint\n\n")
	}
}
