package report

import (
	"fmt"
	"io"
	"sort"
	"strings"
)

// Process names in the report.
const (
	ProcBroker       = "broker"
	ProcGateway      = "gateway"
	ProcMaterializer = "materializer"
	ProcHarness      = "harness"
	ProcDirect       = "direct"
	ProcBare         = "bare"
)

// ReplicaProc is the process name of gateway replica i of n: ProcGateway
// when it is the only one, "gateway-<i>" otherwise.
func ReplicaProc(i, n int) string {
	if n <= 1 {
		return ProcGateway
	}
	return fmt.Sprintf("%s-%d", ProcGateway, i)
}

// isGateway reports whether the process name is a gateway replica's.
func isGateway(name string) bool {
	return name == ProcGateway || strings.HasPrefix(name, ProcGateway+"-")
}

// gatewayNames are the gateway replicas among names, in order.
func gatewayNames[V any](names map[string]V) []string {
	var out []string
	for n := range names {
		if isGateway(n) {
			out = append(out, n)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if len(out[i]) != len(out[j]) {
			return len(out[i]) < len(out[j]) // gateway-2 before gateway-10
		}
		return out[i] < out[j]
	})
	return out
}

// gatewayCPU is the CPU seconds of every gateway replica in cpu.
func gatewayCPU(cpu map[string]float64) float64 {
	var sum float64
	for _, n := range gatewayNames(cpu) {
		sum += cpu[n]
	}
	return sum
}

// CPUFigures attribute CPU to processes (separate processes only).
type CPUFigures struct {
	// GatewaySecondsPerGiB is the gateway processes' CPU seconds in the
	// gateway phase per GiB of record values acknowledged;
	// DirectSecondsPerGiB the direct baseline process's (its whole life)
	// per GiB it committed; BareSecondsPerGiB the bare-producer
	// yardstick's.
	GatewaySecondsPerGiB float64 `json:"gateway_seconds_per_gib"`
	DirectSecondsPerGiB  float64 `json:"direct_seconds_per_gib"`
	BareSecondsPerGiB    float64 `json:"bare_seconds_per_gib,omitempty"`
	// RatioGatewayDirect is GatewaySecondsPerGiB / DirectSecondsPerGiB.
	RatioGatewayDirect float64 `json:"ratio_gateway_direct"`
	// Phases: by phase ("gateway", "direct", "bare"), its wall seconds and
	// each process's CPU seconds in it.
	Phases map[string]PhaseCPU `json:"phases"`
}

// PhaseCPU is one phase's CPU by process.
type PhaseCPU struct {
	Seconds float64            `json:"seconds"`
	CPU     map[string]float64 `json:"cpu_seconds"`
}

// BareFigures are the bare-producer yardstick's: transactional producers
// in a loop, no HTTP, no leases, no per-record delivery wait.
type BareFigures struct {
	Producers int     `json:"producers"`
	Records   int64   `json:"records"`
	Seconds   float64 `json:"seconds"`
	// RecordsPerS and RatioDirectBare (direct records/s over these).
	RecordsPerS     float64 `json:"records_per_s"`
	RatioDirectBare float64 `json:"ratio_direct_bare"`
}

// AddPhase records a phase's usage in the report: its wall seconds, CPU
// seconds by process and peak resident KiB by process.
func (rep *Report) AddPhase(name string, seconds float64, cpu map[string]float64, rssKB map[string]int64) {
	if rep.CPU == nil {
		rep.CPU = &CPUFigures{Phases: map[string]PhaseCPU{}}
	}
	if rep.RSSMiB == nil {
		rep.RSSMiB = map[string]float64{}
	}
	rep.CPU.Phases[name] = PhaseCPU{Seconds: seconds, CPU: cpu}
	for p, kb := range rssKB {
		rep.RSSMiB[p] = max(rep.RSSMiB[p], float64(kb)/1024)
	}
}

const gib = 1 << 30

// finishCPU computes the per-GiB figures and ratios.
func (rep *Report) finishCPU() {
	c := rep.CPU
	if c == nil {
		return
	}
	perGiB := func(cpu float64, records int64) float64 {
		if records <= 0 || rep.Scenario.RecordSize <= 0 {
			return 0
		}
		return cpu / (float64(records) * float64(rep.Scenario.RecordSize) / gib)
	}
	c.GatewaySecondsPerGiB = perGiB(gatewayCPU(c.Phases["gateway"].CPU), rep.Gateway.Records)
	c.DirectSecondsPerGiB = perGiB(c.Phases["direct"].CPU[ProcDirect], rep.Direct.Records)
	if c.DirectSecondsPerGiB > 0 {
		c.RatioGatewayDirect = c.GatewaySecondsPerGiB / c.DirectSecondsPerGiB
	}
	if b := rep.Bare; b != nil {
		c.BareSecondsPerGiB = perGiB(c.Phases["bare"].CPU[ProcBare], b.Records)
		if b.Seconds > 0 {
			b.RecordsPerS = float64(b.Records) / b.Seconds
		}
		if b.RecordsPerS > 0 {
			b.RatioDirectBare = rep.Throughput.DirectRecordsPerS / b.RecordsPerS
		}
	}
}

// writeProcesses writes the per-process figures to the Markdown summary.
func (rep *Report) writeProcesses(w io.Writer) {
	c := rep.CPU
	if c == nil {
		return
	}
	fmt.Fprintln(w, "\n| process | CPU s (cores), gateway phase | CPU s (cores), direct phase | CPU s (cores), bare phase | peak RSS MiB |")
	fmt.Fprintln(w, "|---|---|---|---|---|")
	cell := func(phase, proc string) string {
		p, ok := c.Phases[phase]
		v, has := p.CPU[proc]
		if !ok || !has || p.Seconds <= 0 {
			return ""
		}
		return fmt.Sprintf("%.1f (%.2f)", v, v/p.Seconds)
	}
	for _, proc := range append(gatewayNames(rep.RSSMiB), ProcBroker, ProcMaterializer, ProcHarness, ProcDirect, ProcBare) {
		if _, ok := rep.RSSMiB[proc]; !ok {
			continue
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %.0f |\n", proc, cell("gateway", proc), cell("direct", proc), cell("bare", proc), rep.RSSMiB[proc])
	}
	fmt.Fprintf(w, "\nCPU per GiB of record values: gateway process %.1f s, direct producer process %s",
		c.GatewaySecondsPerGiB, measured(c.DirectSecondsPerGiB > 0, "%.1f s (ratio %.2f)", c.DirectSecondsPerGiB, c.RatioGatewayDirect).Text)
	if b := rep.Bare; b != nil {
		fmt.Fprintf(w, ", bare producers %.1f s\nbare-producer yardstick: %d producers, %.0f records/s; direct / bare %s",
			c.BareSecondsPerGiB, b.Producers, b.RecordsPerS, measured(b.RatioDirectBare > 0, "%.2f", b.RatioDirectBare).Text)
	}
	fmt.Fprintln(w)
}

// processCells are the HTML report's rows of the per-process figures.
func (rep *Report) processCells() [][2]cell {
	c := rep.CPU
	if c == nil {
		return nil
	}
	rows := [][2]cell{
		{text("gateway process CPU per GiB"), text(fmt.Sprintf("%.1f s", c.GatewaySecondsPerGiB))},
		{text("direct producer process CPU per GiB"), measured(c.DirectSecondsPerGiB > 0, "%.1f s (gateway / direct %.2f)", c.DirectSecondsPerGiB, c.RatioGatewayDirect)},
	}
	if b := rep.Bare; b != nil {
		rows = append(rows, [2]cell{text(fmt.Sprintf("bare producers (%d) records/s", b.Producers)),
			text(fmt.Sprintf("%s (direct / bare %s; %.1f CPU s per GiB)", num(b.RecordsPerS), measured(b.RatioDirectBare > 0, "%.2f", b.RatioDirectBare).Text, c.BareSecondsPerGiB))})
	}
	for _, phase := range []string{"gateway", "direct", "bare"} {
		p, ok := c.Phases[phase]
		if !ok || p.Seconds <= 0 {
			continue
		}
		var parts []string
		for _, proc := range sortedNames(p.CPU) {
			parts = append(parts, fmt.Sprintf("%s %.2f", proc, p.CPU[proc]/p.Seconds))
		}
		rows = append(rows, [2]cell{text("cores by process, " + phase + " phase"), text(strings.Join(parts, ", "))})
	}
	var parts []string
	for _, proc := range sortedNames(rep.RSSMiB) {
		parts = append(parts, fmt.Sprintf("%s %.0f", proc, rep.RSSMiB[proc]))
	}
	return append(rows, [2]cell{text("peak resident memory, MiB"), text(strings.Join(parts, ", "))})
}

func sortedNames(m map[string]float64) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
