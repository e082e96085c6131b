package loadtest

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/leasestore"
	"github.com/fencegate/fencegate/loadtest/report"
	"github.com/fencegate/fencegate/loadtest/stack"
	"github.com/fencegate/fencegate/verify"
)

// leaseEvent is a grant or renewal in lease_events with the client of
// its lease (leases.client_id: each lease of the run has one client).
type leaseEvent struct {
	Client, Kind string
	At           time.Time
}

// recordPos is a record's place in the lease topic.
type recordPos struct {
	Partition int32
	Offset    int64
}

// ledgerView is what the ledger holds of the direct records: ledger is
// ledger_records' kept verdict by position ("" for an accepted record),
// refused rejected_records' reason.
type ledgerView struct {
	ledger  map[recordPos]string
	refused map[recordPos]string
}

// verify waits for the ledger, reads lease_events and the ledger, and
// fills rep.Mixed's figures and checks.
func (m *mixedRun) verify(ctx context.Context, rep *report.Report) error {
	if err := m.r.checkI1(ctx, rep); err != nil {
		return err
	}
	if err := m.checkFenced(rep); err != nil {
		return err
	}
	if err := m.r.checkLedger(ctx, rep); err != nil {
		return err
	}
	events, err := m.leaseEvents(ctx)
	if err != nil {
		return err
	}
	lv, err := m.ledgerOf(ctx)
	if err != nil {
		return err
	}
	batches, err := m.r.ledgerBatches(ctx)
	if err != nil {
		return err
	}
	mixed := rep.Mixed
	mixed.Pattern, mixed.StateSeconds, mixed.DirectWorkers = stack.MixedPattern, m.r.sc.StateDuration.Seconds(), len(m.workers)
	mixed.Steps = m.steps
	mixed.States = m.states(events, lv, batches)
	if mixed.GateToLastLapseS, err = m.gateToLastLapse(ctx); err != nil {
		return err
	}
	for _, w := range m.writes {
		if w.Late {
			mixed.LateWrites += int64(len(w.Offsets))
		}
		if w.Err != "" {
			mixed.DirectWriteErrors++
			mixed.FirstWriteError = cmp.Or(mixed.FirstWriteError, w.Err)
		}
	}
	gated, enforced := m.stepAt[leasestore.Gated], m.stepAt[leasestore.Enforced]
	mixed.Checks = []report.MixedCheck{
		{ID: "kept", Invariant: checkKept(m.writes, m.enforceAsked, lv)},
		{ID: "gate", Invariant: checkGate(gated, m.calls, events)},
		{ID: "enforce", Invariant: checkEnforce(m.writes, enforced, lv)},
		{ID: "ledger", Invariant: report.Invariant{Pass: rep.Ledger.Pass, Checked: rep.Ledger.AckedBatches,
			Violations: rep.Ledger.Missing + rep.Ledger.Duplicated}},
		{ID: "acl", Invariant: checkACL(mixed.ACL)},
	}
	return nil
}

// checkFenced runs the checks of every run (I2, I3, I4, the history and
// the answers) on the fenced fleet's records: the direct workers' records, written
// outside any transaction and without fencegate's headers, are left out
// of the partitions and their logs (the mixed checks judge them).
func (m *mixedRun) checkFenced(rep *report.Report) error {
	recs, err := m.r.readPartitions()
	if err != nil {
		return err
	}
	for p, rs := range recs {
		recs[p] = slices.DeleteFunc(rs, directRecord)
	}
	m.r.checkI2I3(rep, recs)
	if err := m.r.checkWholeLog(rep, recs); err != nil {
		return err
	}
	m.r.checkI4(rep, recs)
	m.r.checkAnswers(rep, recs)
	return nil
}

// directRecord reports whether a record read is a direct worker's: no
// lease in its headers (the gateway stamps every record it writes) and
// not a rollout marker.
func directRecord(r verify.Record) bool { return r.Lease == "" && !r.Marker }

// directLog reports whether a record of the whole log is a direct
// worker's: no lease in its headers, not a rollout marker, written
// outside any transaction. An unstamped record inside a transaction
// stays, for CommitOrder to judge.
func directLog(r verify.LogRecord) bool {
	return !r.Control && !r.Transactional && !r.Marker && r.Lease == ""
}

// checkKept: every record a direct worker had written (acknowledged by
// Kafka) before the enforce step was asked is in ledger_records, kept.
func checkKept(writes []directWrite, enforceAsked time.Time, lv ledgerView) report.Invariant {
	var inv report.Invariant
	for _, w := range writes {
		if !enforceAsked.IsZero() && !w.Done.Before(enforceAsked) {
			continue
		}
		for _, off := range w.Offsets {
			inv.Checked++
			p := recordPos{w.Partition, off}
			switch kept, ok := lv.ledger[p]; {
			case !ok:
				inv.Fail("%s's record at %d/%d is not in ledger_records", w.Worker, p.Partition, p.Offset)
			case kept == "":
				inv.Fail("%s's record at %d/%d is in ledger_records as accepted, not kept", w.Worker, p.Partition, p.Offset)
			}
		}
	}
	if inv.Checked == 0 {
		inv.Fail("no direct record was written before enforce")
	}
	inv.Pass = inv.Violations == 0
	return inv
}

// checkGate: no direct lease call sent after gated was answered was
// granted, and lease_events holds no grant or renewal of a direct
// client's lease after it.
func checkGate(gated time.Time, calls []leaseCall, events []leaseEvent) report.Invariant {
	var inv report.Invariant
	if gated.IsZero() {
		inv.Fail("gated was never answered 200")
		return inv
	}
	for _, c := range calls {
		if c.Sent.After(gated) {
			inv.Checked++
			if c.Granted {
				inv.Fail("%s's %s sent %s after gated was granted", c.Worker, c.Call, c.Sent.Sub(gated))
			}
		}
	}
	for _, e := range events {
		if e.Client == stack.DirectClient && e.At.After(gated) {
			inv.Checked++
			inv.Fail("lease_events: %s of a direct lease %s after gated", e.Kind, e.At.Sub(gated))
		}
	}
	if inv.Checked == 0 {
		inv.Fail("no direct lease call after gated: the gate was not tried")
	}
	inv.Pass = inv.Violations == 0
	return inv
}

// checkEnforce: every record a direct worker started writing after
// enforced was answered is refused with a receipt and is not in
// ledger_records; the frozen worker wrote such records.
func checkEnforce(writes []directWrite, enforced time.Time, lv ledgerView) report.Invariant {
	var inv report.Invariant
	if enforced.IsZero() {
		inv.Fail("enforced was never answered 200")
		return inv
	}
	late := 0
	for _, w := range writes {
		if !w.Started.After(enforced) {
			continue
		}
		for _, off := range w.Offsets {
			inv.Checked++
			if w.Late {
				late++
			}
			p := recordPos{w.Partition, off}
			if kept, ok := lv.ledger[p]; ok {
				inv.Fail("%s's record at %d/%d is in ledger_records (kept %q)", w.Worker, p.Partition, p.Offset, kept)
			}
			if _, ok := lv.refused[p]; !ok {
				inv.Fail("%s's record at %d/%d has no receipt in rejected_records", w.Worker, p.Partition, p.Offset)
			}
		}
	}
	if late == 0 {
		inv.Fail("the frozen worker wrote nothing after enforced: the incident did not happen")
	}
	inv.Pass = inv.Violations == 0
	return inv
}

// checkACL: the plan deleted a binding and the broker refused the direct
// principal's next write.
func checkACL(a report.ACLStep) report.Invariant {
	inv := report.Invariant{Checked: 1}
	switch {
	case a.Error != "":
		inv.Fail("ACL step: %s", a.Error)
	case a.Deleted == 0:
		inv.Fail("the ACL plan %v deleted no binding", a.Plan)
	case a.NextWrite != topicAuthorizationFailed:
		inv.Fail("the direct principal's next write: %s, want %s", a.NextWrite, topicAuthorizationFailed)
	}
	inv.Pass = inv.Violations == 0
	return inv
}

// leaseEvents are the grants of the run's leases and the last renewal of
// each (renewals write no event, the lease row keeps the last: a renewal
// after gated makes the last one later than gated).
func (m *mixedRun) leaseEvents(ctx context.Context) ([]leaseEvent, error) {
	rows, err := m.r.stack.Pool.Query(ctx, `SELECT client, kind, at FROM (
		SELECT coalesce(l.client_id, '') AS client, e.kind, e.at
		  FROM lease_events e JOIN leases l ON l.name = e.name
		 WHERE e.kind IN ('acquired', 'regenerated')
		UNION ALL
		SELECT coalesce(client_id, ''), 'renewed', renewed_at FROM leases WHERE renewed_at IS NOT NULL) ev
		ORDER BY at`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowToStructByPos[leaseEvent])
}

// ledgerOf reads where the direct records are: ledger_records and
// rejected_records at their positions.
func (m *mixedRun) ledgerOf(ctx context.Context) (ledgerView, error) {
	var parts []int32
	var offs []int64
	for _, w := range m.writes {
		for _, o := range w.Offsets {
			parts, offs = append(parts, w.Partition), append(offs, o)
		}
	}
	lv := ledgerView{ledger: map[recordPos]string{}, refused: map[recordPos]string{}}
	for q, into := range map[string]map[recordPos]string{
		`SELECT l.partition, l."offset", coalesce(l.kept, '') FROM ledger_records l
			JOIN unnest($2::int[], $3::bigint[]) AS d(p, o) ON l.partition = d.p AND l."offset" = d.o WHERE l.topic = $1`: lv.ledger,
		`SELECT r.partition, r."offset", r.reason FROM rejected_records r
			JOIN unnest($2::int[], $3::bigint[]) AS d(p, o) ON r.partition = d.p AND r."offset" = d.o WHERE r.topic = $1`: lv.refused,
	} {
		rows, err := m.r.stack.Pool.Query(ctx, q, m.r.stack.Topic(), parts, offs)
		if err != nil {
			return lv, err
		}
		for rows.Next() {
			var p recordPos
			var v string
			if err := rows.Scan(&p.Partition, &p.Offset, &v); err != nil {
				rows.Close()
				return lv, err
			}
			into[p] = v
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return lv, err
		}
	}
	return lv, nil
}

// gateToLastLapse is the time from gated's answer to the expiry of the
// last direct lease (-1: no gate or no direct lease).
func (m *mixedRun) gateToLastLapse(ctx context.Context) (float64, error) {
	gated := m.stepAt[leasestore.Gated]
	var last *time.Time
	err := m.r.stack.Pool.QueryRow(ctx, `SELECT max(expires_at) FROM leases WHERE client_id = $1`, stack.DirectClient).Scan(&last)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return 0, err
	}
	if gated.IsZero() || last == nil {
		return -1, nil
	}
	return last.Sub(gated).Seconds(), nil
}

// states are the per-state figures: each state from its step's answer to
// the next one's (the end of the run for the last).
func (m *mixedRun) states(events []leaseEvent, lv ledgerView, batches map[string][2]int64) []report.StateFigures {
	end := m.ended
	out := make([]report.StateFigures, len(mixedStates))
	bounds := make([]time.Time, len(mixedStates)+1)
	for i, st := range mixedStates {
		bounds[i] = m.stepAt[st]
	}
	bounds[len(mixedStates)] = end
	for i := len(mixedStates) - 1; i >= 0; i-- {
		if bounds[i].IsZero() {
			bounds[i] = bounds[i+1]
		}
	}
	stateOf := func(t time.Time) int {
		for i := len(mixedStates) - 1; i >= 0; i-- {
			if !t.Before(bounds[i]) {
				return i
			}
		}
		return -1
	}
	for i, st := range mixedStates {
		out[i] = report.StateFigures{State: string(st), FromS: bounds[i].Sub(m.started).Seconds(), ToS: bounds[i+1].Sub(m.started).Seconds()}
	}
	for _, e := range events {
		if i := stateOf(e.At); i >= 0 {
			countEvent(&out[i], e)
		}
	}
	for _, w := range m.writes {
		if i := stateOf(w.Started); i >= 0 {
			s := &out[i]
			for _, off := range w.Offsets {
				s.DirectRecords++
				p := recordPos{w.Partition, off}
				if kept, ok := lv.ledger[p]; ok && kept != "" {
					s.DirectKept++
				}
				if _, ok := lv.refused[p]; ok {
					s.DirectRefused++
				}
			}
		}
	}
	for _, b := range m.r.st.acked {
		if i := stateOf(b.At); i >= 0 {
			out[i].AckedBatches++
			if ledgerVerdict(b, batches[batchKey(b)]) == batchOnce {
				out[i].AckedInLedger++
			}
		}
	}
	return out
}

func countEvent(s *report.StateFigures, e leaseEvent) {
	direct := e.Client == stack.DirectClient
	switch {
	case e.Kind == "renewed" && direct:
		s.DirectRenewals++
	case e.Kind == "renewed":
		s.FencedRenewals++
	case direct:
		s.DirectGrants++
	default:
		s.FencedGrants++
	}
}
