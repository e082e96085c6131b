package loadtest

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/fencegate/fencegate/internal/kafkadev"
	"github.com/fencegate/fencegate/loadtest/report"
	"github.com/fencegate/fencegate/loadtest/stack"
	"github.com/fencegate/fencegate/verify"
)

// The broker-fault scenario's judgement: after each fault the cluster
// whole again, then every lease served within one TTL.

func (r *runner) countBrokerFault(kind string, i int) {
	r.bf.mu.Lock()
	defer r.bf.mu.Unlock()
	r.bf.rep.Faults[kind]++
	r.bf.rep.Rounds = (i + 1) / len(r.sc.strikes())
}

func (r *runner) brokerFaultError(kind string, err error) {
	r.bf.mu.Lock()
	defer r.bf.mu.Unlock()
	r.bf.rep.Errors = append(r.bf.rep.Errors, fmt.Sprintf("%s: %v", kind, err))
}

// judgeBrokerFault records one fault's recovery: the cluster whole after
// toWhole, every lease served served after that; late are the leases not
// served within one TTL (a failure), ended says the run ended first.
func (r *runner) judgeBrokerFault(kind string, toWhole, served time.Duration, late []string, ended bool) {
	r.bf.mu.Lock()
	defer r.bf.mu.Unlock()
	b := r.bf.rep
	b.WholeMaxSeconds = max(b.WholeMaxSeconds, toWhole.Seconds())
	if r.opts.Progress != nil {
		fmt.Fprintf(r.opts.Progress, "\nbroker fault %s: cluster whole after %s, every lease served %s after that (late: %v, run ended first: %v)\n",
			kind, toWhole.Round(time.Millisecond), served.Round(time.Millisecond), late, ended)
	}
	switch {
	case len(late) > 0:
		b.NotServed++
		b.ServedMaxSeconds = max(b.ServedMaxSeconds, served.Seconds())
		if len(b.Late) < maxHistoryExamples {
			b.Late = append(b.Late, fmt.Sprintf("after %s: %v not served within one TTL of the cluster whole; every lease served %s after (run ended first: %v)",
				kind, late, served.Round(time.Millisecond), ended))
		}
	case ended:
		b.NotJudged++
	default:
		b.ServedMaxSeconds = max(b.ServedMaxSeconds, served.Seconds())
	}
}

// servedAgain waits until every lease has a batch acknowledged after
// since, and returns how long that took and the leases that had none
// within one TTL (judged late). It keeps waiting past the TTL, up to
// servedBound, so that a late lease's delay is measured, not guessed;
// ctx's end stops it (ended).
func (r *runner) servedAgain(ctx context.Context, since time.Time) (took time.Duration, late []string, ended bool) {
	for {
		missing := r.unservedSince(since)
		if len(missing) == 0 {
			return time.Since(since), late, false
		}
		if late == nil && time.Since(since) > r.sc.TTL {
			late = missing
		}
		if ctx.Err() != nil || time.Since(since) > servedBound*r.sc.TTL {
			return time.Since(since), late, true
		}
		wait(ctx, 20*time.Millisecond)
	}
}

// servedBound, in TTLs, is how long servedAgain measures a late lease.
const servedBound = 10

// unservedSince returns the leases with no batch acknowledged after t.
func (r *runner) unservedSince(t time.Time) []string {
	r.st.mu.Lock()
	seen := map[string]bool{}
	for i := len(r.st.acked) - 1; i >= 0 && r.st.acked[i].At.After(t); i-- {
		seen[r.st.acked[i].Lease] = true
	}
	r.st.mu.Unlock()
	var out []string
	for l := range r.sc.Leases {
		if name := fmt.Sprintf("shard:%d", l); !seen[name] {
			out = append(out, name)
		}
	}
	return out
}

// brokerFaultFigures are the report's figures of the broker faults (nil:
// none struck).
func (r *runner) brokerFaultFigures() *report.BrokerFaults {
	r.bf.mu.Lock()
	defer r.bf.mu.Unlock()
	return r.bf.rep
}

// kafkaReaderQuiet is how long, in seconds, Kafka's console consumer
// reads on without a record before it ends.
const kafkaReaderQuiet = 10

// checkKafkaReader reads the lease topic again with Kafka's own console
// consumer (read_committed) and compares the offsets
// it read with those fencegate's reader read, on which every other check
// was made: the verdicts hold for what a downstream reader of Apache
// Kafka sees.
func checkKafkaReader(_ context.Context, r *runner, rep *report.Report) error {
	recs, err := kafkadev.ConsoleReadTopic(r.stack.Kafka.Brokers, r.stack.Topic(), kafkaReaderQuiet)
	if err != nil {
		return err
	}
	byPartition := map[int32][]kafkadev.ToolRecord{}
	for _, rec := range recs {
		byPartition[rec.Partition] = append(byPartition[rec.Partition], rec)
	}
	b := rep.BrokerFaults
	b.KafkaRead = len(recs)
	for p := range int32(stack.Partitions) {
		if d := offsetsDiffer(byPartition[p], r.read[p]); d != "" {
			b.KafkaReadDiffers = append(b.KafkaReadDiffers, fmt.Sprintf("partition %d: %s", p, d))
		}
	}
	return nil
}

// offsetsDiffer says how the offsets Kafka's reader read differ from
// those fencegate's read ("": the same).
func offsetsDiffer(kafka []kafkadev.ToolRecord, ours []verify.Record) string {
	theirs := map[int64]bool{}
	for _, rec := range kafka {
		theirs[rec.Offset] = true
	}
	var onlyOurs []int64
	for _, rec := range ours {
		if !theirs[rec.Offset] {
			onlyOurs = append(onlyOurs, rec.Offset)
		}
		delete(theirs, rec.Offset)
	}
	if len(onlyOurs) == 0 && len(theirs) == 0 {
		return ""
	}
	onlyKafka := slices.Sorted(maps.Keys(theirs))
	return fmt.Sprintf("%d records only Kafka's reader read (first %v), %d only fencegate's (first %v)",
		len(onlyKafka), firstFew(onlyKafka), len(onlyOurs), firstFew(onlyOurs))
}

// firstFew is at most the first three of offs.
func firstFew(offs []int64) []int64 { return offs[:min(3, len(offs))] }
