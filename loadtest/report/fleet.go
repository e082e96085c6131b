package report

import (
	"fmt"
	"io"
	"strings"
)

// FleetFigures are a run's figures by gateway replica, the broker's CPU
// beside them, and what a lease costs the replicas, measured in two
// windows of the gateway phase: the cold start (from the start until
// every lease has had its first batch acknowledged) and the steady state
// (from the moment every lease had been granted once to the end). Present
// when the gateways run as child processes (--replicas N, or
// --separate-processes).
//
// The per-lease figures of one run are one point each: the fixed cost of a
// replica is in them. Sizing takes the slope over runs of several sizes
// (deploy/bench/peak.sh; docs/design.md, "Sizing a fleet").
type FleetFigures struct {
	Replicas []ReplicaFigures `json:"replicas"`
	// BrokerProcess is the process whose CPU stands for the broker's:
	// "broker" (kfake in a child of its own) or "harness" (kfake in the
	// harness process, beside the workers and the materializer: an upper
	// bound).
	BrokerProcess string      `json:"broker_process"`
	Broker        WindowCores `json:"broker"`
	// Gateways is every replica's CPU summed.
	Gateways WindowCores  `json:"gateways"`
	Cold     ColdWindow   `json:"cold_start"`
	Steady   SteadyWindow `json:"steady"`
}

// WindowCores are one process's (or the replicas') CPU seconds in the cold
// start and the steady state, and the cores that is (CPU seconds per
// second of the window).
type WindowCores struct {
	ColdCPUSeconds   float64 `json:"cold_start_cpu_seconds"`
	SteadyCPUSeconds float64 `json:"steady_cpu_seconds"`
	SteadyCores      float64 `json:"steady_cores"`
}

// ReplicaFigures are one gateway replica's: CPU over the whole phase and
// in each window, and its peak resident memory.
type ReplicaFigures struct {
	Name       string  `json:"name"`
	CPUSeconds float64 `json:"cpu_seconds"`
	Cores      float64 `json:"cores"`
	WindowCores
	PeakRSSMiB float64 `json:"peak_rss_mib"`
}

// ColdWindow is the replicas' CPU in the cold start (Report.ColdStart has
// its length and handovers): LeaseSeconds are the seconds leases were
// held before the window ended, GatewayMsPerHandover all the replicas'
// CPU per handover (an upper bound: renewals, batches and the producers
// already started are in it), NetMsPerHandover the same with the steady
// state's cost of those lease-seconds taken out (0: no steady state to
// take it from).
type ColdWindow struct {
	LeaseSeconds         float64 `json:"lease_seconds"`
	GatewayMsPerHandover float64 `json:"gateway_cpu_ms_per_handover"`
	NetMsPerHandover     float64 `json:"net_cpu_ms_per_handover"`
}

// SteadyWindow is the steady state: its length, the leases, what they
// did per second, and the replicas' CPU per live lease per second and per
// batch (all of a lease's cost over its batches: renewals and its idle
// producer included).
type SteadyWindow struct {
	Seconds              float64 `json:"seconds"`
	Leases               int     `json:"leases"`
	BatchesPerS          float64 `json:"batches_per_s"`
	RenewalsPerS         float64 `json:"renewals_per_s"`
	HandoversPerS        float64 `json:"handovers_per_s"`
	GatewayMsPerLeaseS   float64 `json:"gateway_cpu_ms_per_lease_s"`
	GatewayMsPerBatch    float64 `json:"gateway_cpu_ms_per_batch"`
	BrokerMsPerBatch     float64 `json:"broker_cpu_ms_per_batch"`
	GatewayCoresPerLease float64 `json:"gateway_cores_per_lease"`
}

// writeFleet writes the fleet's table and lines to the summary (none
// without fleet figures).
func (rep *Report) writeFleet(w io.Writer) {
	f := rep.Fleet
	if f == nil {
		return
	}
	fmt.Fprintln(w, "\n| replica | CPU s (cores), whole phase | CPU s, cold start | cores, steady | peak RSS MiB |")
	fmt.Fprintln(w, "|---|---|---|---|---|")
	for _, r := range f.Replicas {
		fmt.Fprintf(w, "| %s | %.1f (%.2f) | %.1f | %.2f | %.0f |\n", r.Name, r.CPUSeconds, r.Cores, r.ColdCPUSeconds, r.SteadyCores, r.PeakRSSMiB)
	}
	fmt.Fprintf(w, "| all replicas | | %.1f | %.2f | |\n", f.Gateways.ColdCPUSeconds, f.Gateways.SteadyCores)
	fmt.Fprintf(w, "| broker (%s) | | %.1f | %.2f | |\n", f.BrokerProcess, f.Broker.ColdCPUSeconds, f.Broker.SteadyCores)
	for _, line := range rep.fleetLines() {
		fmt.Fprintln(w, line)
	}
}

// fleetLines are the fleet's figures in words, the same in both reports.
func (rep *Report) fleetLines() []string {
	f, c := rep.Fleet, rep.ColdStart
	s := f.Steady
	cold := "replicas' CPU per handover: " + notMeasured + " (not every lease wrote within the run)"
	if c.FirstBatchSeconds >= 0 && c.HandoversToFirstBatch > 0 {
		cold = fmt.Sprintf("replicas' CPU per handover: %s in the cold start (all of it), %s net of the leases already held",
			measured(f.Cold.GatewayMsPerHandover > 0, "%.1f ms", f.Cold.GatewayMsPerHandover).Text,
			measured(f.Cold.NetMsPerHandover > 0, "%.1f ms", f.Cold.NetMsPerHandover).Text)
	}
	out := []string{"\n" + cold}
	if s.Seconds > 0 {
		out = append(out, fmt.Sprintf("steady state (%.1fs, %d leases): %.1f batches/s, %.1f renewals/s, %.2f handovers/s; replicas' CPU %.2f ms per lease-second (%.5f cores per lease), %.2f ms per batch; broker %.2f ms per batch",
			s.Seconds, s.Leases, s.BatchesPerS, s.RenewalsPerS, s.HandoversPerS, s.GatewayMsPerLeaseS, s.GatewayCoresPerLease, s.GatewayMsPerBatch, s.BrokerMsPerBatch))
	} else {
		out = append(out, "steady state: "+notMeasured+" (not every lease was granted, or a cold-start run)")
	}
	return out
}

// fleetCells are the HTML report's rows of the fleet (none without fleet
// figures).
func (rep *Report) fleetCells() [][2]cell {
	f := rep.Fleet
	if f == nil {
		return nil
	}
	var rows [][2]cell
	for _, r := range f.Replicas {
		rows = append(rows, [2]cell{text("replica " + r.Name),
			text(fmt.Sprintf("%.1f CPU s (%.2f cores) over the phase, %.1f s in the cold start, %.2f cores steady, peak %.0f MiB",
				r.CPUSeconds, r.Cores, r.ColdCPUSeconds, r.SteadyCores, r.PeakRSSMiB))})
	}
	rows = append(rows, [2]cell{text("broker (" + f.BrokerProcess + ")"),
		text(fmt.Sprintf("%.1f CPU s in the cold start, %.2f cores steady", f.Broker.ColdCPUSeconds, f.Broker.SteadyCores))})
	for _, line := range rep.fleetLines() {
		name, value, _ := strings.Cut(strings.TrimSpace(line), ": ")
		rows = append(rows, [2]cell{text(name), text(value)})
	}
	return rows
}
