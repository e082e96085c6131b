package loadtest

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/loadtest/report"
	"github.com/fencegate/fencegate/materializer"
	"github.com/fencegate/fencegate/verify"
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
// A metadata-only row (--ledger-values drop) has its value read back from
// the raw topic, as a reader of such a ledger does, and checked against
// its digest.
func (r *runner) checkI6(ctx context.Context, rep *report.Report) error {
	f := r.statefulFigures()
	seqs := itemSequences{values: map[string][][]byte{}, next: map[string]int{}}
	rows, err := r.ledgerItems(ctx)
	if err != nil {
		return err
	}
	if f.DroppedValues, err = r.readDropped(rows, &f.I6); err != nil {
		return err
	}
	for _, row := range rows {
		seqs.values[row.lease] = append(seqs.values[row.lease], row.value)
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

// ledgerItem is one accepted row of a stateful lease: its value, or its
// digest alone in a metadata-only row.
type ledgerItem struct {
	lease         string
	partition     int32
	offset        int64
	value, digest []byte
}

// ledgerItems are the accepted rows of the stateful leases, per lease in
// offset order.
func (r *runner) ledgerItems(ctx context.Context) ([]ledgerItem, error) {
	rows, err := r.stack.Pool.Query(ctx, `SELECT lease, partition, "offset", value, digest FROM accepted_records
		WHERE topic = $1 AND lease LIKE 'shard:%' ORDER BY lease, partition, "offset"`, r.stack.Topic())
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (ledgerItem, error) {
		var it ledgerItem
		return it, row.Scan(&it.lease, &it.partition, &it.offset, &it.value, &it.digest)
	})
}

// readDropped fills in the value of each metadata-only row from the raw
// topic, failing inv for a row whose record is not there or whose digest
// differs; it returns how many it read back.
func (r *runner) readDropped(items []ledgerItem, inv *report.Invariant) (int64, error) {
	type at struct {
		partition int32
		offset    int64
	}
	need := map[at]*ledgerItem{}
	for i := range items {
		if items[i].value == nil && items[i].digest != nil {
			need[at{items[i].partition, items[i].offset}] = &items[i]
		}
	}
	parts := map[int32]bool{}
	for k := range need {
		parts[k.partition] = true
	}
	var read int64
	for p := range parts {
		err := verify.EachMessage(r.stack.Kafka, r.stack.Topic(), p, 60*time.Second, func(m *kafka.Message) {
			it := need[at{p, int64(m.TopicPartition.Offset)}]
			if it == nil {
				return
			}
			delete(need, at{p, int64(m.TopicPartition.Offset)})
			if d, err := materializer.Digest(m); err != nil || !bytes.Equal(d, it.digest) {
				inv.Fail("%s: partition %d offset %d: the raw record's digest differs from the ledger's (%v)", it.lease, p, it.offset, err)
				return
			}
			it.value = m.Value
			read++
		})
		if err != nil {
			return read, err
		}
	}
	for k, it := range need {
		inv.Fail("%s: partition %d offset %d: a metadata-only row whose record the raw topic does not hold", it.lease, k.partition, k.offset)
	}
	return read, nil
}
