package loadtest

import (
	"sort"
	"time"

	"github.com/fencegate/fencegate/loadtest/report"
)

// The net-fault scenario's judgement: a round after which no batch was
// acknowledged is unrecovered, a failure.

// netFaultFigures are the report's figures of the network faults: rounds,
// and the recovery after each (from the fault's end to the first batch
// acknowledged after it).
func (r *runner) netFaultFigures() *report.NetFault {
	if r.sc.NetFault == "" {
		return nil
	}
	r.st.mu.Lock()
	ends := append([]time.Time(nil), r.st.netFaultEnds...)
	acks := make([]time.Time, 0, len(r.st.acked))
	for _, b := range r.st.acked {
		acks = append(acks, b.At)
	}
	r.st.mu.Unlock()
	sort.Slice(acks, func(i, j int) bool { return acks[i].Before(acks[j]) })
	nf := &report.NetFault{Kind: r.sc.NetFault, Link: r.sc.NetFaultLink, Rounds: len(ends),
		EverySeconds: r.sc.NetFaultEvery.Seconds(), ForSeconds: r.sc.NetFaultFor.Seconds()}
	judgeRecovery(nf, ends, acks, r.st.start.Add(r.sc.Duration), 2*r.sc.TTL)
	return nf
}

// notJudgedWhy is why a network fault round that ended near the end of
// the run is not judged.
const notJudgedWhy = "ended less than two TTLs before the run: a lease may take a TTL to expire and be granted again before a batch follows"

// judgeRecovery fills nf's recovery from the rounds' ends and the
// acknowledgements (sorted): a round after which no batch was
// acknowledged is unrecovered, a failure, unless it ended within window
// of the run's end, where no batch may have had time to follow.
func judgeRecovery(nf *report.NetFault, ends, acks []time.Time, runEnd time.Time, window time.Duration) {
	for _, end := range ends {
		i := sort.Search(len(acks), func(i int) bool { return acks[i].After(end) })
		switch {
		case i < len(acks):
			nf.RecoveryMaxSeconds = max(nf.RecoveryMaxSeconds, acks[i].Sub(end).Seconds())
		case runEnd.Sub(end) < window:
			nf.NotJudged++
			nf.NotJudgedWhy = notJudgedWhy
		default:
			nf.Unrecovered++
		}
	}
}
