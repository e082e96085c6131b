package report

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

func passingStatefulReport() *Report {
	rep := &Report{Scenario: ScenarioFigures{Stateful: true}}
	for _, inv := range []*Invariant{&rep.Invariants.I1, &rep.Invariants.I2, &rep.Invariants.I3, &rep.Invariants.I4} {
		*inv = Invariant{Pass: true, Checked: 1}
	}
	rep.Ledger.Pass = true
	rep.Stateful = &StatefulFigures{I6: Invariant{Pass: true, Checked: 30}, Items: ItemCounts{Leases: 2, Items: 30, Records: 30},
		Takeovers: 3, AmbiguousNotLanded: 1,
		Naive: &NaiveItems{Items: ItemCounts{Leases: 2, Items: 20, Records: 21, Gaps: 4, Duplicates: 5}, Takeovers: 2, Crashes: 1}}
	return rep
}

// TestI6DecidesAStatefulRun: a stateful run passes only with I6, and both
// reports carry the I6 table with the naive baseline's gaps and
// duplicates beside the gateway's.
func TestI6DecidesAStatefulRun(t *testing.T) {
	t.Parallel()
	rep := passingStatefulReport()
	rep.Finish()
	if !rep.Pass {
		t.Fatal("a stateful run whose invariants all hold failed")
	}
	rep.Stateful.I6 = Invariant{Checked: 30}
	rep.Stateful.I6.Fail("shard:1: gaps 1")
	rep.Finish()
	if rep.Pass {
		t.Fatal("a stateful run passed with I6 failed")
	}
	md := rep.Markdown()
	for _, want := range []string{"stateful workers: items resumed", "I6 exactly-once processing: FAIL", "| gaps | 0 | 4 |", "| duplicates | 0 | 5 |",
		"| takeovers (owner changes) | 3 | 2 |", "0 landed, 1 not landed, 0 taken over", "- shard:1: gaps 1"} {
		if !strings.Contains(md, want) {
			t.Errorf("Markdown lacks %q:\n%s", want, md)
		}
	}
	var page bytes.Buffer
	if err := rep.WriteHTML(&page); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"stateful: items resumed", "I6 exactly-once processing: <span class=\"fail\">FAIL</span>", "<td class=\"l\">gaps</td><td>0</td><td>4</td>",
		"example: shard:1: gaps 1"} {
		if !strings.Contains(page.String(), want) {
			t.Errorf("HTML lacks %q", want)
		}
	}
}

// TestStatefulTableSaysNaiveNotRun: without the naive baseline its column
// says so, never 0 gaps.
func TestStatefulTableSaysNaiveNotRun(t *testing.T) {
	t.Parallel()
	rep := passingStatefulReport()
	rep.Stateful.Naive = nil
	if md := rep.Markdown(); !strings.Contains(md, "| gaps | 0 | not run |") {
		t.Fatalf("Markdown:\n%s", md)
	}
}

// TestI6TextIsTheDesignsText: once docs/design.md states I6, it states it
// as the reports do (until then the design names no I6 and this skips).
func TestI6TextIsTheDesignsText(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../../docs/design.md")
	if err != nil {
		t.Fatal(err)
	}
	design := strings.Join(strings.Fields(string(raw)), " ")
	if want := "**" + I6Text.ID + " " + I6Text.Name + "**: " + I6Text.Statement; !strings.Contains(design, want) {
		t.Errorf("docs/design.md does not say %q", want)
	}
}
