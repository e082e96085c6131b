package loadtest

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/kafkadev"
	"github.com/fencegate/fencegate/verify"
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

// TestRatesArePerSecondOfWhatRan: a broker-fault run ends its gateway
// phase after its rounds (phase.end), long before its Duration bound; the
// report's rates are then per second of the phase that ran. Before, a
// 100 s run bounded by 15 min was reported as 900 s (records/s 0.8 for
// 730 records).
func TestRatesArePerSecondOfWhatRan(t *testing.T) {
	r := &runner{sc: Scenario{Duration: 15 * time.Minute}, st: newStats(1)}
	r.st.start = time.Now().Add(-100 * time.Second)
	r.st.endEarly()
	if got := r.phaseSeconds(); got < 99 || got > 110 {
		t.Fatalf("phase %.1f s, want the 100 s that ran", got)
	}
	full := &runner{sc: Scenario{Duration: time.Minute}, st: newStats(1)}
	if got := full.phaseSeconds(); got != 60 {
		t.Fatalf("a phase that ran its Duration: %.1f s, want 60", got)
	}
}

// TestKafkaReaderDifferencesAreNamed: offsets only one of the two readers
// read are named, each side counted; equal reads are not a difference.
func TestKafkaReaderDifferencesAreNamed(t *testing.T) {
	t.Parallel()
	kafka := []kafkadev.ToolRecord{{Offset: 0}, {Offset: 1}, {Offset: 5}}
	same := []verify.Record{{Offset: 0}, {Offset: 1}, {Offset: 5}}
	if d := offsetsDiffer(kafka, same); d != "" {
		t.Fatalf("the same offsets: %q", d)
	}
	ours := []verify.Record{{Offset: 0}, {Offset: 2}, {Offset: 3}}
	want := "2 records only Kafka's reader read (first [1 5]), 2 only fencegate's (first [2 3])"
	if d := offsetsDiffer(kafka, ours); d != want {
		t.Fatalf("got %q, want %q", d, want)
	}
	if d := offsetsDiffer(nil, same); !strings.HasPrefix(d, "0 records only Kafka's") {
		t.Fatalf("Kafka's reader read nothing: %q", d)
	}
}
