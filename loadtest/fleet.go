package loadtest

import (
	"time"

	"github.com/fencegate/fencegate/loadtest/report"
	"github.com/fencegate/fencegate/loadtest/stack"
)

// addGatewayPhase records the gateway phase's usage u (nil: not sampled)
// in rep, and the fleet's figures from it.
func (r *runner) addGatewayPhase(rep *report.Report, u *stack.Usage) {
	addPhase(rep, "gateway", u)
	if u != nil && len(r.stack.Children()) > 0 {
		rep.Fleet = r.fleet(rep, u)
	}
}

// window is a stretch of the gateway phase.
type window struct{ from, to time.Time }

// windows are the cold start (until every lease wrote; the whole phase
// if some never did) and the steady state (from every lease granted once
// to the end; zero if never).
func (r *runner) windows(u *stack.Usage) (cold, steady window) {
	st := r.st
	st.mu.Lock()
	defer st.mu.Unlock()
	end := st.start.Add(time.Duration(u.Seconds * float64(time.Second)))
	if n := len(u.Series); n > 0 {
		end = u.Series[n-1].At
	}
	cold = window{st.start, end}
	if !st.allBatchedAt.IsZero() {
		cold.to = st.allBatchedAt
	}
	if !st.steadyAt.IsZero() && !r.sc.ColdStart { // a cold-start run ends as it reaches the steady state
		steady = window{st.steadyAt, end}
	}
	return cold, steady
}

// fleet computes the figures by replica, the broker's CPU and the cost of
// a lease from the sampled usage u.
func (r *runner) fleet(rep *report.Report, u *stack.Usage) *report.FleetFigures {
	cold, steady := r.windows(u)
	coldCPU, _ := u.CPUBetween(cold.from, cold.to)
	var steadyCPU map[string]float64
	var steadyS float64
	if !steady.from.IsZero() {
		steadyCPU, steadyS = u.CPUBetween(steady.from, steady.to)
	}
	cores := func(name string) report.WindowCores {
		w := report.WindowCores{ColdCPUSeconds: coldCPU[name], SteadyCPUSeconds: steadyCPU[name]}
		if steadyS > 0 {
			w.SteadyCores = w.SteadyCPUSeconds / steadyS
		}
		return w
	}
	f := &report.FleetFigures{BrokerProcess: report.ProcHarness}
	if _, ok := u.CPU[report.ProcBroker]; ok {
		f.BrokerProcess = report.ProcBroker
	}
	f.Broker = cores(f.BrokerProcess)
	n := len(r.stack.Children())
	for i := range n {
		name := report.ReplicaProc(i, n)
		rf := report.ReplicaFigures{Name: name, CPUSeconds: u.CPU[name], WindowCores: cores(name), PeakRSSMiB: float64(u.RSSKB[name]) / 1024}
		if u.Seconds > 0 {
			rf.Cores = rf.CPUSeconds / u.Seconds
		}
		f.Replicas = append(f.Replicas, rf)
		f.Gateways.ColdCPUSeconds += rf.ColdCPUSeconds
		f.Gateways.SteadyCPUSeconds += rf.SteadyCPUSeconds
		f.Gateways.SteadyCores += rf.SteadyCores
	}
	f.Steady = r.steadyWindow(rep, f)
	f.Cold = r.coldWindow(rep, f, cold)
	return f
}

// steadyWindow is what the steady state's leases did per second and cost.
func (r *runner) steadyWindow(rep *report.Report, f *report.FleetFigures) report.SteadyWindow {
	st := r.st
	w := report.SteadyWindow{Seconds: rep.Steady.Seconds, Leases: r.sc.Leases}
	if w.Seconds <= 0 || f.Gateways.SteadyCPUSeconds <= 0 {
		return report.SteadyWindow{}
	}
	batches := float64(st.steadyStats.produce.Count())
	w.BatchesPerS = batches / w.Seconds
	w.RenewalsPerS = float64(st.steadyStats.renew.Count()) / w.Seconds
	w.HandoversPerS = float64(st.steadyStats.handover.Count()) / w.Seconds
	w.GatewayCoresPerLease = f.Gateways.SteadyCores / float64(w.Leases)
	w.GatewayMsPerLeaseS = 1000 * w.GatewayCoresPerLease
	if batches > 0 {
		w.GatewayMsPerBatch = 1000 * f.Gateways.SteadyCPUSeconds / batches
		w.BrokerMsPerBatch = 1000 * f.Broker.SteadyCPUSeconds / batches
	}
	return w
}

// coldWindow is the replicas' CPU per handover in the cold start: all of
// it, and net of what the leases already held cost at the steady state's
// rate per lease-second.
func (r *runner) coldWindow(rep *report.Report, f *report.FleetFigures, cold window) report.ColdWindow {
	handovers := rep.ColdStart.HandoversToFirstBatch
	if rep.ColdStart.FirstBatchSeconds < 0 || handovers <= 0 {
		return report.ColdWindow{}
	}
	w := report.ColdWindow{LeaseSeconds: r.heldSeconds(cold.to)}
	w.GatewayMsPerHandover = 1000 * f.Gateways.ColdCPUSeconds / float64(handovers)
	if perLeaseS := f.Steady.GatewayCoresPerLease; perLeaseS > 0 {
		w.NetMsPerHandover = max(0, 1000*(f.Gateways.ColdCPUSeconds-w.LeaseSeconds*perLeaseS)/float64(handovers))
	}
	return w
}

// heldSeconds sums, over the leases, the seconds from their first grant
// until t.
func (r *runner) heldSeconds(t time.Time) float64 {
	st := r.st
	st.mu.Lock()
	defer st.mu.Unlock()
	first := map[string]time.Time{}
	for _, g := range st.grants {
		if at, ok := first[g.Lease]; !ok || g.AckAt.Before(at) {
			first[g.Lease] = g.AckAt
		}
	}
	var sum float64
	for _, at := range first {
		if at.Before(t) {
			sum += t.Sub(at).Seconds()
		}
	}
	return sum
}
