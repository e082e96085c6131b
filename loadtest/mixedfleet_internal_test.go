package loadtest

import (
	"testing"
	"time"

	"github.com/fencegate/fencegate/barrier"
	"github.com/fencegate/fencegate/loadtest/report"
	"github.com/fencegate/fencegate/loadtest/stack"
	"github.com/fencegate/fencegate/verify"
)

// TestMixedChecksFail: each check of the mixed fleet fails on the log of
// a run where what it holds did not happen: a gate not applied (a direct
// renewal granted after gated, or a grant in lease_events), an enforce
// not applied (a late record kept, or without a receipt), an incident that
// did not happen (no late write), a direct record missing from the ledger
// under observe, and a broker that took the direct principal's write after
// the ACL plan. The same logs with the property held pass.
func TestMixedChecksFail(t *testing.T) {
	t.Parallel()
	t0 := time.Now()
	gated, enforced := t0.Add(time.Second), t0.Add(2*time.Second)
	renewAfterGate := leaseCall{Worker: "old-1", Call: "renew", Sent: gated.Add(100 * time.Millisecond)}
	early := directWrite{Worker: "old-1", Started: t0, Done: t0.Add(time.Millisecond), Partition: 3, Offsets: []int64{10, 11}}
	late := directWrite{Worker: "old-0", Late: true, Started: enforced.Add(time.Millisecond), Done: enforced.Add(2 * time.Millisecond), Partition: 4, Offsets: []int64{20}}
	held := ledgerView{ledger: map[recordPos]string{{3, 10}: "malformed", {3, 11}: "malformed"},
		refused: map[recordPos]string{{4, 20}: "malformed"}}
	with := func(f func(*ledgerView)) ledgerView {
		lv := ledgerView{ledger: map[recordPos]string{}, refused: map[recordPos]string{}}
		for k, v := range held.ledger {
			lv.ledger[k] = v
		}
		for k, v := range held.refused {
			lv.refused[k] = v
		}
		f(&lv)
		return lv
	}
	granted := renewAfterGate
	granted.Granted = true
	for _, c := range []struct {
		name string
		inv  report.Invariant
		pass bool
	}{
		{"gate held", checkGate(gated, []leaseCall{renewAfterGate}, nil), true},
		{"gate: renewal granted after gated", checkGate(gated, []leaseCall{granted}, nil), false},
		{"gate: lease_events renewal after gated", checkGate(gated, []leaseCall{renewAfterGate},
			[]leaseEvent{{Client: stack.DirectClient, Kind: "renewed", At: gated.Add(time.Millisecond)}}), false},
		{"gate: never answered", checkGate(time.Time{}, nil, nil), false},
		{"gate: no direct call after it", checkGate(gated, nil, nil), false},
		{"enforce held", checkEnforce([]directWrite{early, late}, enforced, held), true},
		{"enforce: late record kept", checkEnforce([]directWrite{late}, enforced, with(func(lv *ledgerView) { lv.ledger[recordPos{4, 20}] = "malformed" })), false},
		{"enforce: late record accepted", checkEnforce([]directWrite{late}, enforced, with(func(lv *ledgerView) { lv.ledger[recordPos{4, 20}] = "" })), false},
		{"enforce: no receipt", checkEnforce([]directWrite{late}, enforced, with(func(lv *ledgerView) { delete(lv.refused, recordPos{4, 20}) })), false},
		{"enforce: no late write", checkEnforce([]directWrite{early}, enforced, held), false},
		{"kept held", checkKept([]directWrite{early, late}, enforced, held), true},
		{"kept: missing", checkKept([]directWrite{early}, enforced, with(func(lv *ledgerView) { delete(lv.ledger, recordPos{3, 11}) })), false},
		{"kept: accepted, not kept", checkKept([]directWrite{early}, enforced, with(func(lv *ledgerView) { lv.ledger[recordPos{3, 11}] = "" })), false},
		{"acl held", checkACL(report.ACLStep{Deleted: 1, NextWrite: topicAuthorizationFailed}), true},
		{"acl: write delivered", checkACL(report.ACLStep{Deleted: 1, NextWrite: "delivered"}), false},
		{"acl: nothing deleted", checkACL(report.ACLStep{NextWrite: topicAuthorizationFailed}), false},
	} {
		if c.inv.Pass != c.pass {
			t.Errorf("%s: pass %v, want %v (%+v)", c.name, c.inv.Pass, c.pass, c.inv)
		}
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
