package report

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
)

// Report holds every figure of a run. JSON keys are stable: scripts and CI
// read them.
type Report struct {
	// Run says when, by which build and with which command line.
	Run        RunInfo         `json:"run"`
	Scenario   ScenarioFigures `json:"scenario"`
	Invariants struct {
		I1 Invariant `json:"I1"`
		I2 Invariant `json:"I2"`
		I3 Invariant `json:"I3"`
		I4 Invariant `json:"I4"`
	} `json:"invariants"`
	Ledger LedgerCheck `json:"ledger"`
	// Trusted checks the trusted topic (--trusted; nil: not run).
	Trusted  *TrustedCheck `json:"trusted,omitempty"`
	History  History       `json:"history"`
	NetFault *NetFault     `json:"net_fault,omitempty"`
	// BrokerFaults are the faults of the run's Apache Kafka cluster
	// (--kafka-cluster; nil: none).
	BrokerFaults *BrokerFaults  `json:"broker_faults,omitempty"`
	Gateway      GatewayFigures `json:"gateway"`
	// Direct is the like-for-like direct baseline: its records carry the
	// five fencegate headers the gateway stamps. DirectPlain, when run
	// (separate processes), is the same loop without them.
	Direct      DirectFigures  `json:"direct"`
	DirectPlain *DirectFigures `json:"direct_plain,omitempty"`
	Naive       NaiveFigures   `json:"naive"`
	Throughput  struct {
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
		// FirstBatchSeconds: from the start until every lease had its
		// first batch acknowledged (-1: not within the run);
		// HandoversToFirstBatch the handovers until then and
		// HandoversPerS their rate.
		FirstBatchSeconds     float64 `json:"first_batch_seconds"`
		HandoversToFirstBatch int64   `json:"handovers_to_first_batch"`
		HandoversPerS         float64 `json:"handovers_per_s"`
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
	Timeline           []Second `json:"timeline"`
	// CPU, RSSMiB and Bare: with the components as separate processes
	// only (--separate-processes), CPU seconds by process and phase, peak
	// resident memory by process, and the bare-producer yardstick.
	CPU    *CPUFigures        `json:"cpu,omitempty"`
	RSSMiB map[string]float64 `json:"rss_mib,omitempty"`
	Bare   *BareFigures       `json:"bare,omitempty"`
	// BarePlain is the bare loop without the fencegate headers.
	BarePlain *BareFigures `json:"bare_plain,omitempty"`
	// BareHandover is the handover yardstick (--bare-handovers).
	BareHandover *HandoverFigures `json:"bare_handover,omitempty"`
	// Fleet: with the gateways as child processes only (--replicas N or
	// --separate-processes), the figures by replica, the broker's CPU and
	// the cost of a lease.
	Fleet *FleetFigures `json:"fleet,omitempty"`
	// Mixed: a --mixed-fleet run only (direct and gateway workers while
	// the rollout walks observe -> gated -> enforced).
	Mixed *MixedFigures `json:"mixed,omitempty"`
	// Stateful: a --stateful run only (I6 and the naive baseline's gaps
	// and duplicates).
	Stateful *StatefulFigures `json:"stateful,omitempty"`
	// Balanced: a --balancer run only (SDK workers behind a load
	// balancer, replica faults, re-serve gaps, worker-visible errors).
	Balanced *BalancedFigures `json:"balanced,omitempty"`
	// Pass: Failures is empty.
	Pass bool `json:"pass"`
	// Failures name what failed the run (see failures): a check that
	// found a violation, a check that checked nothing in a run that asked
	// for load, a figure nothing explains.
	Failures []string `json:"failures,omitempty"`
}

// Second is one second of the timeline.
type Second struct {
	Records   int64   `json:"records"`
	Batches   int64   `json:"batches"`
	P50Ms     float64 `json:"p50_ms"`
	P99Ms     float64 `json:"p99_ms"`
	Handovers int64   `json:"handovers"`
	Fences    int64   `json:"fences"`
	Refused   int64   `json:"stale_refused"`
}

// ScenarioFigures is the scenario as run, durations in seconds.
type ScenarioFigures struct {
	Leases          int     `json:"leases"`
	WorkersPerLease int     `json:"workers_per_lease"`
	BatchSize       int     `json:"batch_size"`
	RecordSize      int     `json:"record_size"`
	Rate            float64 `json:"rate"`
	// BatchEveryS is the pacing the rate was given as (--batch-every; 0:
	// given as a rate, or open loop); ColdStart: the phase ended once
	// every lease had written (--cold-start).
	BatchEveryS     float64 `json:"batch_every_s,omitempty"`
	ColdStart       bool    `json:"cold_start,omitempty"`
	DurationS       float64 `json:"duration_s"`
	TTLMs           int64   `json:"ttl_ms"`
	FreezeEveryS    float64 `json:"freeze_every_s"`
	ChurnEveryS     float64 `json:"churn_every_s"`
	AmbiguityEveryS float64 `json:"ambiguity_every_s"`
	// Stateful: workers processed item sequences from checkpoints
	// (--stateful; the Stateful section has I6).
	Stateful bool `json:"stateful,omitempty"`
	// Faults are the faults the run injected that can make a worker see
	// an answer it cannot act on (Gateway.Errors): with none, every such
	// error fails the run.
	Faults []string `json:"faults,omitempty"`
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

// QuantilesOf returns h's p50 and p99 in milliseconds and its count.
func QuantilesOf(h *Histogram) Quantiles {
	return Quantiles{P50: h.Ms(0.5), P99: h.Ms(0.99), Count: h.Count()}
}

// Finish computes the derived figures and the overall verdict.
func (rep *Report) Finish() {
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
	rep.Failures = rep.failures()
	rep.Pass = len(rep.Failures) == 0
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

// WriteMarkdown writes the summary printed at the end of a run. Its
// baseline table has the HTML report's rows (baselineRows), so both say
// "not measured" for the same figures.
func (rep *Report) WriteMarkdown(w io.Writer) {
	s := rep.Scenario
	fmt.Fprintf(w, "## fencegate loadtest: %s\n\n", passText(rep.Pass))
	fmt.Fprintf(w, "run: %s\n\n", rep.Run.summary())
	rep.writeFailures(w)
	if write := rep.summaryInstead(); write != nil {
		write(rep, w)
		return
	}
	fmt.Fprintf(w, "%d leases x %d workers, %d records x %d B per batch, %.0fs, TTL %dms, freeze %s, churn %s, ambiguity %s\n\n",
		s.Leases, s.WorkersPerLease, s.BatchSize, s.RecordSize, s.DurationS, s.TTLMs, every(s.FreezeEveryS).Text, every(s.ChurnEveryS).Text,
		every(s.AmbiguityEveryS).Text)
	rep.writeSections(w, afterScenario)
	fmt.Fprintf(w, "pacing: %s\n\n", s.pacing())
	fmt.Fprintf(w, "API clients: %d", s.Clients)
	if s.MaxInFlightPerClient > 0 {
		fmt.Fprintf(w, "; the gateway's in-flight caps: %d, %d per client", s.MaxInFlight, s.MaxInFlightPerClient)
	}
	fmt.Fprint(w, "\n\n")
	rep.writeInvariants(w)
	if rep.Ledger.NotChecked {
		fmt.Fprintf(w, "| ledger == acked batches | %s (no materializer) | | |\n\n", notMeasured)
	} else {
		fmt.Fprintf(w, "| ledger == acked batches | %s | %d | missing %d, duplicated %d (%s) |\n\n",
			passText(rep.Ledger.Pass), rep.Ledger.AckedBatches, rep.Ledger.Missing, rep.Ledger.Duplicated, rep.Ledger.extraText())
	}
	rep.writeSections(w, afterLedger)
	fmt.Fprintln(w, "| | gateway | direct | naive |")
	fmt.Fprintln(w, "|---|---|---|---|")
	for _, row := range rep.baselineRows() {
		texts := make([]string, len(row))
		for i, c := range row {
			texts[i] = c.Text
		}
		fmt.Fprintf(w, "| %s |\n", strings.Join(texts, " | "))
	}
	if rep.MaterializerPaused {
		fmt.Fprintf(w, "\nthe materializer was paused during the gateway phase (--pause-materializer); the ledger was checked after it caught up")
	}
	rep.writeSections(w, afterBaselines)
	rep.writeColdStart(w)
	directRate := rep.Throughput.DirectRecordsPerS > 0
	fmt.Fprintf(w, "steady state (%.1fs): %.0f records/s (ratio to direct %s); batch p50 / p99 %.1f / %.1f ms; handover p50 / p99 %.1f / %.1f ms (%d); renew p50 / p99 %.1f / %.1f ms (%d)\n",
		rep.Steady.Seconds, rep.Steady.RecordsPerS, measured(directRate, "%.2f", rep.Steady.RatioGatewayDirect).Text,
		rep.Steady.LatencyMs.Produce.P50, rep.Steady.LatencyMs.Produce.P99,
		rep.Steady.LatencyMs.Handover.P50, rep.Steady.LatencyMs.Handover.P99, rep.Steady.LatencyMs.Handover.Count,
		rep.Steady.LatencyMs.Renew.P50, rep.Steady.LatencyMs.Renew.P99, rep.Steady.LatencyMs.Renew.Count)
	fmt.Fprintf(w, "whole phase: handover p50 / p99: %.1f / %.1f ms (%d); renew p50 / p99: %.1f / %.1f ms (%d)\n",
		rep.LatencyMs.Handover.P50, rep.LatencyMs.Handover.P99, rep.LatencyMs.Handover.Count,
		rep.LatencyMs.Renew.P50, rep.LatencyMs.Renew.P99, rep.LatencyMs.Renew.Count)
	fmt.Fprintf(w, "writes of overtaken generations: %d, refused: %d, by layer: %s; producers fenced: %d; errors: %d%s%s\n",
		rep.Gateway.StaleAttempts, rep.Gateway.StaleRefused, counts(rep.Gateway.StaleByLayer), rep.Gateway.Fenced, rep.Gateway.Errors,
		breakdown(rep.Gateway.ErrorsByCall), rep.errorsWhy())
	fmt.Fprintf(w, "replicas: %d, replica freezes: %d; answers: %s; definite refusals found committed: %d\n",
		rep.Gateway.Replicas, rep.Gateway.ReplicaFreezes, counts(rep.Gateway.AnswersByCode), rep.Gateway.DefiniteButCommitted)
	if rep.Gateway.DrainSeconds > 0 {
		fmt.Fprintf(w, "drain: SIGTERM to exit %.2fs, every lease it held moved within %.2fs, re-homes %d, worker errors meanwhile %d\n",
			rep.Gateway.DrainSeconds, rep.Gateway.RehomeSeconds, rep.Gateway.Rehomes, rep.Gateway.DrainErrors)
	}
	fmt.Fprintf(w, "sessions left after the run: %s; process threads before/after: %s\n",
		rep.sessionsLeft().Text, rep.threads("%d/%d").Text)
	rep.writeProcesses(w)
	rep.writeSections(w, afterProcesses)
	rep.History.write(w)
	rep.writeFleet(w)
	for _, inv := range []Invariant{rep.Invariants.I1, rep.Invariants.I2, rep.Invariants.I3, rep.Invariants.I4} {
		for _, ex := range inv.Examples {
			fmt.Fprintf(w, "- %s\n", ex)
		}
	}
}

// writeInvariants writes the invariants' table.
func (rep *Report) writeInvariants(w io.Writer) {
	fmt.Fprintln(w, "| invariant | result | checked | violations |")
	fmt.Fprintln(w, "|---|---|---|---|")
	for _, row := range rep.invariantRows() {
		fmt.Fprintf(w, "| %s | %s | %d | %d |\n", row.Name, passText(row.Inv.Pass), row.Inv.Checked, row.Inv.Violations)
	}
}

// writeColdStart writes the cold start's line: how long until every lease
// had been granted once, or that some never was.
func (rep *Report) writeColdStart(w io.Writer) {
	c := rep.ColdStart
	after := fmt.Sprintf("all granted after %.1fs", c.Seconds)
	if c.Seconds < 0 {
		after = "not all granted during the run"
	}
	fmt.Fprintf(w, "\ncold start: %d leases %s, %s (handover p50 / p99 %.1f / %.1f ms, %d; worker errors %d; acquires deferred 429 over the run %d)\n",
		c.Leases, after, rep.firstBatches(), c.Handover.P50, c.Handover.P99, c.Handover.Count, c.Errors, rep.Gateway.AcquiresDeferred)
}

// firstBatches says when every lease had written, and the handovers per
// second until then.
func (rep *Report) firstBatches() string {
	c := rep.ColdStart
	if c.FirstBatchSeconds < 0 {
		return "not every lease wrote during the run"
	}
	return fmt.Sprintf("every lease wrote after %.1fs (%d handovers, %.1f/s)", c.FirstBatchSeconds, c.HandoversToFirstBatch, c.HandoversPerS)
}

// pacing says how workers paced their batches.
func (s ScenarioFigures) pacing() string {
	out := "open loop (as fast as possible)"
	switch {
	case s.BatchEveryS > 0:
		out = fmt.Sprintf("one batch every %s s per lease", num(s.BatchEveryS))
	case s.Rate > 0:
		out = fmt.Sprintf("%s batches/s per lease", num(s.Rate))
	}
	if s.ColdStart {
		out += "; cold start: the phase ends once every lease wrote"
	}
	return out
}

// sessionsLeft are the live sessions after the run; an external
// gateway's are not measured (-1).
func (rep *Report) sessionsLeft() cell {
	n := rep.Gateway.SessionsAfterRun
	return measured(n >= 0, "%d", n)
}

// threads are the harness process's OS threads before and after the run.
func (rep *Report) threads(format string) cell {
	g := rep.Gateway
	return measured(g.ThreadsBefore > 0 && g.ThreadsAfter > 0, format, g.ThreadsBefore, g.ThreadsAfter)
}

// breakdown is counts of m after a space, or nothing when m is empty (a
// count of 0 needs no "none" after it).
func breakdown(m map[string]int64) string {
	if len(m) == 0 {
		return ""
	}
	return " " + counts(m)
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
