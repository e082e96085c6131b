package loadtest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/fencegate/fencegate/loadtest/report"
	"github.com/fencegate/fencegate/loadtest/stack"
	"github.com/fencegate/fencegate/verify"
)

// verify checks I1..I4 and the ledger after the gateway phase, then
// runs the checks of the run's scenarios (the table's check hooks).
func (r *runner) verify(ctx context.Context, rep *report.Report) error {
	recs, err := r.readPartitions()
	if err != nil {
		return err
	}
	r.read = recs
	if err := r.checkI1(ctx, rep); err != nil {
		return err
	}
	r.checkI2I3(rep, recs)
	if err := r.checkWholeLog(rep, recs); err != nil {
		return err
	}
	r.checkI4(rep, recs)
	r.checkAnswers(rep, recs)
	if r.stack.Materialize {
		if err := r.checkLedger(ctx, rep); err != nil {
			return err
		}
	}
	for _, e := range on(r.sc, r.stack) {
		if e.check != nil {
			if err := e.check(ctx, r, rep); err != nil {
				return err
			}
		}
	}
	return nil
}

func (r *runner) readPartitions() (map[int32][]verify.Record, error) {
	out := map[int32][]verify.Record{}
	for p := range int32(stack.Partitions) {
		recs, err := verify.ReadPartition(r.stack.Kafka, r.stack.Topic(), p, 60*time.Second)
		if err != nil {
			return nil, err
		}
		out[p] = recs
	}
	return out, nil
}

// checkI1: per lease name, granted tokens strictly increase in database
// time order (lease_events).
func (r *runner) checkI1(ctx context.Context, rep *report.Report) error {
	rows, err := r.stack.Pool.Query(ctx, `SELECT name, token FROM lease_events
		WHERE kind IN ('acquired', 'regenerated') ORDER BY name, at, id`)
	if err != nil {
		return err
	}
	defer rows.Close()
	inv := &rep.Invariants.I1
	last := map[string]int64{}
	for rows.Next() {
		var name string
		var token int64
		if err := rows.Scan(&name, &token); err != nil {
			return err
		}
		inv.Checked++
		if token <= last[name] {
			inv.Fail("%s: token %d granted after %d", name, token, last[name])
		}
		last[name] = token
	}
	inv.Pass = inv.Violations == 0
	return rows.Err()
}

func (r *runner) checkI2I3(rep *report.Report, recs map[int32][]verify.Record) {
	byPartition := map[int32][]verify.Batch{}
	for _, b := range r.st.acked {
		p := r.partition(b.Lease)
		byPartition[p] = append(byPartition[p], verify.Batch{Lease: b.Lease, Token: b.Token, BatchID: b.BatchID, Offsets: b.Offsets})
	}
	for p, rs := range recs {
		rep.Invariants.I2.Checked += len(rs)
		for _, v := range verify.NoStaleWrite(rs) {
			rep.Invariants.I2.Fail("partition %d: %s", p, v)
		}
		rep.Invariants.I3.Checked += len(byPartition[p])
		for _, v := range verify.NoAckedLoss(rs, byPartition[p]) {
			rep.Invariants.I3.Fail("partition %d: %s", p, v)
			r.lost[p] = append(r.lost[p], v.Offset)
		}
	}
	rep.Invariants.I2.Pass = rep.Invariants.I2.Violations == 0
	rep.Invariants.I3.Pass = rep.Invariants.I3.Violations == 0
}

// checkWholeLog adds to I2 what only the whole log shows (commit markers
// of old generations after a newer barrier, data from an epoch its barrier
// does not name, records outside transactions), and runs the history
// checker on every partition (rep.History).
func (r *runner) checkWholeLog(rep *report.Report, recs map[int32][]verify.Record) error {
	inv := &rep.Invariants.I2
	for p := range int32(stack.Partitions) {
		whole, err := verify.ReadLog(r.stack.Kafka, r.stack.Topic(), p, 60*time.Second)
		if err != nil {
			return err
		}
		for _, e := range on(r.sc, r.stack) {
			if e.ownRecords != nil {
				whole = slices.DeleteFunc(whole, e.ownRecords)
			}
		}
		for _, v := range verify.CommitOrder(whole) {
			inv.Fail("partition %d (commit order): %s", p, v)
		}
		r.st.mu.Lock()
		ops := r.st.history[p]
		r.st.mu.Unlock()
		addHistory(&rep.History, p, verify.CheckHistory(whole, recs[p], ops))
		// What the log holds where an acknowledged batch is missing.
		for i, off := range r.lost[p] {
			if i < 3 {
				rep.Invariants.I3.Examples = append(rep.Invariants.I3.Examples,
					fmt.Sprintf("partition %d, whole log: %s", p, verify.Describe(whole, off)))
			}
		}
	}
	inv.Pass = inv.Violations == 0
	return nil
}

// checkAnswers compares answers with the log: an attempt answered "nothing
// committed" must have no committed record, and an attempt sent after a
// later generation was acknowledged must not be committed (records carry
// their attempt's id in the key).
func (r *runner) checkAnswers(rep *report.Report, recs map[int32][]verify.Record) {
	committed := map[string]bool{}
	for _, rs := range recs {
		for _, rec := range rs {
			if attempt, _, ok := strings.Cut(string(rec.Key), "/"); ok && !rec.Barrier {
				committed[attempt] = true
			}
		}
	}
	g := &rep.Gateway
	for _, a := range r.st.checked {
		switch {
		case !committed[a.id]:
		case a.definite:
			g.DefiniteButCommitted++
		case a.staleOK:
			g.StaleAccepted++
		}
	}
}

// checkI4: every acknowledged acquire's generation was opened in Kafka (its
// barrier, written after InitTransactions bumped the epoch, is committed)
// before the worker received the 201.
func (r *runner) checkI4(rep *report.Report, recs map[int32][]verify.Record) {
	barriers := map[string]time.Time{}
	for _, rs := range recs {
		for _, rec := range rs {
			if rec.Barrier {
				barriers[fmt.Sprintf("%s/%d", rec.Lease, rec.Token)] = rec.Timestamp
			}
		}
	}
	inv := &rep.Invariants.I4
	for _, g := range r.st.grants {
		inv.Checked++
		at, ok := barriers[fmt.Sprintf("%s/%d", g.Lease, g.Token)]
		switch {
		case !ok:
			inv.Fail("%s token %d acknowledged without a committed barrier", g.Lease, g.Token)
		case at.After(g.AckAt):
			inv.Fail("%s token %d acknowledged at %s before its barrier at %s", g.Lease, g.Token, g.AckAt, at)
		}
	}
	inv.Pass = inv.Violations == 0
}

func (r *runner) partition(lease string) int32 {
	p, _ := r.stack.Router.Resolve(lease)
	return p.Partition
}

// checkLedger waits for the materializer to catch up, then compares the
// ledger with the acknowledged batches: each exactly once.
func (r *runner) checkLedger(ctx context.Context, rep *report.Report) error {
	if err := r.waitCaughtUp(ctx); err != nil {
		return err
	}
	inLedger, err := r.ledgerBatches(ctx)
	if err != nil {
		return err
	}
	r.compareAcked(&rep.Ledger, inLedger)
	rep.Ledger.Finish()
	return nil
}

// compareAcked compares the batches found (in the ledger or the trusted
// topic: by batchKey, their records and distinct seqs) with the
// acknowledged ones into c: each acknowledged batch once, and each batch
// found that nobody acknowledged explained by an answer, or not.
func (r *runner) compareAcked(c *report.LedgerCheck, found map[string][2]int64) {
	acked := map[string]bool{}
	for _, b := range r.st.acked {
		k := batchKey(b)
		acked[k] = true
		switch ledgerVerdict(b, found[k]) {
		case batchMissing:
			c.Missing++
		case batchDuplicated:
			c.Duplicated++
		}
	}
	c.AckedBatches = len(acked)
	r.st.mu.Lock()
	why := extraReasons(r.st.history)
	r.st.mu.Unlock()
	judgeExtra(c, found, acked, why)
}

// The answers that explain a batch nobody acknowledged being committed.
const (
	extraUnknown   = "outcome unknown"
	extraCommitted = "a 200 no worker counted (a frozen worker's write)"
)

// extraReasons are, by lease and batch id, the answer of one of the
// batch's attempts that explains its being committed unacknowledged: an
// outcome unknown (it may have committed), else a 200 to an attempt the
// harness does not count as an acknowledged batch. A batch whose every
// attempt was refused has none.
func extraReasons(history map[int32][]verify.Op) map[string]string {
	out := map[string]string{}
	for _, ops := range history {
		for _, op := range ops {
			k := op.Lease + "|" + op.BatchID
			switch {
			case op.Answer == verify.AnswerUnknown:
				out[k] = extraUnknown
			case op.Answer == verify.AnswerCommitted && out[k] == "":
				out[k] = extraCommitted
			}
		}
	}
	return out
}

// judgeExtra counts into c the batches found that are not acked: by the
// answer that explains each (why, by lease and batch id), or unexplained.
// An explained one must still be there once: a record of it twice counts
// as duplicated, as it would for an acknowledged batch.
func judgeExtra(c *report.LedgerCheck, found map[string][2]int64, acked map[string]bool, why map[string]string) {
	for k, got := range found {
		if acked[k] {
			continue
		}
		c.Extra++
		if got[0] != got[1] {
			c.Duplicated++
		}
		lease, rest, _ := strings.Cut(k, "|")
		_, batch, _ := strings.Cut(rest, "|")
		reason := why[lease+"|"+batch]
		if reason == "" {
			c.Unexplained++
			continue
		}
		if c.ExtraBecause == nil {
			c.ExtraBecause = map[string]int{}
		}
		c.ExtraBecause[reason]++
	}
}

// ledgerBatches counts, per batch (batchKey) in accepted_records, its
// records and its distinct seqs.
func (r *runner) ledgerBatches(ctx context.Context) (map[string][2]int64, error) {
	rows, err := r.stack.Pool.Query(ctx, `SELECT lease, owner_id, batch_id, count(*), count(DISTINCT seq)
		FROM accepted_records WHERE topic = $1 GROUP BY lease, owner_id, batch_id`, r.stack.Topic())
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	inLedger := map[string][2]int64{}
	for rows.Next() {
		var lease, owner, batch string
		var n, distinct int64
		if err := rows.Scan(&lease, &owner, &batch, &n, &distinct); err != nil {
			return nil, err
		}
		inLedger[lease+"|"+owner+"|"+batch] = [2]int64{n, distinct}
	}
	return inLedger, rows.Err()
}

func batchKey(b AckedBatch) string { return b.Lease + "|" + b.Owner + "|" + b.BatchID }

// The ledger's verdicts on an acknowledged batch.
const (
	batchOnce = iota
	batchMissing
	batchDuplicated
)

// ledgerVerdict judges acknowledged batch b by its ledger counts got
// (records, distinct seqs): missing, duplicated, or there exactly once.
func ledgerVerdict(b AckedBatch, got [2]int64) int {
	switch {
	case got[0] == 0 || got[1] < int64(len(b.Offsets)):
		return batchMissing
	case got[0] != got[1]:
		return batchDuplicated
	}
	return batchOnce
}

// waitCaughtUp waits (waitProgress) until every partition's stored
// position reaches its end (the materializer skips transaction markers
// when idle).
func (r *runner) waitCaughtUp(ctx context.Context) error {
	ends := make([]int64, stack.Partitions)
	for p := range int32(stack.Partitions) {
		recs, err := verify.ReadPartition(r.stack.Kafka, r.stack.Topic(), p, 30*time.Second)
		if err != nil {
			return err
		}
		if len(recs) > 0 {
			ends[p] = recs[len(recs)-1].Offset + 1
		}
	}
	if err := waitProgress(ctx, ends, stall, r.storedPositions); err != nil {
		return fmt.Errorf("the materializer made %w; its log ends:\n%s", err, r.stack.MaterializerLog())
	}
	return nil
}

// storedPositions are the materializer's stored positions in the lease
// topic, per partition.
func (r *runner) storedPositions(ctx context.Context) (map[int32]int64, error) {
	rows, err := r.stack.Pool.Query(ctx, `SELECT partition, next_offset FROM consumer_positions WHERE topic = $1`, r.stack.Topic())
	if err != nil {
		return nil, err
	}
	out := map[int32]int64{}
	for rows.Next() {
		var p int32
		var pos int64
		if err := rows.Scan(&p, &pos); err != nil {
			return nil, err
		}
		out[p] = pos
	}
	return out, rows.Err()
}
