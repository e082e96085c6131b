package main

import (
	"strings"
	"testing"

	"github.com/fencegate/fencegate/loadtest"
)

// TestScenarioTableNamesLoadtestFlags: every flag the harness's scenario
// table names is a flag `fencegate loadtest -h` prints, so the table and
// the CLI cannot drift apart.
func TestScenarioTableNamesLoadtestFlags(t *testing.T) {
	t.Parallel()
	_, entries := renderUsage(t, "loadtest")
	flags := map[string]bool{}
	for _, e := range entries {
		flags[e.name] = true
	}
	checked := 0
	for _, sc := range loadtest.ScenarioTable() {
		for _, f := range sc.Flags {
			checked++
			if !flags[strings.TrimPrefix(f, "--")] {
				t.Errorf("scenario %s names %s, which fencegate loadtest does not register", sc.Name, f)
			}
		}
	}
	if checked == 0 {
		t.Fatal("the scenario table names no flag")
	}
}
