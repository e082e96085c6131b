package loadtest

import (
	"testing"
	"time"

	"github.com/fencegate/fencegate/barrier"
	"github.com/fencegate/fencegate/loadtest/report"
	"github.com/fencegate/fencegate/verify"
)

// TestExtraBatchesAreExplainedOrFail: a batch in the ledger (or the
// trusted topic) that nobody acknowledged is explained by an outcome
// unknown or an uncounted 200 of one of its attempts, and otherwise (its
// every attempt refused, or no attempt at all) counts as unexplained,
// which fails the ledger check; an explained one there twice counts as
// duplicated.
func TestExtraBatchesAreExplainedOrFail(t *testing.T) {
	t.Parallel()
	history := map[int32][]verify.Op{
		0: {{Lease: "shard:0", BatchID: "w0-0/1", Answer: verify.AnswerUnknown}, {Lease: "shard:0", BatchID: "w0-0/1", Answer: verify.AnswerRefused},
			{Lease: "shard:2", BatchID: "w2-0/4", Answer: verify.AnswerUnknown}},
		1: {{Lease: "shard:1", BatchID: "w1-0/stale-3", Answer: verify.AnswerCommitted, Offsets: []int64{9}},
			{Lease: "shard:1", BatchID: "w1-0/2", Answer: verify.AnswerRefused}},
	}
	found := map[string][2]int64{
		"shard:0|w0-0|w0-0/0":       {2, 2}, // acknowledged
		"shard:0|w0-0|w0-0/1":       {2, 2}, // outcome unknown, landed
		"shard:1|w1-0|w1-0/stale-3": {2, 2}, // a frozen worker's 200
		"shard:1|w1-0|w1-0/2":       {2, 2}, // refused, yet there
		"shard:1|w1-0|w1-0/9":       {2, 2}, // never sent
		"shard:2|w2-0|w2-0/4":       {4, 2}, // outcome unknown, landed twice
	}
	var c report.LedgerCheck
	judgeExtra(&c, found, map[string]bool{"shard:0|w0-0|w0-0/0": true}, extraReasons(history))
	c.Finish()
	switch {
	case c.Extra != 5 || c.Unexplained != 2 || c.Duplicated != 1:
		t.Fatalf("extra %d, unexplained %d, duplicated %d; want 5, 2 and 1", c.Extra, c.Unexplained, c.Duplicated)
	case c.ExtraBecause[extraUnknown] != 2 || c.ExtraBecause[extraCommitted] != 1:
		t.Fatalf("explained by %v, want two outcomes unknown and one uncounted 200", c.ExtraBecause)
	case c.Pass:
		t.Fatal("the ledger check passed with two extra batches nothing explains")
	}
}

// TestNetFaultRoundsAreJudgedUnlessAtTheEnd: a round after which a batch
// was acknowledged recovered; one after which none was fails, unless it
// ended within the window before the run's end (not judged, with why).
func TestNetFaultRoundsAreJudgedUnlessAtTheEnd(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	var nf report.NetFault
	judgeRecovery(&nf, []time.Time{at(1), at(5), at(19)}, []time.Time{at(1.5), at(2)}, at(20), 2*time.Second)
	switch {
	case nf.Unrecovered != 1 || nf.NotJudged != 1 || nf.NotJudgedWhy == "":
		t.Fatalf("unrecovered %d, not judged %d (%q); want 1 and 1 with why", nf.Unrecovered, nf.NotJudged, nf.NotJudgedWhy)
	case nf.RecoveryMaxSeconds != 0.5:
		t.Fatalf("recovery %.2fs, want 0.5s", nf.RecoveryMaxSeconds)
	}
}

// TestMixedChecksLeaveOutOnlyDirectRecords: a mixed run's I2, I3, I4 and
// history leave out only the direct workers' records (no lease, outside
// any transaction); an unstamped record inside a transaction, or a
// stamped one outside, stays to be judged.
func TestMixedChecksLeaveOutOnlyDirectRecords(t *testing.T) {
	t.Parallel()
	stamped := barrier.Stamp{Lease: "shard:1", Token: 1, Batch: "b"}
	cases := []struct {
		name string
		r    verify.LogRecord
		want bool
	}{
		{"a direct worker's record", verify.LogRecord{}, true},
		{"an unstamped record in a transaction", verify.LogRecord{Transactional: true}, false},
		{"a stamped record outside a transaction", verify.LogRecord{Stamp: stamped}, false},
		{"a transaction marker", verify.LogRecord{Control: true}, false},
		{"a rollout marker", verify.LogRecord{Transactional: true, Marker: true}, false},
	}
	for _, c := range cases {
		if got := directLog(c.r); got != c.want {
			t.Errorf("%s: left out %v, want %v", c.name, got, c.want)
		}
	}
	if directRecord(verify.Record{Stamp: stamped}) || directRecord(verify.Record{Marker: true}) || !directRecord(verify.Record{}) {
		t.Error("directRecord does not tell a stamped record from a direct one")
	}
}

// TestFaultsExplainingErrorsAreTheInfrastructures: a worker's own freeze
// or churn explains no worker error; an injected infrastructure fault
// does.
func TestFaultsExplainingErrorsAreTheInfrastructures(t *testing.T) {
	t.Parallel()
	sc := Defaults()
	sc.FreezeEvery, sc.ChurnEvery = time.Second, time.Second
	if f := sc.faults(); len(f) != 0 {
		t.Fatalf("faults %v, want none for freezes and churn", f)
	}
	sc.KillReplicaEvery, sc.NetFault = time.Second, "reset"
	if f := sc.faults(); len(f) != 2 {
		t.Fatalf("faults %v, want the network fault and the replica kills", f)
	}
}
