package loadtest_test

import (
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/loadtest"
	"github.com/fencegate/fencegate/loadtest/report"
)

// TestScenarioTableIsWhole: every scenario of the table has a unique
// name, says what it proves, names the flags that switch it on, and a
// report key that is a member of the report's JSON; every section of the
// report's own table (report.Sections) is one scenario's. So the table,
// the CLI and the report cannot name different things.
func TestScenarioTableIsWhole(t *testing.T) {
	t.Parallel()
	keys := map[string]bool{}
	rt := reflect.TypeFor[report.Report]()
	for i := range rt.NumField() {
		name, _, _ := strings.Cut(rt.Field(i).Tag.Get("json"), ",")
		keys[name] = true
	}
	seen := map[string]bool{}
	named := map[string]int{} // report key -> the scenarios naming it
	table := loadtest.ScenarioTable()
	if len(table) < 10 {
		t.Fatalf("only %d scenarios in the table", len(table))
	}
	for _, e := range table {
		switch {
		case e.Name == "" || seen[e.Name]:
			t.Errorf("scenario %q: no name, or a name twice", e.Name)
		case e.Proves == "":
			t.Errorf("scenario %s says nothing of what it proves", e.Name)
		case len(e.Flags) == 0:
			t.Errorf("scenario %s names no flag that switches it on", e.Name)
		case e.Report != "" && !keys[e.Report]:
			t.Errorf("scenario %s: report key %q is not a member of report.Report's JSON", e.Name, e.Report)
		}
		seen[e.Name] = true
		named[e.Report]++
	}
	for _, key := range report.Sections() {
		if named[key] != 1 {
			t.Errorf("the report's section %q is named by %d scenarios of the table, want 1", key, named[key])
		}
	}
}

// TestScenarioReplicasAndOptionsComeFromTheTable: a replica fault asks
// for two replicas, a scenario without one for none, and the network
// fault and the mixed fleet each bring their stack option.
func TestScenarioReplicasAndOptionsComeFromTheTable(t *testing.T) {
	t.Parallel()
	sc := loadtest.Defaults()
	if n := sc.Replicas(); n != 0 {
		t.Fatalf("the default scenario needs %d replicas, want 0", n)
	}
	if n := len(sc.StackOptions()); n != 0 {
		t.Fatalf("the default scenario brings %d stack options, want 0", n)
	}
	for _, set := range []func(*loadtest.Scenario){
		func(s *loadtest.Scenario) { s.FreezeReplicaEvery = time.Second },
		func(s *loadtest.Scenario) { s.DrainReplicaAfter = time.Second },
		func(s *loadtest.Scenario) { s.KillReplicaEvery = time.Second },
		func(s *loadtest.Scenario) { s.RollingRestart = true },
	} {
		s := loadtest.Defaults()
		set(&s)
		if n := s.Replicas(); n != 2 {
			t.Errorf("a replica fault needs %d replicas, want 2", n)
		}
	}
	sc.NetFault, sc.MixedFleet = "reset", true
	if n := len(sc.StackOptions()); n != 2 {
		t.Fatalf("net fault and mixed fleet bring %d stack options, want 2", n)
	}
}

// sharedRooms are the scenarios whose code has no file of its own: the
// worker's own faults live in the table (scenarios.go) and the worker,
// the gateway's process faults share replicafault.go.
var sharedRooms = map[string]string{
	"freeze": "scenarios.go", "churn": "scenarios.go", "ambiguity": "scenarios.go",
	"gateway-kill": "replicafault.go", "replica-freeze": "replicafault.go", "replica-drain": "replicafault.go",
	"replica-kill": "replicafault.go", "rolling-restart": "replicafault.go",
}

// TestScenarioRoomsAreNamedAfterTheTable: every scenario's code is in the
// file named after its entry (the name without hyphens, its checks in
// <name>check.go next to it), or in the one shared room sharedRooms
// names, so a reader finds a scenario from the table.
func TestScenarioRoomsAreNamedAfterTheTable(t *testing.T) {
	t.Parallel()
	for _, e := range loadtest.ScenarioTable() {
		room, ok := sharedRooms[e.Name]
		if !ok {
			room = strings.ReplaceAll(e.Name, "-", "") + ".go"
		}
		raw, err := os.ReadFile(room)
		if err != nil {
			t.Errorf("scenario %s: its room %s: %v", e.Name, room, err)
			continue
		}
		if !strings.Contains(string(raw), `name: "`+e.Name+`"`) {
			t.Errorf("scenario %s: its entry is not in its room %s", e.Name, room)
		}
	}
}
