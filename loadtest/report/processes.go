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
	// ProcDirectPlain and ProcBarePlain are the baselines' plain form
	// (records without the fencegate headers); each is also the name of
	// its phase.
	ProcDirectPlain = "direct-plain"
	ProcBarePlain   = "bare-plain"
	// ProcHandover is the handover yardstick's process and phase.
	ProcHandover = "handover"
)

// producerPhases are the phases whose producing process is named as the
// phase (every one but "gateway"), in report order.
var producerPhases = []string{ProcDirect, ProcDirectPlain, ProcBare, ProcBarePlain, ProcHandover}

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
	// RatioGatewayDirect is GatewaySecondsPerGiB / DirectSecondsPerGiB:
	// the gateway's CPU per record over the like-for-like (stamped)
	// direct producer's. RatioGatewayDirectPlain is the same over the
	// plain direct producer's, when it ran.
	RatioGatewayDirect      float64 `json:"ratio_gateway_direct"`
	RatioGatewayDirectPlain float64 `json:"ratio_gateway_direct_plain,omitempty"`
	// MicrosPerRecord is, by phase, the producing process's CPU
	// microseconds per record committed in that phase: the gateway
	// processes' in "gateway", each baseline's in its own.
	MicrosPerRecord map[string]float64 `json:"us_per_record"`
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

// HandoverFigures are the handover yardstick's: Loops at once, each a new
// transactional producer, InitTransactions and a one-record transaction
// committed, again and again (no Postgres, no HTTP, no barrier).
type HandoverFigures struct {
	Loops     int     `json:"loops"`
	Handovers int64   `json:"handovers"`
	Seconds   float64 `json:"seconds"`
	P50Ms     float64 `json:"p50_ms"`
	P99Ms     float64 `json:"p99_ms"`
	// PerS is Handovers / Seconds. GatewayPerS is the gateway's
	// handovers per second: in the cold start until every lease wrote
	// (ColdStart.HandoversPerS) or, if that never happened, over the
	// whole gateway phase; RatioGateway is GatewayPerS / PerS.
	PerS         float64 `json:"per_s"`
	GatewayPerS  float64 `json:"gateway_per_s"`
	RatioGateway float64 `json:"ratio_gateway"`
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

// phaseRecords are the records committed in a phase (0: not run).
func (rep *Report) phaseRecords(phase string) int64 {
	switch phase {
	case ProcGateway:
		return rep.Gateway.Records
	case ProcDirect:
		return rep.Direct.Records
	case ProcDirectPlain:
		if rep.DirectPlain != nil {
			return rep.DirectPlain.Records
		}
	case ProcBare:
		if rep.Bare != nil {
			return rep.Bare.Records
		}
	case ProcBarePlain:
		if rep.BarePlain != nil {
			return rep.BarePlain.Records
		}
	}
	return 0
}

// producerCPU is the CPU seconds of a phase's producing process: the
// gateway replicas' in the gateway phase, the baseline child's in its own.
func (c *CPUFigures) producerCPU(phase string) float64 {
	if phase == ProcGateway {
		return gatewayCPU(c.Phases[phase].CPU)
	}
	return c.Phases[phase].CPU[phase]
}

// finishCPU computes the per-record and per-GiB figures and the ratios.
func (rep *Report) finishCPU() {
	c := rep.CPU
	if c == nil {
		return
	}
	perGiB := func(phase string) float64 {
		records := rep.phaseRecords(phase)
		if records <= 0 || rep.Scenario.RecordSize <= 0 {
			return 0
		}
		return c.producerCPU(phase) / (float64(records) * float64(rep.Scenario.RecordSize) / gib)
	}
	c.MicrosPerRecord = map[string]float64{}
	for _, phase := range append([]string{ProcGateway}, producerPhases...) {
		if n := rep.phaseRecords(phase); n > 0 {
			c.MicrosPerRecord[phase] = c.producerCPU(phase) / float64(n) * 1e6
		}
	}
	c.GatewaySecondsPerGiB = perGiB(ProcGateway)
	c.DirectSecondsPerGiB = perGiB(ProcDirect)
	c.BareSecondsPerGiB = perGiB(ProcBare)
	if c.DirectSecondsPerGiB > 0 {
		c.RatioGatewayDirect = c.GatewaySecondsPerGiB / c.DirectSecondsPerGiB
	}
	if plain := perGiB(ProcDirectPlain); plain > 0 {
		c.RatioGatewayDirectPlain = c.GatewaySecondsPerGiB / plain
	}
	for _, b := range []*BareFigures{rep.Bare, rep.BarePlain} {
		if b == nil {
			continue
		}
		if b.Seconds > 0 {
			b.RecordsPerS = float64(b.Records) / b.Seconds
		}
		if b.RecordsPerS > 0 {
			b.RatioDirectBare = rep.Throughput.DirectRecordsPerS / b.RecordsPerS
		}
	}
	if h := rep.BareHandover; h != nil && h.Seconds > 0 {
		h.PerS = float64(h.Handovers) / h.Seconds
		h.GatewayPerS = rep.ColdStart.HandoversPerS
		if h.GatewayPerS <= 0 && rep.Gateway.Seconds > 0 {
			h.GatewayPerS = float64(rep.Gateway.Handovers) / rep.Gateway.Seconds
		}
		if h.PerS > 0 {
			h.RatioGateway = h.GatewayPerS / h.PerS
		}
	}
	if b, d := rep.BarePlain, rep.DirectPlain; b != nil && d != nil && b.RecordsPerS > 0 && d.Seconds > 0 {
		b.RatioDirectBare = float64(d.Records) / d.Seconds / b.RecordsPerS
	}
}

// reportedPhases are the phases of the per-process table, in order.
var reportedPhases = append([]string{ProcGateway}, producerPhases...)

// writeProcesses writes the per-process figures to the Markdown summary:
// by process and phase, CPU seconds, cores and CPU microseconds per
// record committed in the phase.
func (rep *Report) writeProcesses(w io.Writer) {
	c := rep.CPU
	if c == nil {
		return
	}
	var phases []string
	for _, phase := range reportedPhases {
		if _, ok := c.Phases[phase]; ok {
			phases = append(phases, phase)
		}
	}
	fmt.Fprint(w, "\n| process |")
	for _, phase := range phases {
		fmt.Fprintf(w, " %s phase: CPU s (cores) us/record |", phase)
	}
	fmt.Fprintln(w, " peak RSS MiB |")
	fmt.Fprintln(w, "|---|"+strings.Repeat("---|", len(phases)+1))
	for _, proc := range append(gatewayNames(rep.RSSMiB), ProcBroker, ProcMaterializer, ProcHarness, ProcDirect, ProcDirectPlain, ProcBare, ProcBarePlain, ProcHandover) {
		if _, ok := rep.RSSMiB[proc]; !ok {
			continue
		}
		fmt.Fprintf(w, "| %s |", proc)
		for _, phase := range phases {
			fmt.Fprintf(w, " %s |", rep.processCell(phase, proc))
		}
		fmt.Fprintf(w, " %.0f |\n", rep.RSSMiB[proc])
	}
	fmt.Fprintf(w, "\nCPU per GiB of record values: gateway process %.1f s, direct producer process %s, bare producers %s\n",
		c.GatewaySecondsPerGiB, measured(c.DirectSecondsPerGiB > 0, "%.1f s (ratio %.2f)", c.DirectSecondsPerGiB, c.RatioGatewayDirect).Text,
		measured(c.BareSecondsPerGiB > 0, "%.1f s", c.BareSecondsPerGiB).Text)
	fmt.Fprintf(w, "CPU per record of the producing process: %s\n", rep.perRecordLine())
	if b := rep.Bare; b != nil {
		fmt.Fprintf(w, "bare-producer yardstick: %d producers, %.0f records/s; direct / bare %s",
			b.Producers, b.RecordsPerS, measured(b.RatioDirectBare > 0, "%.2f", b.RatioDirectBare).Text)
		if p := rep.BarePlain; p != nil {
			fmt.Fprintf(w, "; plain %.0f records/s, direct / bare %s", p.RecordsPerS, measured(p.RatioDirectBare > 0, "%.2f", p.RatioDirectBare).Text)
		}
		fmt.Fprintln(w)
	}
	if h := rep.BareHandover; h != nil {
		fmt.Fprintf(w, "handover yardstick: %s\n", h.line(rep.CPU))
	}
}

// line is the handover yardstick beside the gateway's cold start.
func (h *HandoverFigures) line(c *CPUFigures) string {
	out := fmt.Sprintf("%d loops, %.1f handovers/s (p50 / p99 %.1f / %.1f ms)", h.Loops, h.PerS, h.P50Ms, h.P99Ms)
	if h.Handovers > 0 {
		out += fmt.Sprintf(", %.1f ms CPU each", c.producerCPU(ProcHandover)/float64(h.Handovers)*1e3)
	}
	return out + fmt.Sprintf("; gateway %.1f handovers/s, gateway / yardstick ", h.GatewayPerS) + measured(h.RatioGateway > 0, "%.2f", h.RatioGateway).Text
}

// processCell is one process's CPU in a phase: seconds, cores, and
// microseconds per record committed in the phase.
func (rep *Report) processCell(phase, proc string) string {
	p := rep.CPU.Phases[phase]
	v, has := p.CPU[proc]
	if !has || p.Seconds <= 0 {
		return ""
	}
	out := fmt.Sprintf("%.1f (%.2f)", v, v/p.Seconds)
	if n := rep.phaseRecords(phase); n > 0 {
		out += fmt.Sprintf(" %.1f", v/float64(n)*1e6)
	}
	return out
}

// perRecordLine is the producing processes' CPU per record and the
// gateway's over the direct producer's, like for like and plain.
func (rep *Report) perRecordLine() string {
	c := rep.CPU
	var parts []string
	for _, phase := range reportedPhases {
		if us, ok := c.MicrosPerRecord[phase]; ok {
			parts = append(parts, fmt.Sprintf("%s %.1f us", phase, us))
		}
	}
	line := strings.Join(parts, ", ")
	line += "; gateway / direct (like for like) " + measured(c.RatioGatewayDirect > 0, "%.2f", c.RatioGatewayDirect).Text
	if c.RatioGatewayDirectPlain > 0 {
		line += fmt.Sprintf(", gateway / direct-plain %.2f", c.RatioGatewayDirectPlain)
	}
	return line
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
		{text("CPU per record of the producing process"), text(rep.perRecordLine())},
	}
	if b := rep.Bare; b != nil {
		rows = append(rows, [2]cell{text(fmt.Sprintf("bare producers (%d) records/s", b.Producers)),
			text(fmt.Sprintf("%s (direct / bare %s; %.1f CPU s per GiB)", num(b.RecordsPerS), measured(b.RatioDirectBare > 0, "%.2f", b.RatioDirectBare).Text, c.BareSecondsPerGiB))})
	}
	if h := rep.BareHandover; h != nil {
		rows = append(rows, [2]cell{text("handover yardstick"), text(h.line(c))})
	}
	for _, phase := range reportedPhases {
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
