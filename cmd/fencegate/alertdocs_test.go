package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

// runbookPath is the operator's runbook, from the repository root.
const runbookPath = "docs/RUNBOOK.md"

// alertRule is one rule of deploy/prometheus/alerts.yaml.
type alertRule struct {
	Alert string `yaml:"alert"`
	Expr  string `yaml:"expr"`
	For   string `yaml:"for"`
}

// alertRules reads the shipped rules by name.
func alertRules(t *testing.T) map[string]alertRule {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repoRoot, "deploy/prometheus/alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Groups []struct {
			Rules []alertRule `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(raw, &f); err != nil {
		t.Fatal(err)
	}
	rules := map[string]alertRule{}
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			rules[r.Alert] = r
		}
	}
	if len(rules) == 0 {
		t.Fatal("no alert rules in deploy/prometheus/alerts.yaml")
	}
	return rules
}

var (
	alertName = regexp.MustCompile(`\bFencegate[A-Z][A-Za-z]+\b`)
	// alertRow is a row of an alert table: | `Name` | severity | fires when | ...
	alertRow = regexp.MustCompile("(?m)^\\| `(Fencegate[A-Za-z]+)` \\|(.*)$")
	// exprAbove is a "> N" comparison of a rule's expression: its threshold.
	exprAbove = regexp.MustCompile(`>\s*([0-9.]+)`)
	// latencyProse is a latency threshold quoted in prose ("handover p99
	// above 2.5 s"), checked against the rule of latencyAlerts.
	latencyProse  = regexp.MustCompile(`(handover|renewal) p99 above ([0-9.]+) ?(ms|s)\b`)
	latencyAlerts = map[string]string{"handover": "FencegateHandoverSlow", "renewal": "FencegateLeaseStoreSlow"}
)

// alertDocs are the documents that name alerts.
func alertDocs(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob(filepath.Join(repoRoot, "docs/*.md"))
	if err != nil {
		t.Fatal(err)
	}
	return append(docs, filepath.Join(repoRoot, "README.md"), filepath.Join(repoRoot, "BENCHMARKS.md"),
		filepath.Join(repoRoot, "BENCHMARKS-history.md"))
}

// thresholdForms are the ways a document may write threshold n: 2.5
// ("2.5 s"), 1,000, or 0.05 as 5%.
func thresholdForms(n float64) []string {
	forms := []string{strconv.FormatFloat(n, 'f', -1, 64)}
	if n >= 1000 && n == float64(int64(n)) {
		s := strconv.FormatInt(int64(n), 10)
		forms = append(forms, s[:len(s)-3]+","+s[len(s)-3:])
	}
	if n > 0 && n < 1 {
		forms = append(forms, strconv.FormatFloat(n*100, 'f', -1, 64)+"%")
	}
	return forms
}

// TestAlertsInDocsMatchRules: every alert name the documents mention is a
// rule of deploy/prometheus/alerts.yaml, and every row of an alert table
// (the RUNBOOK's, docs/observability.md's) quotes its rule's thresholds
// and its `for` duration. The RUNBOOK named an alert that did not exist
// (FencegateMaterializerRefusedRecord) and a handover threshold of 100 ms
// where the rule says 2.5 s.
func TestAlertsInDocsMatchRules(t *testing.T) {
	t.Parallel()
	rules := alertRules(t)
	rows := 0
	for _, path := range alertDocs(t) {
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		doc := string(raw)
		for _, name := range alertName.FindAllString(doc, -1) {
			if _, ok := rules[name]; !ok {
				t.Errorf("%s names alert %s, which deploy/prometheus/alerts.yaml does not have", path, name)
			}
		}
		checkLatencyProse(t, path, doc, rules)
		for _, m := range alertRow.FindAllStringSubmatch(doc, -1) {
			r, ok := rules[m[1]]
			if !ok {
				continue // reported above
			}
			rows++
			checkAlertRow(t, path, r, m[2])
		}
	}
	runbook, err := os.ReadFile(filepath.Join(repoRoot, runbookPath))
	if err != nil {
		t.Fatal(err)
	}
	for name := range rules {
		if !strings.Contains(string(runbook), "| `"+name+"` |") {
			t.Errorf("%s's alert table lacks %s", runbookPath, name)
		}
	}
	if rows < 2*len(rules) {
		t.Errorf("%d alert table rows found, want one per rule in %s and docs/observability.md", rows, runbookPath)
	}
}

// checkAlertRow holds one table row against its rule.
func checkAlertRow(t *testing.T, path string, r alertRule, row string) {
	t.Helper()
	for _, m := range exprAbove.FindAllStringSubmatch(r.Expr, -1) {
		n, err := strconv.ParseFloat(m[1], 64)
		if err != nil || n == 0 {
			continue // "> 0": written as "one ..."
		}
		found := false
		for _, f := range thresholdForms(n) {
			found = found || strings.Contains(row, f)
		}
		if !found {
			t.Errorf("%s: %s's row does not quote its threshold %v (one of %q): %s", path, r.Alert, n, thresholdForms(n), row)
		}
	}
	if r.For != "" {
		d, err := time.ParseDuration(r.For)
		if err != nil {
			t.Fatalf("%s: for %q: %v", r.Alert, r.For, err)
		}
		if want := "for " + strconv.Itoa(int(d.Minutes())) + " minutes"; !strings.Contains(row, want) {
			t.Errorf("%s: %s's row does not say %q (for: %s): %s", path, r.Alert, want, r.For, row)
		}
	}
}

// checkLatencyProse holds every "handover p99 above N s" of doc against
// the threshold of its rule.
func checkLatencyProse(t *testing.T, path, doc string, rules map[string]alertRule) {
	t.Helper()
	for _, m := range latencyProse.FindAllStringSubmatch(doc, -1) {
		n, err := strconv.ParseFloat(m[2], 64)
		if err != nil {
			t.Fatalf("%s: %q: %v", path, m[0], err)
		}
		if m[3] == "ms" {
			n /= 1000
		}
		r := rules[latencyAlerts[m[1]]]
		want := "(none)"
		if w := exprAbove.FindStringSubmatch(r.Expr); w != nil {
			want = w[1]
		}
		if want != strconv.FormatFloat(n, 'f', -1, 64) {
			t.Errorf("%s says %q; %s fires above %s s", path, m[0], r.Alert, want)
		}
	}
}
