package report

import (
	"fmt"
	"html/template"
	"io"
	"math"
	"strconv"
	"strings"
)

// The HTML report answers what a reader asks, in that order: did the run
// pass and what ran; the invariants, one row each; the gateway beside its
// baselines; latencies of batches, handovers and renewals; the run over
// time with handovers and refusals marked. A figure that was not measured
// says "not measured": a -1, a 0 or a blank cell would read as a result.

const notMeasured = "not measured"

// Chart geometry: the plot area inside the SVG, leaving room for the axes'
// tick labels and titles.
const (
	chartW, chartH      = 900, 260
	plotLeft, plotRight = 70.0, 880.0
	plotTop, plotBottom = 16.0, 210.0
)

// Colours of the charts' series and marks. Within one chart no two are of
// nearly the same hue (TestLegendColoursDistinct): the p50 line beside the
// blue handover marks is teal, not a second blue.
const (
	markHandover, markFail = "#5b6ee1", "#d43a3a"
	colorRecords           = "#2a9d5b"
	colorP50, colorP99     = "#1b9e8a", "#bf2a7f"
	colorFenced            = "#e08a1e"
)

// chart is one SVG chart with axes: a line chart over the run's seconds, or
// grouped bars.
type chart struct {
	Title, YLabel, XLabel string
	Width, Height         int
	Left, Right           float64
	Top, Bottom           float64
	TickEnd               float64 // lower end of the x-axis tick marks
	XTicks, YTicks        []tick
	Series                []series
	Bars                  []bar
	Gaps                  []gap
	Marks                 []mark
	Legend                []legend
	Empty                 string
}

type tick struct {
	Pos   float64
	Label string
}

type series struct {
	Color, Points string
}

type bar struct {
	X, Y, W, H float64
	Color      string
	Title      string
	Label      string
}

// gap is a bar chart slot whose figure was not measured.
type gap struct {
	X     float64
	Label string
}

type mark struct {
	X     float64
	Color string
	Title string
}

type legend struct {
	X     float64
	Color string
	Name  string
}

// niceScale returns an axis maximum and step of 1, 2 or 5 times a power of
// ten, with at most five steps, so that tick labels are round numbers.
func niceScale(maxV float64) (top, step float64) {
	if maxV <= 0 || math.IsNaN(maxV) {
		return 1, 0.25
	}
	raw := maxV / 5
	pow := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		step = m * pow
		if step >= raw {
			break
		}
	}
	return math.Ceil(maxV/step) * step, step
}

func num(v float64) string {
	if v == math.Trunc(v) {
		return thousands(int64(v))
	}
	if v >= 10 {
		return thousands(int64(math.Round(v)))
	}
	return strconv.FormatFloat(v, 'f', 1, 64)
}

// thousands formats n with thin separators: 1,929,902.
func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

func newChart(title, ylabel, xlabel string) chart {
	return chart{Title: title, YLabel: ylabel, XLabel: xlabel, Width: chartW, Height: chartH,
		Left: plotLeft, Right: plotRight, Top: plotTop, Bottom: plotBottom, TickEnd: plotBottom + 5}
}

func (c *chart) yAxis(maxV float64) func(float64) float64 {
	top, step := niceScale(maxV)
	for v := 0.0; v <= top+step/2; v += step {
		c.YTicks = append(c.YTicks, tick{Pos: c.Bottom - v/top*(c.Bottom-c.Top), Label: num(v)})
	}
	return func(v float64) float64 { return c.Bottom - v/top*(c.Bottom-c.Top) }
}

// lineSeries is one line of a timeline chart; ok says whether second s
// has a value (a second without batches has no latency, not a latency of 0).
type lineSeries struct {
	name  string
	color string
	value func(Second) (float64, bool)
}

// timelineChart draws lines over the run's seconds, with handovers (blue)
// and fences or refused stale writes (red) marked when marked is set (not
// in a chart whose lines are those events).
func timelineChart(title, ylabel string, tl []Second, marked bool, lines []lineSeries) chart {
	c := newChart(title, ylabel, "seconds since the start of the gateway phase")
	if len(tl) == 0 {
		c.Empty = notMeasured + " (no timeline)"
		return c
	}
	maxV := 0.0
	for _, l := range lines {
		for _, s := range tl {
			if v, ok := l.value(s); ok {
				maxV = max(maxV, v)
			}
		}
	}
	y := c.yAxis(maxV)
	n := max(len(tl)-1, 1)
	x := func(i int) float64 { return c.Left + float64(i)/float64(n)*(c.Right-c.Left) }
	_, xstep := niceScale(float64(n))
	xstep = max(xstep, 1)
	for v := 0.0; v <= float64(n); v += xstep {
		c.XTicks = append(c.XTicks, tick{Pos: x(int(v)), Label: num(v)})
	}
	for i, s := range tl {
		if !marked {
			break
		}
		if s.Handovers > 0 {
			c.Marks = append(c.Marks, mark{X: x(i), Color: markHandover, Title: fmt.Sprintf("%d s: %d handovers", i, s.Handovers)})
		}
		if s.Fences > 0 || s.Refused > 0 {
			c.Marks = append(c.Marks, mark{X: x(i), Color: markFail, Title: fmt.Sprintf("%d s: %d producers fenced, %d stale writes refused", i, s.Fences, s.Refused)})
		}
	}
	lx := c.Left
	for _, l := range lines {
		var pts []string
		for i, s := range tl {
			if v, ok := l.value(s); ok {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(i), y(v)))
			}
		}
		c.Series = append(c.Series, series{Color: l.color, Points: strings.Join(pts, " ")})
		c.Legend = append(c.Legend, legend{X: lx, Color: l.color, Name: l.name})
		lx += 20 + 7*float64(len(l.name)+4)
	}
	if marked {
		c.Legend = append(c.Legend, legend{X: lx, Color: markHandover, Name: "| handover"},
			legend{X: lx + 110, Color: markFail, Name: "| fenced or stale refused"})
	}
	return c
}

// latencyChart draws p50 and p99 bars for batches, handovers and
// renewals; a kind with no samples says it was not measured.
func latencyChart(rep *Report) chart {
	c := newChart("Latency: p50 and p99 by operation", "milliseconds", "")
	kinds := []struct {
		name string
		q    Quantiles
	}{{"batch (produce)", rep.LatencyMs.Produce}, {"handover (acquire)", rep.LatencyMs.Handover}, {"renew", rep.LatencyMs.Renew}}
	maxV := 0.0
	for _, k := range kinds {
		if k.q.Count > 0 {
			maxV = max(maxV, k.q.P99)
		}
	}
	y := c.yAxis(maxV)
	slot := (c.Right - c.Left) / float64(len(kinds))
	for i, k := range kinds {
		mid := c.Left + slot*(float64(i)+0.5)
		c.XTicks = append(c.XTicks, tick{Pos: mid, Label: fmt.Sprintf("%s, %s samples", k.name, thousands(int64(k.q.Count)))})
		if k.q.Count == 0 {
			c.Gaps = append(c.Gaps, gap{X: mid, Label: notMeasured})
			continue
		}
		for j, p := range []struct {
			name  string
			v     float64
			color string
		}{{"p50", k.q.P50, colorP50}, {"p99", k.q.P99, colorP99}} {
			bx := mid - 70 + float64(j)*72
			c.Bars = append(c.Bars, bar{X: bx, Y: y(p.v), W: 68, H: c.Bottom - y(p.v), Color: p.color,
				Title: fmt.Sprintf("%s %s: %.1f ms", k.name, p.name, p.v), Label: fmt.Sprintf("%s %.1f", p.name, p.v)})
		}
	}
	c.Legend = []legend{{X: c.Left, Color: colorP50, Name: "p50"}, {X: c.Left + 60, Color: colorP99, Name: "p99"}}
	return c
}

// cell is one table cell: its text and whether it is a pass/fail verdict.
type cell struct {
	Text  string
	Class string
}

func text(s string) cell { return cell{Text: s} }

func verdict(ok bool) cell {
	if ok {
		return cell{Text: "pass", Class: "pass"}
	}
	return cell{Text: "FAIL", Class: "fail"}
}

// measured formats v when ok, and says "not measured" otherwise.
func measured(ok bool, format string, v ...any) cell {
	if !ok {
		return cell{Text: notMeasured, Class: "nm"}
	}
	return text(fmt.Sprintf(format, v...))
}

// every says how often a fault was injected: "off" when it was not.
func every(sec float64) cell {
	if sec <= 0 {
		return text("off")
	}
	return text(fmt.Sprintf("every %s s", num(sec)))
}

type invariantRow struct {
	Name, Means string
	Inv         Invariant
}

// view is what the template renders.
type view struct {
	Pass       cell
	Failures   []string
	Run        [][2]cell
	Scenario   [][2]cell
	Invariants []invariantRow
	Ledger     LedgerCheck
	// LedgerExtra is the ledger's extra batches and why they are there.
	LedgerExtra string
	Baselines   [][]cell
	Gateway     [][2]cell
	Charts      []chart
	Latency     chart
	Mixed       *MixedFigures
	Stateful    *statefulView
}

// statefulView is the I6 section of a --stateful run.
type statefulView struct {
	Verdict cell
	I6      Invariant
	Rows    [][3]string
}

func (rep *Report) view() view {
	s := rep.Scenario
	rate := text(s.pacing())
	v := view{Pass: verdict(rep.Pass), Failures: rep.Failures, Run: rep.Run.cells(), Mixed: rep.Mixed}
	v.Scenario = [][2]cell{
		{text("leases x workers per lease"), text(fmt.Sprintf("%d x %d", s.Leases, s.WorkersPerLease))},
		{text("batch"), text(fmt.Sprintf("%d records of %d B", s.BatchSize, s.RecordSize))},
		{text("rate"), rate},
		{text("gateway phase"), text(fmt.Sprintf("%s s", num(s.DurationS)))},
		{text("lease TTL"), text(fmt.Sprintf("%d ms", s.TTLMs))},
		{text("freeze a holder past its TTL"), every(s.FreezeEveryS)},
		{text("forced handover (churn)"), every(s.ChurnEveryS)},
		{text("ambiguous commit (EndTxn held)"), every(s.AmbiguityEveryS)},
	}
	if s.Stateful {
		v.Scenario = append(v.Scenario, [2]cell{text("workers"), text("stateful: items resumed from the lease's checkpoint")})
	}
	v.Invariants = rep.invariantRows()
	v.Ledger, v.LedgerExtra = rep.Ledger, rep.Ledger.extraText()
	if f := rep.Stateful; f != nil {
		v.Stateful = &statefulView{Verdict: verdict(f.I6.Pass), I6: f.I6, Rows: f.stateRows()}
	}

	v.Baselines = rep.baselineRows()
	g := rep.Gateway
	v.Gateway = [][2]cell{
		{text("batches committed"), text(thousands(g.Batches))},
		{text("handovers"), text(thousands(g.Handovers))},
		{text("producers fenced"), text(thousands(g.Fenced))},
		{text("stale writes attempted by frozen workers"), text(thousands(g.StaleAttempts))},
		{text("... refused"), text(thousands(g.StaleRefused))},
		{text("... accepted"), verdictCount(g.StaleAccepted)},
		{text("errors seen by workers"), text(thousands(g.Errors) + rep.errorsWhy())},
		{text("sessions left after the run"), rep.sessionsLeft()},
		{text("process threads before / after"), rep.threads("%d / %d")},
	}
	v.Gateway = append(v.Gateway, [2]cell{text("cold start"), text(rep.firstBatches())})
	v.Gateway = append(v.Gateway, rep.processCells()...)
	v.Gateway = append(v.Gateway, rep.fleetCells()...)
	tl := wholeSeconds(rep.Timeline, rep.Scenario.DurationS)
	always := func(f func(Second) float64) func(Second) (float64, bool) {
		return func(s Second) (float64, bool) { return f(s), true }
	}
	withBatches := func(f func(Second) float64) func(Second) (float64, bool) {
		return func(s Second) (float64, bool) { return f(s), s.Batches > 0 }
	}
	v.Charts = []chart{
		timelineChart("Throughput", "records per second", tl, true, []lineSeries{
			{"committed records/s", colorRecords, always(func(s Second) float64 { return float64(s.Records) })}}),
		timelineChart("Batch latency", "milliseconds", tl, true, []lineSeries{
			{"p50", colorP50, withBatches(func(s Second) float64 { return s.P50Ms })},
			{"p99", colorP99, withBatches(func(s Second) float64 { return s.P99Ms })}}),
		timelineChart("Handovers, fences and refused stale writes", "events per second", tl, false, []lineSeries{
			{"handovers", markHandover, always(func(s Second) float64 { return float64(s.Handovers) })},
			{"producers fenced", colorFenced, always(func(s Second) float64 { return float64(s.Fences) })},
			{"stale writes refused", markFail, always(func(s Second) float64 { return float64(s.Refused) })}}),
	}
	v.Latency = latencyChart(rep)
	return v
}

// baselineRows are the table of the gateway beside its baselines, in
// both reports: a baseline that did not run is "not measured", never a 0.
func (rep *Report) baselineRows() [][]cell {
	g, d, n := rep.Gateway, rep.Direct, rep.Naive
	direct := d.Seconds > 0
	naive := n.Records > 0
	rows := [][]cell{
		{text("records written"), text(thousands(g.Records)), measured(direct, "%s", thousands(d.Records)), measured(naive, "%s", thousands(n.Records))},
		{text("records/s"), text(num(rep.Throughput.GatewayRecordsPerS)), measured(direct, "%s", num(rep.Throughput.DirectRecordsPerS)), text(notMeasured)},
		{text("throughput relative to direct"), measured(direct, "%.2f", rep.Throughput.RatioGatewayDirect), measured(direct, "1.00"), text(notMeasured)},
		{text("batch latency p50"), measured(rep.LatencyMs.Produce.Count > 0, "%.1f ms", rep.LatencyMs.Produce.P50), measured(direct && d.P50Ms > 0, "%.1f ms", d.P50Ms), text(notMeasured)},
		{text("batch latency p99"), measured(rep.LatencyMs.Produce.Count > 0, "%.1f ms", rep.LatencyMs.Produce.P99), measured(direct && d.P99Ms > 0, "%.1f ms", d.P99Ms), text(notMeasured)},
		{text("stale records accepted"), verdictCount(g.StaleAccepted), text("no stale writers"), measured(naive, "%s", thousands(n.StaleAccepted))},
	}
	for _, row := range rows {
		for i := range row {
			if row[i].Text == notMeasured {
				row[i].Class = "nm"
			}
		}
	}
	return rows
}

// wholeSeconds are the seconds of the timeline that lie wholly inside a
// gateway phase of durationS: a second the phase ends in, or one after it
// (batches in flight at the end, answered later), holds a fraction of a
// second's load and would plot as a drop (durationS 0: all of tl).
func wholeSeconds(tl []Second, durationS float64) []Second {
	if durationS <= 0 {
		return tl
	}
	return tl[:min(len(tl), int(math.Floor(durationS)))]
}

// verdictCount shows a count that must be zero, marked pass or fail.
func verdictCount(n int64) cell {
	c := verdict(n == 0)
	c.Text = thousands(n)
	return c
}

var page = template.Must(template.New("report").Funcs(template.FuncMap{
	"n":              func(v int) string { return thousands(int64(v)) },
	"mixedStatement": mixedStatement,
	"i6Statement":    func() string { return I6Text.Statement },
}).Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>fencegate loadtest report</title>
<style>
body{font-family:"DejaVu Sans",Helvetica,Arial,sans-serif;max-width:960px;margin:2em auto;color:#222;line-height:1.4}
h1{margin-bottom:.2em}h2{margin-top:1.6em;border-bottom:1px solid #ddd;padding-bottom:.2em}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:4px 10px;text-align:right;vertical-align:top}
th{background:#f3f3f3}td.l,th.l{text-align:left}.pass{color:#0a7a2a;font-weight:bold}.fail{color:#b00;font-weight:bold}
.nm{color:#888;font-style:italic}svg{background:#fcfcfc;border:1px solid #ddd;margin:.3em 0 1em}
.axis{font-size:11px;fill:#444}.title{font-size:12px;fill:#222}p.note{color:#555;font-size:90%}
</style></head><body>
<h1>fencegate loadtest: <span class="{{.Pass.Class}}">{{.Pass.Text}}</span></h1>
<p class="note">Pass: every invariant and the ledger check hold and each checked something, the gateway accepted no stale record, no session outlived the run, and every worker error, extra ledger batch and network fault round is explained.</p>
{{if .Failures}}<ul>{{range .Failures}}<li class="fail">{{.}}</li>{{end}}</ul>{{end}}

<h2>Run</h2>
<table>{{range .Run}}<tr><th class="l">{{(index . 0).Text}}</th><td class="l">{{(index . 1).Text}}</td></tr>{{end}}</table>

<h2>Scenario</h2>
<table>{{range .Scenario}}<tr><th class="l">{{(index . 0).Text}}</th><td class="l">{{(index . 1).Text}}</td></tr>{{end}}</table>

{{with .Mixed}}<h2>Mixed fleet on {{.Pattern}}</h2>
<p class="note">{{.DirectWorkers}} direct workers (old binaries: leases through the API, their own producer; one freezes past its TTL at gate and wakes after enforce) beside the gateway workers; {{printf "%.1f" .StateSeconds}} s per state.</p>
<table><tr><th class="l">check</th><th class="l">meaning</th><th>result</th><th>checked</th><th>violations</th></tr>
{{range .Checks}}<tr><td class="l">{{.ID}}</td><td class="l">{{mixedStatement .ID}}</td><td class="{{if .Pass}}pass{{else}}fail{{end}}">{{if .Pass}}pass{{else}}FAIL{{end}}</td><td>{{n .Checked}}</td><td>{{n .Violations}}</td></tr>
{{range .Examples}}<tr><td class="l fail" colspan="5">example: {{.}}</td></tr>{{end}}{{end}}</table>
<table><tr><th class="l">state</th><th>from s</th><th>to s</th><th>direct grants / renewals</th><th>fenced grants / renewals</th><th>direct records</th><th>kept</th><th>refused</th><th>acked batches</th><th>in ledger once</th></tr>
{{range .States}}<tr><td class="l">{{.State}}</td><td>{{printf "%.2f" .FromS}}</td><td>{{printf "%.2f" .ToS}}</td><td>{{.DirectGrants}} / {{.DirectRenewals}}</td><td>{{.FencedGrants}} / {{.FencedRenewals}}</td><td>{{.DirectRecords}}</td><td>{{.DirectKept}}</td><td>{{.DirectRefused}}</td><td>{{.AckedBatches}}</td><td>{{.AckedInLedger}}</td></tr>{{end}}</table>
<p>gate to the last direct lease lapsing: {{printf "%.2f" .GateToLastLapseS}} s; the frozen worker's late records: {{.LateWrites}}. ACL step: plan {{.ACL.Plan}}, {{.ACL.Deleted}} bindings deleted, the direct principal's next write: {{.ACL.NextWrite}} {{.ACL.Error}}</p>
<h3>What the operator saw (admin API)</h3>
<table><tr><th>asked s</th><th>answered s</th><th class="l">call</th><th>status</th><th class="l">answer</th></tr>
{{range .Steps}}<tr><td>{{printf "%.2f" .AskedS}}</td><td>{{printf "%.2f" .AnsweredS}}</td><td class="l">{{.Method}} {{.State}}</td><td>{{.Status}}</td><td class="l"><code>{{printf "%s" .Answer}}</code></td></tr>{{end}}</table>
{{end}}
<h2>Invariants</h2>
<table><tr><th class="l">invariant</th><th class="l">meaning</th><th>result</th><th>checked</th><th>violations</th></tr>
{{range .Invariants}}<tr><td class="l">{{.Name}}</td><td class="l">{{.Means}}</td><td class="{{if .Inv.Pass}}pass{{else}}fail{{end}}">{{if .Inv.Pass}}pass{{else}}FAIL{{end}}</td><td>{{n .Inv.Checked}}</td><td>{{n .Inv.Violations}}</td></tr>
{{range .Inv.Examples}}<tr><td class="l fail" colspan="5">example: {{.}}</td></tr>{{end}}{{end}}
{{if .Ledger.NotChecked}}<tr><td class="l">ledger = acknowledged batches</td><td class="l">no materializer ran: no ledger to compare</td><td class="nm">not measured</td><td></td><td></td></tr>
{{else}}<tr><td class="l">ledger = acknowledged batches</td><td class="l">the materializer's ledger holds each acknowledged batch once (missing {{.Ledger.Missing}}, duplicated {{.Ledger.Duplicated}}, {{.LedgerExtra}})</td><td class="{{if .Ledger.Pass}}pass{{else}}fail{{end}}">{{if .Ledger.Pass}}pass{{else}}FAIL{{end}}</td><td>{{n .Ledger.AckedBatches}}</td><td>{{n .Ledger.Missing}}</td></tr>{{end}}
</table>
{{with .Stateful}}
<h2>Stateful workers: I6 exactly-once processing: <span class="{{.Verdict.Class}}">{{.Verdict.Text}}</span></h2>
<p class="note">{{i6Statement}} Gateway workers resume from the lease's checkpoint, carried in the batch's own transaction; naive workers keep their resume point apart from their writes.</p>
<table><tr><th class="l">stateful</th><th>gateway (checkpoint in the batch)</th><th>naive (resume point apart)</th></tr>
{{range .Rows}}<tr><td class="l">{{index . 0}}</td><td>{{index . 1}}</td><td>{{index . 2}}</td></tr>{{end}}
{{range .I6.Examples}}<tr><td class="l fail" colspan="3">example: {{.}}</td></tr>{{end}}</table>
{{end}}
<h2>Gateway beside its baselines</h2>
<p class="note">direct: one producer per lease straight to Kafka, no fencing (the throughput ceiling). naive: the same with stale writers, no fencing (what fencing prevents).</p>
<table><tr><th class="l"></th><th>gateway</th><th>direct</th><th>naive</th></tr>
{{range .Baselines}}<tr>{{range $i, $c := .}}<td class="{{if eq $i 0}}l {{end}}{{$c.Class}}">{{$c.Text}}</td>{{end}}</tr>{{end}}</table>

<h2>Gateway phase</h2>
<table>{{range .Gateway}}<tr><th class="l">{{(index . 0).Text}}</th><td class="{{(index . 1).Class}}">{{(index . 1).Text}}</td></tr>{{end}}</table>

<h2 id="latency">Latency</h2>
{{template "chart" .Latency}}
<h2 id="time">The run over time</h2>
{{range .Charts}}{{template "chart" .}}{{end}}
</body></html>
{{define "chart"}}<h3>{{.Title}}</h3>
<svg width="{{.Width}}" height="{{.Height}}" viewBox="0 0 {{.Width}} {{.Height}}" xmlns="http://www.w3.org/2000/svg" role="img" aria-label="{{.Title}}">
{{if .Empty}}<text x="{{.Width}}" y="120" class="title" transform="translate(-450,0)" font-style="italic">{{.Empty}}</text>{{else}}
{{range .YTicks}}<line x1="{{$.Left}}" x2="{{$.Right}}" y1="{{.Pos}}" y2="{{.Pos}}" stroke="#e6e6e6"/><text x="{{$.Left}}" y="{{.Pos}}" dx="-6" dy="4" text-anchor="end" class="axis">{{.Label}}</text>
{{end}}<line x1="{{.Left}}" x2="{{.Left}}" y1="{{.Top}}" y2="{{.Bottom}}" stroke="#444"/><line x1="{{.Left}}" x2="{{.Right}}" y1="{{.Bottom}}" y2="{{.Bottom}}" stroke="#444"/>
{{range .XTicks}}<line x1="{{.Pos}}" x2="{{.Pos}}" y1="{{$.Bottom}}" y2="{{$.TickEnd}}" stroke="#444"/><text x="{{.Pos}}" y="{{$.Bottom}}" dy="15" text-anchor="middle" class="axis">{{.Label}}</text>
{{end}}<text transform="translate(16,{{.Bottom}}) rotate(-90)" class="axis">{{.YLabel}}</text>
{{if .XLabel}}<text x="{{.Right}}" y="{{.Bottom}}" dy="30" text-anchor="end" class="axis">{{.XLabel}}</text>{{end}}
{{range .Marks}}<line x1="{{.X}}" x2="{{.X}}" y1="{{$.Top}}" y2="{{$.Bottom}}" stroke="{{.Color}}" stroke-opacity="0.45" stroke-width="1"><title>{{.Title}}</title></line>
{{end}}{{range .Series}}<polyline fill="none" stroke="{{.Color}}" stroke-width="2" points="{{.Points}}"/>
{{end}}{{range .Bars}}<rect x="{{.X}}" y="{{.Y}}" width="{{.W}}" height="{{.H}}" fill="{{.Color}}"><title>{{.Title}}</title></rect><text x="{{.X}}" y="{{.Y}}" dx="34" dy="-4" text-anchor="middle" class="axis">{{.Label}}</text>
{{end}}{{range .Gaps}}<text x="{{.X}}" y="{{$.Bottom}}" dy="-60" text-anchor="middle" class="axis" font-style="italic">{{.Label}}</text>
{{end}}{{range .Legend}}<rect x="{{.X}}" y="{{$.Height}}" width="12" height="4" transform="translate(0,-12)" fill="{{.Color}}"/><text x="{{.X}}" y="{{$.Height}}" dx="16" dy="-8" class="axis">{{.Name}}</text>
{{end}}{{end}}</svg>{{end}}`))

// WriteHTML writes a self-contained page: verdict, scenario, invariants and
// baselines as tables, latency bars, and the run over time with handovers
// and refusals marked.
func (rep *Report) WriteHTML(w io.Writer) error {
	return page.Execute(w, rep.view())
}
