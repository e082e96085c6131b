package report

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
)

// TestHTMLReportSaysNotMeasured: a run without baselines, renewals or
// session counts (an external gateway) renders "not measured" in those
// cells, never -1, 0 or a blank cell; the invariants are a table with
// their examples; every chart has axes with labels.
func TestHTMLReportSaysNotMeasured(t *testing.T) {
	t.Parallel()
	rep := &Report{Scenario: ScenarioFigures{Leases: 4, WorkersPerLease: 2, BatchSize: 10, RecordSize: 100, DurationS: 3, TTLMs: 2000}}
	rep.Invariants.I1 = Invariant{Pass: true, Checked: 7}
	rep.Invariants.I2 = Invariant{Pass: false, Checked: 90, Violations: 1, Examples: []string{"shard:1 token 3 after barrier 4 at offset 17"}}
	rep.Invariants.I3 = Invariant{Pass: true, Checked: 30}
	rep.Invariants.I4 = Invariant{Pass: true, Checked: 7}
	rep.Ledger = LedgerCheck{Pass: true, AckedBatches: 30}
	rep.Gateway = GatewayFigures{Records: 300, Batches: 30, Seconds: 3, Handovers: 7, SessionsAfterRun: -1}
	rep.LatencyMs.Produce = Quantiles{P50: 12.5, P99: 40, Count: 30}
	rep.LatencyMs.Handover = Quantiles{P50: 30, P99: 90, Count: 7}
	rep.Timeline = []Second{{Records: 100, Batches: 10, P50Ms: 12, P99Ms: 40, Handovers: 4},
		{Records: 0, Batches: 0}, {Records: 200, Batches: 20, P50Ms: 13, P99Ms: 35, Handovers: 3, Refused: 1}}
	rep.Finish()
	var b bytes.Buffer
	if err := rep.WriteHTML(&b); err != nil {
		t.Fatal(err)
	}
	page := b.String()

	for _, want := range []string{
		`<td class="nm">not measured</td>`, // direct and naive baselines, sessions, threads
		"renew, 0 samples",                 // the latency chart's renew slot
		">FAIL<",                           // I2 and the overall verdict
		"example: shard:1 token 3 after barrier 4 at offset 17",
		"I2 no stale write",
		"seconds since the start of the gateway phase", // x-axis title
		"records per second", "milliseconds",           // y-axis titles
		"<polyline", "<rect",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	if n := strings.Count(page, notMeasured); n < 8 {
		t.Errorf("%d cells say %q, want at least 8 (direct x5, naive x4, renew, sessions, threads)", n, notMeasured)
	}
	for _, bad := range []*regexp.Regexp{
		regexp.MustCompile(`<td[^>]*>\s*</td>`),   // a blank cell
		regexp.MustCompile(`<td[^>]*>-1[^0-9]`),   // -1 standing for "unknown"
		regexp.MustCompile(`>\s*(NaN|Inf)\s*<`),   // a division by zero shown
		regexp.MustCompile(`points="[^"]*NaN`),    // a broken line
		regexp.MustCompile(`<td[^>]*>0\.00</td>`), // a ratio to a baseline that did not run
	} {
		if m := bad.FindString(page); m != "" {
			t.Errorf("report contains %q", m)
		}
	}
	// A second without batches has no latency: the latency lines skip it
	// rather than drop to 0 ms.
	lines := regexp.MustCompile(`<polyline[^>]*points="([^"]*)"`).FindAllStringSubmatch(page, -1)
	if len(lines) != 6 {
		t.Fatalf("%d lines, want 6 (throughput; p50, p99; handovers, fences, refusals)", len(lines))
	}
	if n := len(strings.Fields(lines[0][1])); n != 3 {
		t.Errorf("throughput line has %d points, want 3 (one per second)", n)
	}
	if n := len(strings.Fields(lines[1][1])); n != 2 {
		t.Errorf("p50 line has %d points, want 2 (the second without batches skipped)", n)
	}
}
