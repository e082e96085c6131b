package loadtest

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/fencegate/fencegate/loadtest/report"
	"github.com/fencegate/fencegate/loadtest/stack"
	"github.com/fencegate/fencegate/verify"
)

// entry is one scenario of the harness: what switches it on, what it
// proves, what it needs of the stack, and the hooks by which the runner
// drives, checks and reports it. The runner knows no scenario by name: it
// walks the table (scenarios). No hook reads another scenario's fields;
// what two scenarios share (the workers, the stats, the checks of every
// run) is the runner's.
type entry struct {
	// name is the scenario's name; its files are named after it
	// (docs/harness.md, "Rooms").
	name string
	// proves is what a run with it on shows, in a line.
	proves string
	// flags are the `fencegate loadtest` flags that switch it on or set
	// it (the YAML keys are their snake_case forms).
	flags []string
	// on reports whether a run of sc on s has it (s is nil when only the
	// scenario is known: Validate, the report's fault list).
	on func(sc Scenario, s *stack.Stack) bool
	// fault names the fault it injects that can explain a worker error
	// (nil: it explains none; a worker's own freeze or churn is answered
	// in the API's terms).
	fault func(sc Scenario) string
	// validate fills its defaults and checks its own fields, on or off
	// (nil: nothing to check).
	validate func(sc *Scenario) error
	// needs says what it lacks on s (nil: runs on any stack).
	needs func(sc Scenario, s *stack.Stack) error
	// httpWorkers: it needs the harness's own HTTP workers (their
	// freezes, churn, held commits, item sequences, re-homes), so it is
	// refused behind a load balancer, whose workers are SDK workers.
	httpWorkers bool
	// replicas is the least number of gateway replicas (child processes)
	// it needs; the CLI starts that many (0: any).
	replicas int
	// stackOption is what the stack must be started with (nil: nothing).
	stackOption func() stack.StackOption
	// run replaces the runner's phases with the scenario's own (nil: the
	// runner drives it through start and check).
	run func(ctx context.Context, s *stack.Stack, sc Scenario, opts Options) (*report.Report, error)
	// prepare readies the runner before the workers start (nil: nothing).
	prepare func(ctx context.Context, r *runner) error
	// start starts its part of the gateway phase (nil: none).
	start func(r *runner, p *phase) error
	// figures adds its figures to the report after the gateway phase
	// (nil: none).
	figures func(r *runner, rep *report.Report, end time.Time)
	// ownRecords picks the records of the whole log that its own checks
	// judge, which the checks of every run leave out (nil: none).
	ownRecords func(verify.LogRecord) bool
	// check runs its checks after the checks of every run (nil: none).
	check func(ctx context.Context, r *runner, rep *report.Report) error
	// report is the JSON key of the report's member that holds its
	// figures and checks ("": the figures of every run).
	report string
}

// phase is what a scenario's start hook gets of the gateway phase.
type phase struct {
	// ctx is the gateway phase; faultCtx its fault window (the phase but
	// its quiet end: faultWindow).
	ctx, faultCtx context.Context
	// end ends the gateway phase early.
	end context.CancelFunc
	// faults waits for every fault goroutine.
	faults *sync.WaitGroup
}

// after runs fn once, d into the phase, unless ctx ended first.
func (p *phase) after(ctx context.Context, d time.Duration, fn func()) {
	p.faults.Add(1)
	go func() {
		defer p.faults.Done()
		wait(ctx, d)
		if ctx.Err() == nil {
			fn()
		}
	}()
}

// errReplicas is the need of every replica fault.
var errReplicas = errors.New("freeze_replica_every, drain_replica_after, kill_replica_every and rolling_restart need two or more gateway replicas as child processes (--embedded --replicas 2)")

// needReplicas: two or more gateway replicas as child processes.
func needReplicas(_ Scenario, s *stack.Stack) error {
	if len(s.Children()) < 2 {
		return errReplicas
	}
	return nil
}

// named returns a fault func that names the fault name.
func named(name string) func(Scenario) string { return func(Scenario) string { return name } }

// scenarios is the harness's one table of scenarios, in the order their
// faults are listed in the report. Run, Scenario.Validate, the report's
// fault list and the CLI's replica count and stack options read it.
func scenarios() []entry {
	return []entry{
		{name: "freeze", proves: "a holder frozen past its TTL wakes and writes with its old token: refused (I2, the incident)",
			flags: []string{"--freeze-every"}, httpWorkers: true,
			on: func(sc Scenario, _ *stack.Stack) bool { return sc.FreezeEvery > 0 },
			start: func(r *runner, p *phase) error {
				r.every(p.ctx, p.faults, r.sc.FreezeEvery, r.freezeWorker)
				return nil
			}},
		{name: "churn", proves: "forced handovers under load keep I1..I4",
			flags: []string{"--churn-every"}, httpWorkers: true,
			on:    func(sc Scenario, _ *stack.Stack) bool { return sc.ChurnEvery > 0 },
			start: func(r *runner, p *phase) error { r.every(p.ctx, p.faults, r.sc.ChurnEvery, r.churnHolder); return nil }},
		{name: "ambiguity", proves: "an EndTxn held past the commit timeout ends the generation; no definite refusal is found committed",
			flags: []string{"--ambiguity-every"}, httpWorkers: true,
			on:    func(sc Scenario, _ *stack.Stack) bool { return sc.AmbiguityEvery > 0 },
			fault: named("ambiguous commits"),
			needs: func(_ Scenario, s *stack.Stack) error {
				if !s.InProcessBroker() {
					return stack.ErrNotEmbedded
				}
				return nil
			},
			start: func(r *runner, p *phase) error {
				r.every(p.ctx, p.faults, r.sc.AmbiguityEvery, func() { r.stack.HoldNextEndTxn(stack.CommitTimeout + time.Second) })
				return nil
			}},
		netFaultEntry(),
		gatewayKillEntry(),
		replicaFreezeEntry(),
		replicaDrainEntry(),
		replicaKillEntry(),
		rollingRestartEntry(),
		materializerKillEntry(),
		trustedRebalanceEntry(),
		brokerFaultEntry(),
		coldStartEntry(),
		statefulEntry(),
		mixedFleetEntry(),
		balancedEntry(),
		trustedEntry(),
	}
}

// on are the table's entries a run of sc on s has (s nil: by the
// scenario alone).
func on(sc Scenario, s *stack.Stack) []entry {
	var out []entry
	for _, e := range scenarios() {
		if e.on(sc, s) {
			out = append(out, e)
		}
	}
	return out
}

// needs is the first need a run of sc on s lacks, in the table's order,
// then what a balancer refuses (nil: it can run).
func needs(sc Scenario, s *stack.Stack) error {
	ons := on(sc, s)
	for _, e := range ons {
		if e.needs != nil {
			if err := e.needs(sc, s); err != nil {
				return err
			}
		}
	}
	if s.BalancerURL == "" {
		return nil
	}
	for _, e := range ons {
		if e.httpWorkers {
			return errors.New("behind a balancer the workers are SDK workers: freeze_every, churn_every, ambiguity_every, stateful and drain_replica_after are off (rolling_restart drains every replica)")
		}
	}
	return nil
}

// Replicas is the least number of gateway replicas the scenario's faults
// need (0: any): `fencegate loadtest` starts that many.
func (s Scenario) Replicas() int {
	n := 0
	for _, e := range on(s, nil) {
		n = max(n, e.replicas)
	}
	return n
}

// StackOptions are the options the stack must be started with for the
// scenario (the in-process fault proxies of --net-fault, the SASL users of
// --mixed-fleet).
func (s Scenario) StackOptions() []stack.StackOption {
	var out []stack.StackOption
	for _, e := range on(s, nil) {
		if e.stackOption != nil {
			out = append(out, e.stackOption())
		}
	}
	return out
}

// faults names the faults the scenario injects that can make a worker
// see an answer it cannot act on (a worker error), in the table's order.
// A worker's own freeze or churn is not one: the gateway answers those
// in the API's terms. With none, a worker error fails the run.
func (s Scenario) faults() []string {
	var out []string
	for _, e := range on(s, nil) {
		if e.fault != nil {
			out = append(out, e.fault(s))
		}
	}
	return out
}

// ScenarioInfo is one row of the scenario table as a reader sees it:
// the CLI's tests and docs/harness.md read the same rows the runner
// drives.
type ScenarioInfo struct {
	// Name is the scenario's name; its files are named after it.
	Name string
	// Proves is what a run with it on shows, in a line.
	Proves string
	// Flags are the `fencegate loadtest` flags that switch it on or set
	// it.
	Flags []string
	// Report is the JSON key of the report member that holds its figures
	// and checks ("": the figures of every run).
	Report string
	// Replicas is the least number of gateway replicas it needs (0: any).
	Replicas int
}

// ScenarioTable lists the harness's scenarios in the table's order.
func ScenarioTable() []ScenarioInfo {
	var out []ScenarioInfo
	for _, e := range scenarios() {
		out = append(out, ScenarioInfo{Name: e.name, Proves: e.proves, Flags: e.flags, Report: e.report, Replicas: e.replicas})
	}
	return out
}
