package loadtest

import (
	"time"

	"github.com/fencegate/fencegate/loadtest/report"
	"github.com/fencegate/fencegate/loadtest/stack"
)

// report collects the gateway phase's figures.
func (r *runner) report() *report.Report {
	rep := &report.Report{}
	sc := r.sc
	rep.Scenario = report.ScenarioFigures{Leases: sc.Leases, WorkersPerLease: sc.WorkersPerLease, BatchSize: sc.BatchSize,
		RecordSize: sc.RecordSize, Rate: sc.Rate, DurationS: sc.Duration.Seconds(), TTLMs: sc.TTL.Milliseconds(),
		FreezeEveryS: sc.FreezeEvery.Seconds(), ChurnEveryS: sc.ChurnEvery.Seconds(), AmbiguityEveryS: sc.AmbiguityEvery.Seconds(),
		Clients: r.stack.Clients(), Stateful: sc.Stateful, BatchEveryS: sc.BatchEvery.Seconds(), ColdStart: sc.ColdStart,
		Faults: sc.faults()}
	rep.Ledger.NotChecked = !r.stack.Materialize
	if caps, ok := r.stack.InFlightCaps(); ok { // a gateway the harness started
		rep.Scenario.MaxInFlight, rep.Scenario.MaxInFlightPerClient = caps.MaxInFlight, caps.MaxInFlightPerClient
	}
	st := r.st
	rep.NetFault = r.netFaultFigures()
	rep.BrokerFaults = r.brokerFaultFigures()
	rep.Gateway = report.GatewayFigures{Records: st.records.Load(), Batches: st.batches.Load(), Seconds: r.phaseSeconds(),
		Handovers: st.handovers.Load(), Fenced: st.fences.Load(), StaleAttempts: st.staleAttempts.Load(),
		StaleRefused: st.staleRefused.Load(), Errors: st.errors.Load(),
		Replicas: len(r.stack.URLs()), ReplicaFreezes: st.replicaFreezes.Load(),
		AnswersByCode: st.answersByCode, ErrorsByCall: st.errorsByCall, AcquiresDeferred: st.deferred.Load(), StaleByLayer: st.staleByLayer, Rehomes: st.rehomes.Load(),
		DrainSeconds: st.drainTook.Seconds(), RehomeSeconds: st.rehomeTook.Seconds(), DrainErrors: st.drainErrors}
	rep.Gateway.SessionsAfterRun = r.stack.LiveSessions()
	rep.Gateway.ThreadsBefore, rep.Gateway.ThreadsAfter = r.threadsBefore, threadCount()
	rep.LatencyMs.Produce = report.QuantilesOf(&st.produce)
	rep.LatencyMs.Handover = report.QuantilesOf(&st.handover)
	rep.LatencyMs.Renew = report.QuantilesOf(&st.renew)
	rep.Timeline = st.seconds()
	splitAtSteady(rep, st, time.Duration(rep.Gateway.Seconds*float64(time.Second)))
	firstBatches(rep, st)
	return rep
}

// phaseSeconds is the gateway phase's length: its Duration, or for a
// cold-start run that ended when every lease had written, until then,
// or for a run a scenario ended early (endEarly), until that end.
func (r *runner) phaseSeconds() float64 {
	r.st.mu.Lock()
	defer r.st.mu.Unlock()
	switch {
	case r.sc.ColdStart && !r.st.allBatchedAt.IsZero():
		return r.st.allBatchedAt.Sub(r.st.start).Seconds()
	case !r.st.endedAt.IsZero():
		return min(r.st.endedAt.Sub(r.st.start), r.sc.Duration).Seconds()
	}
	return r.sc.Duration.Seconds()
}

// firstBatches fills rep's cold start with when every lease had its
// first batch acknowledged, and the handovers until then.
func firstBatches(rep *report.Report, st *stats) {
	st.mu.Lock()
	defer st.mu.Unlock()
	c := &rep.ColdStart
	c.FirstBatchSeconds = -1
	if st.allBatchedAt.IsZero() {
		return
	}
	c.FirstBatchSeconds = st.allBatchedAt.Sub(st.start).Seconds()
	c.HandoversToFirstBatch = st.handoversAtAllBatched
	if c.FirstBatchSeconds > 0 {
		c.HandoversPerS = float64(c.HandoversToFirstBatch) / c.FirstBatchSeconds
	}
}

// splitAtSteady fills rep's ColdStart and Steady from the stats of a gateway
// phase of length d.
func splitAtSteady(rep *report.Report, st *stats, d time.Duration) {
	c := &rep.ColdStart
	c.Leases, c.Handover, c.Errors, c.Seconds = st.wantLeases, report.QuantilesOf(&st.coldHandover), st.coldErrors.Load(), -1
	st.mu.Lock()
	at := st.steadyAt
	st.mu.Unlock()
	if at.IsZero() {
		return
	}
	c.Seconds = at.Sub(st.start).Seconds()
	s := &rep.Steady
	s.Seconds = d.Seconds() - c.Seconds
	if s.Seconds > 0 {
		s.RecordsPerS = float64(st.steadyStats.records.Load()) / s.Seconds
	}
	s.LatencyMs.Produce = report.QuantilesOf(&st.steadyStats.produce)
	s.LatencyMs.Handover = report.QuantilesOf(&st.steadyStats.handover)
	s.LatencyMs.Renew = report.QuantilesOf(&st.steadyStats.renew)
}

// addPhase records a phase's usage u (nil: not sampled) in rep.
func addPhase(rep *report.Report, name string, u *stack.Usage) {
	if u != nil {
		rep.AddPhase(name, u.Seconds, u.CPU, u.RSSKB)
	}
}
