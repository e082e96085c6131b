package loadtest

import (
	"slices"
	"testing"
	"time"
)

// TestBrokerFaultScenarioValidates: the broker-fault settings are
// refused when they name an unknown kind or come without
// broker_fault_every, and the kinds strike in BrokerFaultKinds' order
// whatever order the scenario names them in.
func TestBrokerFaultScenarioValidates(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		set  func(*Scenario)
		ok   bool
	}{
		{"off", func(*Scenario) {}, true},
		{"every kind", func(s *Scenario) { s.BrokerFaultEvery, s.BrokerFaultRounds = time.Second, 3 }, true},
		{"two kinds", func(s *Scenario) {
			s.BrokerFaultEvery, s.BrokerFaults = time.Second, []string{"cut-off", "kill-coordinator"}
		}, true},
		{"an unknown kind", func(s *Scenario) { s.BrokerFaultEvery, s.BrokerFaults = time.Second, []string{"kill-everything"} }, false},
		{"rounds without every", func(s *Scenario) { s.BrokerFaultRounds = 1 }, false},
		{"kinds without every", func(s *Scenario) { s.BrokerFaults = []string{"cut-off"} }, false},
		{"a negative every", func(s *Scenario) { s.BrokerFaultEvery = -time.Second }, false},
	} {
		s := Defaults()
		c.set(&s)
		if err := s.Validate(); (err == nil) != c.ok {
			t.Errorf("%s: Validate() = %v, want ok %v", c.name, err, c.ok)
		}
	}
	s := Defaults()
	s.BrokerFaultEvery, s.BrokerFaults = time.Second, []string{"cut-off", "kill-coordinator"}
	var got []string
	for _, f := range s.strikes() {
		got = append(got, f.kind)
	}
	if !slices.Equal(got, []string{"kill-coordinator", "cut-off"}) {
		t.Fatalf("strikes %v, want kill-coordinator then cut-off", got)
	}
	if all := BrokerFaultKinds(); len(all) != 6 || len(Defaults().strikes()) != 6 {
		t.Fatalf("kinds %v: want the six of issue 39, all striking by default", all)
	}
}
