package report

import (
	"bytes"
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// externalRun is the report of a run against an external gateway without
// baselines or faults: the figures it could not measure are absent.
func externalRun() *Report {
	rep := &Report{Scenario: ScenarioFigures{Leases: 4, WorkersPerLease: 2, BatchSize: 10, RecordSize: 100, DurationS: 3, TTLMs: 2000,
		FreezeEveryS: 5, Clients: 1}}
	rep.Invariants.I1 = Invariant{Pass: true, Checked: 7}
	rep.Invariants.I2 = Invariant{Pass: true, Checked: 90}
	rep.Invariants.I3 = Invariant{Pass: true, Checked: 30}
	rep.Invariants.I4 = Invariant{Pass: true, Checked: 7}
	rep.Ledger = LedgerCheck{Pass: true, AckedBatches: 30}
	rep.Gateway = GatewayFigures{Records: 300, Batches: 30, Seconds: 3, Handovers: 7, SessionsAfterRun: -1, ThreadsBefore: 10, ThreadsAfter: 12}
	rep.LatencyMs.Produce = Quantiles{P50: 12.5, P99: 40, Count: 30}
	rep.Finish()
	return rep
}

// TestMarkdownSaysNotMeasured: the summary says "not measured" where the
// HTML does (a direct baseline that did not run, the sessions of an
// external gateway), "off" for a fault that is off, and no "none" after a
// count of zero errors.
func TestMarkdownSaysNotMeasured(t *testing.T) {
	t.Parallel()
	md := externalRun().Markdown()
	for _, want := range []string{
		"| records/s | 100 | not measured | not measured |",
		"| throughput relative to direct | not measured | not measured | not measured |",
		"| batch latency p50 | 12.5 ms | not measured | not measured |",
		"ratio to direct not measured",
		"freeze every 5 s, churn off, ambiguity off",
		"sessions left after the run: not measured;",
		"errors: 0\n",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("summary lacks %q:\n%s", want, md)
		}
	}
	for _, bad := range []string{"-1", "every 0s", "0.00", "errors: 0 none"} {
		if strings.Contains(md, bad) {
			t.Errorf("summary contains %q:\n%s", bad, md)
		}
	}
}

// TestInvariantTextIsTheDesignsText: the reports name and state I1..I4 as
// docs/design.md does, both from Invariants: the HTML's meaning column is
// the design's statement, and the summary names each.
func TestInvariantTextIsTheDesignsText(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../../docs/design.md")
	if err != nil {
		t.Fatal(err)
	}
	design := strings.Join(strings.Fields(string(raw)), " ")
	rep := externalRun()
	var page bytes.Buffer
	if err := rep.WriteHTML(&page); err != nil {
		t.Fatal(err)
	}
	html, md := strings.Join(strings.Fields(page.String()), " "), rep.Markdown()
	if len(Invariants) != 4 {
		t.Fatalf("%d invariants, want I1..I4", len(Invariants))
	}
	for _, inv := range Invariants {
		if want := "**" + inv.ID + " " + inv.Name + "**: " + inv.Statement; !strings.Contains(design, want) {
			t.Errorf("docs/design.md does not say %q", want)
		}
		statement := strings.ReplaceAll(inv.Statement, "'", "&#39;")
		if !strings.Contains(html, "<td class=\"l\">"+inv.ID+" "+inv.Name+"</td><td class=\"l\">"+statement+"</td>") {
			t.Errorf("the HTML does not state %s as the design does", inv.ID)
		}
		if !strings.Contains(md, "| "+inv.ID+" "+inv.Name+" |") {
			t.Errorf("the summary does not name %s %s", inv.ID, inv.Name)
		}
	}
}

// TestPartialLastSecondNotPlotted: the seconds the timeline has past the
// end of the phase (batches in flight at its end) are not plotted, so
// the throughput line does not drop at the end.
func TestPartialLastSecondNotPlotted(t *testing.T) {
	t.Parallel()
	rep := externalRun()
	rep.Timeline = []Second{{Records: 100, Batches: 10}, {Records: 100, Batches: 10}, {Records: 100, Batches: 10}, {Records: 5, Batches: 1}}
	c := rep.view().Charts[0]
	if n := len(strings.Fields(c.Series[0].Points)); n != 3 {
		t.Errorf("the throughput line has %d points, want 3 (the whole seconds of a 3 s phase)", n)
	}
}

// TestLegendColoursDistinct: within one chart, no two legend entries have
// colours of nearly the same hue (two blues read as one series).
func TestLegendColoursDistinct(t *testing.T) {
	t.Parallel()
	rep := externalRun()
	rep.Timeline = []Second{{Records: 100, Batches: 10, Handovers: 1}, {Records: 100, Batches: 10, Refused: 1}, {Records: 100, Batches: 10}}
	v := rep.view()
	for _, c := range append(v.Charts, v.Latency) {
		for i, a := range c.Legend {
			for _, b := range c.Legend[i+1:] {
				if d := hueDistance(t, a.Color, b.Color); d < 30 {
					t.Errorf("%s: legend %q (%s) and %q (%s) are %.0f degrees of hue apart", c.Title, a.Name, a.Color, b.Name, b.Color, d)
				}
			}
		}
	}
}

func hueDistance(t *testing.T, a, b string) float64 {
	d := math.Abs(hue(t, a) - hue(t, b))
	return math.Min(d, 360-d)
}

// hue of a #rrggbb colour in degrees.
func hue(t *testing.T, c string) float64 {
	var rgb [3]float64
	for i := range rgb {
		v, err := strconv.ParseUint(c[1+2*i:3+2*i], 16, 8)
		if err != nil {
			t.Fatalf("colour %q: %v", c, err)
		}
		rgb[i] = float64(v) / 255
	}
	r, g, b := rgb[0], rgb[1], rgb[2]
	hi, lo := math.Max(r, math.Max(g, b)), math.Min(r, math.Min(g, b))
	var h float64
	switch {
	case hi == lo:
		return 0
	case hi == r:
		h = math.Mod((g-b)/(hi-lo), 6)
	case hi == g:
		h = (b-r)/(hi-lo) + 2
	default:
		h = (r-g)/(hi-lo) + 4
	}
	return math.Mod(h*60+360, 360)
}

// TestRunMetadata: both reports say when the run was (UTC), which
// fencegate ran it (version and commit, "unknown" when the binary has no
// commit) and with which command line.
func TestRunMetadata(t *testing.T) {
	t.Parallel()
	rep := externalRun()
	rep.Run = NewRunInfo(time.Date(2026, 12, 1, 17, 30, 0, 0, time.FixedZone("CET", 3600)), "v1.2.3", "",
		[]string{"fencegate", "loadtest", "--embedded", "--database-url", "postgres://u:hunter2@127.0.0.1/db", "--gateway=http://a:b@127.0.0.1:1"})
	var page bytes.Buffer
	if err := rep.WriteHTML(&page); err != nil {
		t.Fatal(err)
	}
	var js bytes.Buffer
	if err := rep.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	for name, doc := range map[string]string{"summary": rep.Markdown(), "HTML": page.String(), "JSON": js.String()} {
		for _, want := range []string{"2026-12-01T16:30:00Z", "v1.2.3", "unknown", "fencegate loadtest --embedded"} {
			if !strings.Contains(doc, want) {
				t.Errorf("the %s lacks %q", name, want)
			}
		}
		if strings.Contains(doc, "hunter2") || strings.Contains(doc, "a:b@") {
			t.Errorf("the %s shows a password of the command line", name)
		}
	}
	if !regexp.MustCompile(`"run": \{\s*"date": "2026-12-01T16:30:00Z"`).Match(js.Bytes()) {
		t.Errorf("the JSON lacks the run's date in UTC: %s", js.String())
	}
}

// TestProcessFiguresSayNotMeasured: with the components as separate
// processes but no direct baseline (--direct=false), its CPU per GiB and
// the ratio to it are "not measured", not 0.0 s and 0.00.
func TestProcessFiguresSayNotMeasured(t *testing.T) {
	t.Parallel()
	rep := externalRun()
	rep.AddPhase("gateway", 3, map[string]float64{ProcGateway: 1.5, ProcBroker: 0.5}, map[string]int64{ProcGateway: 51200, ProcBroker: 10240})
	rep.Finish()
	md := rep.Markdown()
	if !strings.Contains(md, "direct producer process not measured") || strings.Contains(md, "0.00") {
		t.Errorf("summary of the processes:\n%s", md)
	}
	var page bytes.Buffer
	if err := rep.WriteHTML(&page); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(page.String(), `direct producer process CPU per GiB</th><td class="nm">not measured</td>`) {
		t.Errorf("the HTML gives the direct producer's CPU per GiB of a baseline that did not run")
	}
}
