// Package loadtest is fencegate's load and fault harness. It drives a
// gateway from outside, over HTTP like real workers, verifies the
// invariants from Kafka (read_committed), lease_events and the ledger, and
// runs the baselines side by side in the same run: `direct` (transactional
// producers without HTTP or leases: the ceiling, package
// loadtest/baseline) and `naive` (check the lease in Postgres, then
// produce with a plain producer: the design fencegate replaces).
//
// Run is the entry: a Scenario, on a stack brought up by package
// loadtest/stack, gives a report.Report (package loadtest/report). The
// scenarios a run can switch on are one table (scenarios.go: each entry
// says what switches it on, what it proves, what it needs of the stack,
// and its start, figures and check hooks); Run, Scenario.Validate, the
// report's fault list and `fencegate loadtest` read it, and
// ScenarioTable lists it. The rooms of the package:
//
//   - the machinery every run shares: runner.go (Run, the gateway
//     phase), worker.go and stats.go (the HTTP workers and their
//     counts), answer.go (the answer classification), check.go and
//     history.go (the checks of every run: I1..I4, the ledger, the
//     history), figures.go and fleet.go (the report's figures);
//   - the baselines run after the gateway phase: baseline.go (naive,
//     and the in-process direct one) and separate.go (the baseline
//     children);
//   - one room per scenario, named after its table entry: its run, and
//     its checks next to it (docs/harness.md, "Rooms", lists them).
//
// Behind a load balancer (stack.WithBalancer) the workers are SDK workers
// (package client) whose base URL is the balancer, and the report adds
// the re-serve gaps and the worker-visible errors of the replica faults
// (report.BalancedFigures).
//
// No production package may import it (the fencegate binary reaches it only
// through its loadtest commands), no scenario may read another's fields
// (what two share is the runner's), and its checks must never pass a run
// on what they did not read: a check that checked nothing, or a figure
// nothing explains, fails the run (FM94, FM95).
package loadtest
