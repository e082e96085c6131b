package loadtest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/fencegate/fencegate/internal/netfault"
	"github.com/fencegate/fencegate/loadtest/report"
	"github.com/fencegate/fencegate/loadtest/stack"
)

// NetFaultKinds are the faults --net-fault applies: bytes dropped both
// ways with no reset (blackhole), replies dropped only (halfopen), every
// connection reset (reset), 200 ± 100 ms each way (latency), 64 KiB/s
// each way (bandwidth).
var NetFaultKinds = []string{"blackhole", "halfopen", "reset", "latency", "bandwidth"}

// NetFaultLinks are the links --net-fault-link names.
var NetFaultLinks = []string{"broker", "postgres", "all"}

// DefaultNetFaultFor is how long each fault lasts by default.
const DefaultNetFaultFor = 2 * time.Second

func (s *Scenario) validateNetFault() error {
	if s.NetFault == "" {
		return nil
	}
	s.NetFaultLink = cmp.Or(s.NetFaultLink, "all")
	s.NetFaultFor = cmp.Or(s.NetFaultFor, DefaultNetFaultFor)
	s.NetFaultEvery = cmp.Or(s.NetFaultEvery, 5*s.NetFaultFor)
	switch {
	case !slices.Contains(NetFaultKinds, s.NetFault):
		return fmt.Errorf("net_fault must be one of %v", NetFaultKinds)
	case !slices.Contains(NetFaultLinks, s.NetFaultLink):
		return fmt.Errorf("net_fault_link must be one of %v", NetFaultLinks)
	case s.NetFaultFor <= 0 || s.NetFaultEvery <= s.NetFaultFor:
		return errors.New("net_fault_every must be longer than net_fault_for")
	}
	return nil
}

// netFault is the undo-returning fault of kind on one link.
func netFault(kind string, l *netfault.Link) func() {
	switch kind {
	case "blackhole":
		return l.Blackhole(netfault.Both)
	case "halfopen":
		return l.Blackhole(netfault.Downstream)
	case "reset":
		return l.Reset()
	case "latency":
		return l.Latency(netfault.Both, 200*time.Millisecond, 100*time.Millisecond)
	}
	return l.Bandwidth(netfault.Both, 64)
}

// netFaultEntry is the net-fault scenario of the table.
func netFaultEntry() entry {
	return entry{name: "net-fault", proves: "the stack's links blackholed, half-open, reset, slowed or throttled: every round recovers (a batch acknowledged after it) and I1..I4 hold",
		flags:       []string{"--net-fault", "--net-fault-link", "--net-fault-every", "--net-fault-for"},
		on:          func(sc Scenario, _ *stack.Stack) bool { return sc.NetFault != "" },
		fault:       func(sc Scenario) string { return "network fault " + sc.NetFault },
		validate:    (*Scenario).validateNetFault,
		stackOption: stack.WithNetFaults,
		needs: func(_ Scenario, s *stack.Stack) error {
			if brokers, _ := s.NetLinks(); brokers == nil {
				return errors.New("--net-fault needs the embedded stack with its in-process gateway (no --replicas, --gateway-child or --separate-processes)")
			}
			return nil
		},
		start:   func(r *runner, p *phase) error { r.netFaults(p.faultCtx, p.faults); return nil },
		figures: func(r *runner, rep *report.Report, _ time.Time) { rep.NetFault = r.netFaultFigures() },
		report:  "net_fault"}
}

// netFaults applies the scenario's network fault every NetFaultEvery for
// NetFaultFor until ctx ends, and records when each one ended.
func (r *runner) netFaults(ctx context.Context, wg *sync.WaitGroup) {
	brokers, pg := r.stack.NetLinks()
	apply := func() func() {
		var undos []func()
		if r.sc.NetFaultLink != "postgres" {
			undos = append(undos, brokers.Each(func(l *netfault.Link) func() { return netFault(r.sc.NetFault, l) }))
		}
		if r.sc.NetFaultLink != "broker" {
			undos = append(undos, netFault(r.sc.NetFault, pg))
		}
		return func() {
			for _, u := range undos {
				u()
			}
		}
	}
	r.every(ctx, wg, r.sc.NetFaultEvery, func() {
		undo := apply()
		wait(ctx, r.sc.NetFaultFor)
		undo()
		r.st.mu.Lock()
		r.st.netFaultEnds = append(r.st.netFaultEnds, time.Now())
		r.st.mu.Unlock()
	})
}
