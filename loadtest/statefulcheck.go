package loadtest

import (
	"context"
	"fmt"
	"strconv"

	"github.com/fencegate/fencegate/loadtest/report"
)

// checkItems judges one lease's item records, values in log order,
// against its checkpoint n (the next item to process): I6 wants items
// 0..n-1, each exactly once, in order, and nothing past n.
func checkItems(values [][]byte, n int) report.ItemCounts {
	c := report.ItemCounts{Leases: 1, Items: int64(n)}
	seen := map[int]bool{}
	highest := -1
	for _, v := range values {
		i, ok := itemIndex(v)
		if !ok {
			continue // not an item: another writer's record
		}
		c.Records++
		switch {
		case i >= n:
			c.Beyond++
		case seen[i]:
			c.Duplicates++
		default:
			seen[i] = true
			if i < highest {
				c.OutOfOrder++
			}
			highest = max(highest, i)
		}
	}
	c.Gaps = int64(n - len(seen))
	return c
}

// itemSequences are, per lease, the item values of its records in log
// order and its resume point.
type itemSequences struct {
	values map[string][][]byte
	next   map[string]int
}

// judge checks every lease of s and sums the counts; each lease's first
// violations become examples of inv.
func (s itemSequences) judge(inv *report.Invariant) report.ItemCounts {
	var total report.ItemCounts
	leases := map[string]bool{}
	for l := range s.values {
		leases[l] = true
	}
	for l := range s.next {
		leases[l] = true
	}
	for l := range leases {
		c := checkItems(s.values[l], s.next[l])
		if v := c.Violations(); v > 0 {
			inv.Fail("%s: n %d, %d records: gaps %d, duplicates %d, out of order %d, beyond the checkpoint %d",
				l, c.Items, c.Records, c.Gaps, c.Duplicates, c.OutOfOrder, c.Beyond)
			inv.Violations += int(v) - 1
		}
		total.Add(c)
	}
	inv.Checked = int(total.Items)
	inv.Pass = inv.Violations == 0
	return total
}

// checkI6 reads the ledger (after checkLedger waited for it to catch up):
// per lease, its accepted records in offset order against its checkpoint.
func (r *runner) checkI6(ctx context.Context, rep *report.Report) error {
	seqs := itemSequences{values: map[string][][]byte{}, next: map[string]int{}}
	rows, err := r.stack.Pool.Query(ctx, `SELECT lease, value FROM accepted_records
		WHERE topic = $1 AND lease LIKE 'shard:%' ORDER BY lease, partition, "offset"`, r.stack.Topic())
	if err != nil {
		return err
	}
	for rows.Next() {
		var lease string
		var v []byte
		if err := rows.Scan(&lease, &v); err != nil {
			rows.Close()
			return err
		}
		seqs.values[lease] = append(seqs.values[lease], v)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	cps, err := r.stack.Pool.Query(ctx, `SELECT lease, value FROM checkpoints WHERE topic = $1 AND lease LIKE 'shard:%'`, r.stack.Topic())
	if err != nil {
		return err
	}
	defer cps.Close()
	for cps.Next() {
		var lease string
		var v []byte
		if err := cps.Scan(&lease, &v); err != nil {
			return err
		}
		n, err := strconv.Atoi(string(v))
		if err != nil {
			return fmt.Errorf("checkpoint of %s: %q is not an item index", lease, v)
		}
		seqs.next[lease] = n
	}
	if err := cps.Err(); err != nil {
		return err
	}
	f := r.statefulFigures()
	f.Items = seqs.judge(&f.I6)
	rep.Stateful = f
	if r.fenced != nil {
		if f.FencedState, err = r.fenced.check(ctx, seqs.next); err != nil {
			return err
		}
	}
	f.Takeovers, err = r.takeovers(ctx, "shard:%")
	return err
}

func (r *runner) statefulFigures() *report.StatefulFigures {
	st := r.items
	return &report.StatefulFigures{Resumes: st.resumes.Load(), ResumesFromOther: st.fromOther.Load(),
		LedgerBehind: st.ledgerBehind.Load(), AmbiguousLanded: st.ambiguousLanded.Load(),
		AmbiguousNotLanded: st.ambiguousNotLanded.Load(), AmbiguousTakenOver: st.ambiguousTaken.Load(),
		StaleItemBatches: st.staleBatches.Load(), ResumeWaitMs: report.QuantilesOf(&st.resumeWait)}
}

// takeovers counts the grants (lease_events) of leases matching pattern
// to another owner than the previous grant's: ownership changes.
func (r *runner) takeovers(ctx context.Context, pattern string) (int64, error) {
	rows, err := r.stack.Pool.Query(ctx, `SELECT name, owner_id FROM lease_events
		WHERE kind IN ('acquired', 'regenerated') AND name LIKE $1 ORDER BY name, at, id`, pattern)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	var n int64
	last := map[string]string{}
	for rows.Next() {
		var name, owner string
		if err := rows.Scan(&name, &owner); err != nil {
			return 0, err
		}
		if prev, ok := last[name]; ok && prev != owner {
			n++
		}
		last[name] = owner
	}
	return n, rows.Err()
}
