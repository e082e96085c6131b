package loadtest

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"
)

// Report holds every figure of a run. JSON keys are stable: scripts and CI
// read them.
type Report struct {
	Scenario   ScenarioFigures `json:"scenario"`
	Invariants struct {
		I1 Invariant `json:"I1"`
		I2 Invariant `json:"I2"`
		I3 Invariant `json:"I3"`
		I4 Invariant `json:"I4"`
	} `json:"invariants"`
	Ledger     LedgerCheck    `json:"ledger"`
	Gateway    GatewayFigures `json:"gateway"`
	Direct     DirectFigures  `json:"direct"`
	Naive      NaiveFigures   `json:"naive"`
	Throughput struct {
		GatewayRecordsPerS float64 `json:"gateway_records_per_s"`
		DirectRecordsPerS  float64 `json:"direct_records_per_s"`
		RatioGatewayDirect float64 `json:"ratio_gateway_direct"`
	} `json:"throughput"`
	LatencyMs struct {
		Produce  Quantiles `json:"produce"`
		Handover Quantiles `json:"handover"`
		Renew    Quantiles `json:"renew"`
	} `json:"latency_ms"`
	// ColdStart is the run until every lease had been granted once (all
	// workers start at once): how long that took (-1: never), the
	// handovers and the worker errors meanwhile.
	ColdStart struct {
		Leases   int       `json:"leases"`
		Seconds  float64   `json:"seconds"`
		Handover Quantiles `json:"handover_ms"`
		Errors   int64     `json:"errors"`
	} `json:"cold_start"`
	// Steady is the rest of the gateway phase: throughput and latencies
	// without the cold start (the direct baseline's producers are also
	// initialised before it is timed).
	Steady struct {
		Seconds            float64 `json:"seconds"`
		RecordsPerS        float64 `json:"records_per_s"`
		RatioGatewayDirect float64 `json:"ratio_gateway_direct"`
		LatencyMs          struct {
			Produce  Quantiles `json:"produce"`
			Handover Quantiles `json:"handover"`
			Renew    Quantiles `json:"renew"`
		} `json:"latency_ms"`
	} `json:"steady"`
	// MaterializerPaused: the materializer was stopped for the gateway
	// phase (--pause-materializer), so no reader shared the broker with it.
	MaterializerPaused bool     `json:"materializer_paused,omitempty"`
	Timeline           []second `json:"timeline"`
	// CPU, RSSMiB and Bare: with the components as separate processes
	// only (--separate-processes), CPU seconds by process and phase, peak
	// resident memory by process, and the bare-producer yardstick.
	CPU    *CPUFigures        `json:"cpu,omitempty"`
	RSSMiB map[string]float64 `json:"rss_mib,omitempty"`
	Bare   *BareFigures       `json:"bare,omitempty"`
	// Pass: every invariant and the ledger hold and the gateway accepted no
	// stale record.
	Pass bool `json:"pass"`
}

// ScenarioFigures is the scenario as run, durations in seconds.
type ScenarioFigures struct {
	Leases          int     `json:"leases"`
	WorkersPerLease int     `json:"workers_per_lease"`
	BatchSize       int     `json:"batch_size"`
	RecordSize      int     `json:"record_size"`
	Rate            float64 `json:"rate"`
	DurationS       float64 `json:"duration_s"`
	TTLMs           int64   `json:"ttl_ms"`
	FreezeEveryS    float64 `json:"freeze_every_s"`
	ChurnEveryS     float64 `json:"churn_every_s"`
	AmbiguityEveryS float64 `json:"ambiguity_every_s"`
	// Clients is the number of API clients (bearer tokens) the workers
	// were spread over (--clients); MaxInFlight and MaxInFlightPerClient
	// the in-flight caps of the gateways the harness started (absent for
	// an external gateway).
	Clients              int `json:"clients"`
	MaxInFlight          int `json:"max_inflight,omitempty"`
	MaxInFlightPerClient int `json:"max_inflight_per_client,omitempty"`
}

// GatewayFigures are the gateway phase's counts.
type GatewayFigures struct {
	Records       int64   `json:"records"`
	Batches       int64   `json:"batches"`
	Seconds       float64 `json:"seconds"`
	Handovers     int64   `json:"handovers"`
	Fenced        int64   `json:"fenced"`
	StaleAttempts int64   `json:"stale_attempts"`
	StaleRefused  int64   `json:"stale_refused"`
	// StaleAccepted: attempts sent after a later generation was
	// acknowledged, answered 200 and found committed in the log.
	StaleAccepted int64 `json:"stale_accepted"`
	Errors        int64 `json:"errors"`
	// ErrorsByCall counts Errors by call and answer ("acquire
	// too_many_requests", "renew transport").
	ErrorsByCall map[string]int64 `json:"errors_by_call"`
	// AcquiresDeferred counts acquires answered 429 too_many_requests
	// (the gateway's handover queue was full) and retried after
	// Retry-After; they are not errors.
	AcquiresDeferred int64 `json:"acquires_deferred"`
	// Replicas is the number of gateway replicas; ReplicaFreezes the rounds
	// of the replica-freeze fault.
	Replicas       int   `json:"replicas"`
	ReplicaFreezes int64 `json:"replica_freezes"`
	// AnswersByCode counts produce answers: "ok", a problem code, or
	// "transport".
	AnswersByCode map[string]int64 `json:"answers_by_code"`
	// StaleByLayer counts answers to overtaken generations by the layer
	// that answered: broker_fence, local_deadline, session_check,
	// outcome_unknown, committed (before the new barrier), transport.
	StaleByLayer map[string]int64 `json:"stale_by_layer"`
	// DefiniteButCommitted counts answers that promised "nothing
	// committed" for an attempt found committed in the log (must be 0).
	DefiniteButCommitted int64 `json:"definite_but_committed"`
	// Rehomes counts workers that moved to another replica (draining or
	// gone). DrainSeconds is SIGTERM to exit of the drained replica,
	// RehomeSeconds SIGTERM until every lease it held had a new generation
	// elsewhere (-1: some never did; 0: no drain).
	Rehomes       int64   `json:"rehomes"`
	DrainSeconds  float64 `json:"drain_seconds"`
	RehomeSeconds float64 `json:"rehome_seconds"`
	// DrainErrors are worker errors (answers a worker must handle beyond
	// not_holder, draining and re-homing) from SIGTERM until every lease
	// moved.
	DrainErrors int64 `json:"drain_errors"`
	// SessionsAfterRun are live sessions once every worker released
	// (embedded only; -1 otherwise): leaked sessions keep producers.
	SessionsAfterRun int `json:"sessions_after_run"`
	// ThreadsBefore/After are the harness process's OS threads before the
	// run and after it (embedded: the gateway's producers live here).
	ThreadsBefore int `json:"threads_before"`
	ThreadsAfter  int `json:"threads_after"`
}

// DirectFigures are the direct baseline's.
type DirectFigures struct {
	Records int64   `json:"records"`
	Seconds float64 `json:"seconds"`
	P50Ms   float64 `json:"p50_ms"`
	P99Ms   float64 `json:"p99_ms"`
}

// NaiveFigures are the naive baseline's.
type NaiveFigures struct {
	Records       int64 `json:"records"`
	StaleAccepted int64 `json:"stale_accepted"`
}

// Quantiles of a latency histogram.
type Quantiles struct {
	P50   float64 `json:"p50"`
	P99   float64 `json:"p99"`
	Count uint64  `json:"count"`
}

func quantiles(h *Histogram) Quantiles {
	return Quantiles{P50: h.Ms(0.5), P99: h.Ms(0.99), Count: h.Count()}
}

// report collects the gateway phase's figures.
func (r *runner) report() *Report {
	rep := &Report{}
	sc := r.sc
	rep.Scenario = ScenarioFigures{Leases: sc.Leases, WorkersPerLease: sc.WorkersPerLease, BatchSize: sc.BatchSize,
		RecordSize: sc.RecordSize, Rate: sc.Rate, DurationS: sc.Duration.Seconds(), TTLMs: sc.TTL.Milliseconds(),
		FreezeEveryS: sc.FreezeEvery.Seconds(), ChurnEveryS: sc.ChurnEvery.Seconds(), AmbiguityEveryS: sc.AmbiguityEvery.Seconds(),
		Clients: r.stack.Clients()}
	if len(r.stack.tokens) > 0 { // a gateway the harness started
		caps := r.stack.caps()
		rep.Scenario.MaxInFlight, rep.Scenario.MaxInFlightPerClient = caps.MaxInFlight, caps.MaxInFlightPerClient
	}
	st := r.st
	rep.Gateway = GatewayFigures{Records: st.records.Load(), Batches: st.batches.Load(), Seconds: sc.Duration.Seconds(),
		Handovers: st.handovers.Load(), Fenced: st.fences.Load(), StaleAttempts: st.staleAttempts.Load(),
		StaleRefused: st.staleRefused.Load(), Errors: st.errors.Load(),
		Replicas: len(r.stack.urls()), ReplicaFreezes: st.replicaFreezes.Load(),
		AnswersByCode: st.answersByCode, ErrorsByCall: st.errorsByCall, AcquiresDeferred: st.deferred.Load(), StaleByLayer: st.staleByLayer, Rehomes: st.rehomes.Load(),
		DrainSeconds: st.drainTook.Seconds(), RehomeSeconds: st.rehomeTook.Seconds(), DrainErrors: st.drainErrors}
	rep.Gateway.SessionsAfterRun = r.stack.liveSessions()
	rep.Gateway.ThreadsBefore, rep.Gateway.ThreadsAfter = r.threadsBefore, threadCount()
	rep.LatencyMs.Produce = quantiles(&st.produce)
	rep.LatencyMs.Handover = quantiles(&st.handover)
	rep.LatencyMs.Renew = quantiles(&st.renew)
	rep.Timeline = st.seconds()
	rep.splitAtSteady(st, sc.Duration)
	return rep
}

// splitAtSteady fills ColdStart and Steady from the stats of a gateway
// phase of length d.
func (rep *Report) splitAtSteady(st *stats, d time.Duration) {
	c := &rep.ColdStart
	c.Leases, c.Handover, c.Errors, c.Seconds = st.wantLeases, quantiles(&st.coldHandover), st.coldErrors.Load(), -1
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
	s.LatencyMs.Produce = quantiles(&st.steadyStats.produce)
	s.LatencyMs.Handover = quantiles(&st.steadyStats.handover)
	s.LatencyMs.Renew = quantiles(&st.steadyStats.renew)
}

// finish computes the derived figures and the overall verdict.
func (rep *Report) finish() {
	t := &rep.Throughput
	if rep.Gateway.Seconds > 0 {
		t.GatewayRecordsPerS = float64(rep.Gateway.Records) / rep.Gateway.Seconds
	}
	if rep.Direct.Seconds > 0 {
		t.DirectRecordsPerS = float64(rep.Direct.Records) / rep.Direct.Seconds
	}
	if t.DirectRecordsPerS > 0 {
		t.RatioGatewayDirect = t.GatewayRecordsPerS / t.DirectRecordsPerS
		rep.Steady.RatioGatewayDirect = rep.Steady.RecordsPerS / t.DirectRecordsPerS
	}
	rep.finishCPU()
	inv := rep.Invariants
	rep.Pass = inv.I1.Pass && inv.I2.Pass && inv.I3.Pass && inv.I4.Pass && rep.Ledger.Pass &&
		rep.Gateway.StaleAccepted == 0 && rep.Gateway.DefiniteButCommitted == 0 && rep.Gateway.SessionsAfterRun <= 0
}

// WriteJSON writes the report as indented JSON.
func (rep *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

func passText(ok bool) string {
	if ok {
		return "pass"
	}
	return "FAIL"
}

// WriteMarkdown writes the summary printed at the end of a run.
func (rep *Report) WriteMarkdown(w io.Writer) {
	s := rep.Scenario
	fmt.Fprintf(w, "## fencegate loadtest: %s\n\n", passText(rep.Pass))
	fmt.Fprintf(w, "%d leases x %d workers, %d records x %d B per batch, %.0fs, TTL %dms, freeze every %.0fs, churn every %.0fs, ambiguity every %.0fs\n\n",
		s.Leases, s.WorkersPerLease, s.BatchSize, s.RecordSize, s.DurationS, s.TTLMs, s.FreezeEveryS, s.ChurnEveryS, s.AmbiguityEveryS)
	fmt.Fprintf(w, "API clients: %d", s.Clients)
	if s.MaxInFlightPerClient > 0 {
		fmt.Fprintf(w, "; the gateway's in-flight caps: %d, %d per client", s.MaxInFlight, s.MaxInFlightPerClient)
	}
	fmt.Fprint(w, "\n\n")
	fmt.Fprintln(w, "| invariant | result | checked | violations |")
	fmt.Fprintln(w, "|---|---|---|---|")
	for _, row := range []struct {
		name string
		inv  Invariant
	}{{"I1 token order", rep.Invariants.I1}, {"I2 no stale write", rep.Invariants.I2},
		{"I3 no acked loss", rep.Invariants.I3}, {"I4 no early ack", rep.Invariants.I4}} {
		fmt.Fprintf(w, "| %s | %s | %d | %d |\n", row.name, passText(row.inv.Pass), row.inv.Checked, row.inv.Violations)
	}
	fmt.Fprintf(w, "| ledger == acked batches | %s | %d | missing %d, duplicated %d (extra %d) |\n\n",
		passText(rep.Ledger.Pass), rep.Ledger.AckedBatches, rep.Ledger.Missing, rep.Ledger.Duplicated, rep.Ledger.Extra)
	fmt.Fprintln(w, "| | gateway | direct | naive |")
	fmt.Fprintln(w, "|---|---|---|---|")
	fmt.Fprintf(w, "| records/s | %.0f | %.0f | |\n", rep.Throughput.GatewayRecordsPerS, rep.Throughput.DirectRecordsPerS)
	fmt.Fprintf(w, "| ratio to direct | %.2f | 1.00 | |\n", rep.Throughput.RatioGatewayDirect)
	fmt.Fprintf(w, "| batch p50 / p99 ms | %.1f / %.1f | %.1f / %.1f | |\n", rep.LatencyMs.Produce.P50, rep.LatencyMs.Produce.P99, rep.Direct.P50Ms, rep.Direct.P99Ms)
	fmt.Fprintf(w, "| stale records accepted | %d | | %d |\n", rep.Gateway.StaleAccepted, rep.Naive.StaleAccepted)
	if rep.MaterializerPaused {
		fmt.Fprintf(w, "\nthe materializer was paused during the gateway phase (--pause-materializer); the ledger was checked after it caught up")
	}
	fmt.Fprintf(w, "\ncold start: %d leases all granted after %.1fs (handover p50 / p99 %.1f / %.1f ms, %d; worker errors %d; acquires deferred 429 over the run %d)\n",
		rep.ColdStart.Leases, rep.ColdStart.Seconds, rep.ColdStart.Handover.P50, rep.ColdStart.Handover.P99, rep.ColdStart.Handover.Count, rep.ColdStart.Errors,
		rep.Gateway.AcquiresDeferred)
	fmt.Fprintf(w, "steady state (%.1fs): %.0f records/s (ratio to direct %.2f); batch p50 / p99 %.1f / %.1f ms; handover p50 / p99 %.1f / %.1f ms (%d); renew p50 / p99 %.1f / %.1f ms (%d)\n",
		rep.Steady.Seconds, rep.Steady.RecordsPerS, rep.Steady.RatioGatewayDirect,
		rep.Steady.LatencyMs.Produce.P50, rep.Steady.LatencyMs.Produce.P99,
		rep.Steady.LatencyMs.Handover.P50, rep.Steady.LatencyMs.Handover.P99, rep.Steady.LatencyMs.Handover.Count,
		rep.Steady.LatencyMs.Renew.P50, rep.Steady.LatencyMs.Renew.P99, rep.Steady.LatencyMs.Renew.Count)
	fmt.Fprintf(w, "whole phase: handover p50 / p99: %.1f / %.1f ms (%d); renew p50 / p99: %.1f / %.1f ms (%d)\n",
		rep.LatencyMs.Handover.P50, rep.LatencyMs.Handover.P99, rep.LatencyMs.Handover.Count,
		rep.LatencyMs.Renew.P50, rep.LatencyMs.Renew.P99, rep.LatencyMs.Renew.Count)
	fmt.Fprintf(w, "writes of overtaken generations: %d, refused: %d, by layer: %s; producers fenced: %d; errors: %d %s\n",
		rep.Gateway.StaleAttempts, rep.Gateway.StaleRefused, counts(rep.Gateway.StaleByLayer), rep.Gateway.Fenced, rep.Gateway.Errors,
		counts(rep.Gateway.ErrorsByCall))
	fmt.Fprintf(w, "replicas: %d, replica freezes: %d; answers: %s; definite refusals found committed: %d\n",
		rep.Gateway.Replicas, rep.Gateway.ReplicaFreezes, counts(rep.Gateway.AnswersByCode), rep.Gateway.DefiniteButCommitted)
	if rep.Gateway.DrainSeconds > 0 {
		fmt.Fprintf(w, "drain: SIGTERM to exit %.2fs, every lease it held moved within %.2fs, re-homes %d, worker errors meanwhile %d\n",
			rep.Gateway.DrainSeconds, rep.Gateway.RehomeSeconds, rep.Gateway.Rehomes, rep.Gateway.DrainErrors)
	}
	fmt.Fprintf(w, "sessions left after the run: %d; process threads before/after: %d/%d\n",
		rep.Gateway.SessionsAfterRun, rep.Gateway.ThreadsBefore, rep.Gateway.ThreadsAfter)
	rep.writeProcesses(w)
	for _, inv := range []Invariant{rep.Invariants.I1, rep.Invariants.I2, rep.Invariants.I3, rep.Invariants.I4} {
		for _, ex := range inv.Examples {
			fmt.Fprintf(w, "- %s\n", ex)
		}
	}
}

// counts prints a count map in key order ("none" when empty).
func counts(m map[string]int64) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return "none"
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}

// Markdown returns WriteMarkdown's text.
func (rep *Report) Markdown() string {
	var sb strings.Builder
	rep.WriteMarkdown(&sb)
	return sb.String()
}
