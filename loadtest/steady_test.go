package loadtest

import (
	"testing"
	"time"

	sdk "github.com/fencegate/fencegate/client"
	"github.com/fencegate/fencegate/loadtest/report"
)

// TestSteadySplitsAtTheLastFirstGrant: figures before every lease has
// been granted once belong to the cold start, figures after to the steady
// state; nothing is counted in both.
func TestSteadySplitsAtTheLastFirstGrant(t *testing.T) {
	st := newStats(2)
	st.grant(Grant{Lease: "a", Token: 1, AckAt: time.Now()}, 300*time.Millisecond)
	st.error("acquire", reply{status: 503, problem: sdk.Problem{Status: 503, Code: sdk.CodeKafkaUnavailable}})
	st.batch(AckedBatch{Lease: "a"}, 100, 50*time.Millisecond)
	st.renewed(40 * time.Millisecond)
	st.grant(Grant{Lease: "a", Token: 2, AckAt: time.Now()}, 200*time.Millisecond) // a again: still cold
	st.grant(Grant{Lease: "b", Token: 3, AckAt: time.Now()}, 250*time.Millisecond) // every lease granted
	st.batch(AckedBatch{Lease: "b"}, 100, 5*time.Millisecond)
	st.batch(AckedBatch{Lease: "a"}, 100, 6*time.Millisecond)
	st.renewed(2 * time.Millisecond)
	st.grant(Grant{Lease: "a", Token: 4, AckAt: time.Now()}, 20*time.Millisecond)
	st.error("renew", reply{status: 503, problem: sdk.Problem{Status: 503, Code: sdk.CodeStoreUnavailable}})

	rep := &report.Report{}
	splitAtSteady(rep, st, time.Minute)
	c, s := rep.ColdStart, rep.Steady
	if c.Handover.Count != 3 || c.Errors != 1 || c.Seconds < 0 || c.Seconds > 60 {
		t.Fatalf("cold start %+v: want 3 handovers, 1 error, its length", c)
	}
	if s.LatencyMs.Handover.Count != 1 || s.LatencyMs.Produce.Count != 2 || s.LatencyMs.Renew.Count != 1 {
		t.Fatalf("steady %+v: want 1 handover, 2 batches, 1 renewal", s.LatencyMs)
	}
	if s.LatencyMs.Produce.P99 > 10 || s.LatencyMs.Renew.P99 > 10 {
		t.Fatalf("steady latencies %+v include the cold start's", s.LatencyMs)
	}
	if want := 200 / s.Seconds; s.RecordsPerS < want*0.99 || s.RecordsPerS > want*1.01 {
		t.Fatalf("steady %.1f records/s, want %.1f (200 records in %.1fs)", s.RecordsPerS, want, s.Seconds)
	}
}

// TestNeverSteady: a run in which some lease was never granted has no
// steady state and says so.
func TestNeverSteady(t *testing.T) {
	st := newStats(2)
	st.grant(Grant{Lease: "a", Token: 1, AckAt: time.Now()}, time.Millisecond)
	rep := &report.Report{}
	splitAtSteady(rep, st, time.Minute)
	if rep.ColdStart.Seconds != -1 || rep.Steady.Seconds != 0 {
		t.Fatalf("cold start %+v, steady %+v: want -1 and none", rep.ColdStart, rep.Steady)
	}
}

// TestLongTTLScenarioValidates: a TTL of 30 s (idle-session runs) is a
// valid scenario; the replica-freeze pause is held to its bounds only when
// that fault is on.
func TestLongTTLScenarioValidates(t *testing.T) {
	s := Defaults()
	s.TTL = 30 * time.Second
	if err := s.Validate(); err != nil {
		t.Fatalf("TTL 30s without the replica-freeze fault: %v", err)
	}
	s.FreezeReplicaEvery = 5 * time.Second
	if err := s.Validate(); err == nil {
		t.Fatal("TTL 30s with the replica-freeze fault and its default pause of 90s: accepted")
	}
}
