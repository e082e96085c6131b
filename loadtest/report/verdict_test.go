package report

import (
	"strings"
	"testing"
)

// checkedRun is the report of a run in which every check checked
// something and found nothing: it passes.
func checkedRun() *Report {
	rep := externalRun()
	rep.History = History{Answers: 30, Committed: 30}
	return rep
}

// TestReportVerdictAnomalyClasses: each figure the report holds a verdict
// on fails the run with a message that names it, from a run that passes
// with one anomaly added; and the near misses (a figure explained, a run
// that asked for no load) pass and say why. docs/failure-modes.md,
// "Checker anomaly classes", lists them.
func TestReportVerdictAnomalyClasses(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		mutate func(*Report)
		fail   string // substring of a failure, "" for a pass
		says   string // substring of the summary
	}{
		{"nothing was checked", func(r *Report) {
			r.Invariants = checkedRun().Invariants
			r.Invariants.I1.Checked, r.Invariants.I2.Checked, r.Invariants.I3.Checked, r.Invariants.I4.Checked = 0, 0, 0, 0
			r.History, r.Ledger.AckedBatches = History{}, 0
		}, "nothing was checked: no grant (I1), no record read (I2)", "FAIL: nothing was checked"},
		{"a reader that read nothing", func(r *Report) { r.Invariants.I2.Checked = 0 }, "nothing was checked: no record read (I2)", ""},
		{"no answer reached the history", func(r *Report) { r.History = History{} }, "no produce answer (history)", ""},
		{"an extra ledger batch nothing explains", func(r *Report) { r.Ledger.Extra, r.Ledger.Unexplained = 1, 1; r.Ledger.Finish() },
			"extra batches nothing explains 1", "unexplained 1"},
		{"an extra trusted batch nothing explains", func(r *Report) {
			r.Trusted = &TrustedCheck{LedgerCheck: LedgerCheck{AckedBatches: 30, Extra: 1, Unexplained: 1}}
			r.Trusted.Finish()
		}, "trusted topic", "unexplained 1"},
		{"worker errors with no fault injected", func(r *Report) {
			r.Gateway.Errors, r.Gateway.ErrorsByCall = 2, map[string]int64{"renew transport": 2}
		}, "worker errors with no fault injected to explain them: 2 renew transport 2", ""},
		{"a network fault round never recovered", func(r *Report) { r.NetFault = &NetFault{Kind: "blackhole", Rounds: 3, Unrecovered: 1} },
			"no batch was acknowledged: 1", "rounds never recovered 1"},
		{"a lease not served within one TTL after a broker fault", func(r *Report) {
			r.BrokerFaults = &BrokerFaults{Faults: map[string]int{"kill-leader": 1}, NotServed: 1}
		}, "broker faults", "not served within one TTL 1"},
		{"a cluster never whole after a broker fault", func(r *Report) {
			r.BrokerFaults = &BrokerFaults{Faults: map[string]int{"kill-leader": 1}, NotWhole: 1}
		}, "broker faults", "never whole 1"},
		{"broker faults asked, none struck", func(r *Report) { r.BrokerFaults = &BrokerFaults{Faults: map[string]int{}} },
			"broker faults", "0 faults"},
		{"Kafka's own reader read otherwise", func(r *Report) {
			r.BrokerFaults = &BrokerFaults{Faults: map[string]int{"kill-leader": 1}, KafkaRead: 2, KafkaReadDiffers: []string{"partition 3: 1 records only Kafka's reader read"}}
		}, "broker faults", "- partition 3: 1 records only Kafka's reader read"},
		{"short reads", func(r *Report) { r.History.ShortReads = 1 }, "history: 1 findings", "short reads 1"},
		{"acks without offsets", func(r *Report) { r.History.EmptyAcks = 1 }, "history: 1 findings", "acks without offsets 1"},
		{"a batch committed in part", func(r *Report) { r.History.PartialBatches = 1 }, "history: 1 findings", "batches committed in part 1"},
		{"a lost write", func(r *Report) { r.History.LostWrites = 1 }, "history: 1 findings", "lost writes 1"},
		{"a mixed run whose I3 fails", func(r *Report) {
			r.Mixed = passingMixed()
			r.Invariants.I3 = Invariant{Checked: 30}
			r.Invariants.I3.Fail("lost")
		}, "I3 no acknowledged loss: 1 violations", "| I3 no acknowledged loss | FAIL |"},
		{"a mixed run that checked nothing", func(r *Report) {
			r.Mixed = passingMixed()
			r.History = History{}
		}, "nothing was checked: no produce answer (history)", ""},

		{"near miss: a run that asked for no load", func(r *Report) {
			*r = Report{}
			r.Gateway.SessionsAfterRun = -1
			r.Ledger.NotChecked = true
			r.Invariants.I1.Pass, r.Invariants.I2.Pass, r.Invariants.I3.Pass, r.Invariants.I4.Pass = true, true, true, true
		}, "", ""},
		{"near miss: an extra batch an outcome unknown explains", func(r *Report) {
			r.Ledger.Extra, r.Ledger.ExtraBecause = 1, map[string]int{"outcome unknown": 1}
			r.Ledger.Finish()
		}, "", "extra 1: explained (not a verdict) by outcome unknown 1; unexplained 0"},
		{"near miss: worker errors under an injected fault", func(r *Report) {
			r.Gateway.Errors, r.Scenario.Faults = 2, []string{"replica kills"}
		}, "", "errors: 2 (not a verdict: the run injected replica kills)"},
		{"near miss: a fault round at the run's end", func(r *Report) {
			r.NetFault = &NetFault{Kind: "blackhole", Rounds: 3, NotJudged: 1, NotJudgedWhy: "ended less than two TTLs before the run"}
		}, "", "not judged 1 (ended less than two TTLs before the run)"},
		{"near miss: an outcome unknown that landed", func(r *Report) { r.History.Unknown, r.History.UnknownLanded = 1, 1 },
			"", "1 of them landed, not a verdict"},
		{"near miss: a mixed run that checked everything", func(r *Report) { r.Mixed = passingMixed() }, "", "| I2 no stale write | pass |"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rep := checkedRun()
			c.mutate(rep)
			rep.Finish()
			failures := strings.Join(rep.Failures, "; ")
			switch {
			case c.fail == "" && !rep.Pass:
				t.Fatalf("failures %q, want a pass", failures)
			case c.fail != "" && (rep.Pass || !strings.Contains(failures, c.fail)):
				t.Fatalf("pass %v, failures %q, want one saying %q", rep.Pass, failures, c.fail)
			case !strings.Contains(rep.Markdown(), c.says):
				t.Fatalf("the summary does not say %q:\n%s", c.says, rep.Markdown())
			}
		})
	}
}

// passingMixed is a mixed fleet whose every check passed.
func passingMixed() *MixedFigures {
	m := &MixedFigures{Pattern: "shard:*"}
	for _, c := range MixedChecks {
		m.Checks = append(m.Checks, MixedCheck{ID: c.ID, Invariant: Invariant{Pass: true, Checked: 1}})
	}
	return m
}

// TestFM94_ARunThatCheckedNothingFails: a run that asked for load and
// checked nothing (no grant, no record read, no acknowledged batch, no
// answer) fails, saying "nothing was checked"; before, every check passed
// vacuously and so did the run.
func TestFM94_ARunThatCheckedNothingFails(t *testing.T) {
	t.Parallel()
	rep := &Report{Scenario: ScenarioFigures{Leases: 4, DurationS: 3}}
	rep.Invariants.I1.Pass, rep.Invariants.I2.Pass, rep.Invariants.I3.Pass, rep.Invariants.I4.Pass = true, true, true, true
	rep.Ledger.Pass, rep.Gateway.SessionsAfterRun = true, -1
	rep.Finish()
	if rep.Pass || !strings.Contains(strings.Join(rep.Failures, ";"), "nothing was checked") {
		t.Fatalf("pass %v, failures %q: want the empty run to fail, saying nothing was checked", rep.Pass, rep.Failures)
	}
}

// TestFM95_AFigureNothingExplainsFailsTheRun: a ledger batch nobody
// acknowledged and no answer explains, a worker error in a run that
// injected no fault, and a network fault round after which no batch came
// each fail a run that otherwise passes; before, they were figures only.
func TestFM95_AFigureNothingExplainsFailsTheRun(t *testing.T) {
	t.Parallel()
	for name, mutate := range map[string]func(*Report){
		"extra ledger batch": func(r *Report) { r.Ledger.Extra, r.Ledger.Unexplained = 1, 1; r.Ledger.Finish() },
		"worker error":       func(r *Report) { r.Gateway.Errors = 1 },
		"network fault":      func(r *Report) { r.NetFault = &NetFault{Rounds: 1, Unrecovered: 1} },
	} {
		rep := checkedRun()
		mutate(rep)
		rep.Finish()
		if rep.Pass {
			t.Errorf("%s: the run passed", name)
		}
	}
}
