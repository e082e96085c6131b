package materializer_test

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkLedgerThroughput: records/s from Kafka into the ledger, one
// valid generation, MaxBatch records per transaction.
func BenchmarkLedgerThroughput(b *testing.B) {
	const n = 5000
	tb := setup(b)
	recs := []rec{bar("shard:1", 1)}
	for i := range n {
		recs = append(recs, data("shard:1", 1, fmt.Sprintf("b%d", i/100), i%100))
	}
	last := tb.write(1, recs...)
	var total time.Duration
	for b.Loop() {
		if _, err := tb.db.Pool.Exec(tb.ctx, `TRUNCATE fences, accepted_records, rejected_records, consumer_positions`); err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		tb.runUntil(tb.newMaterializer(nil), tb.db, 1, last)
		total += time.Since(start)
	}
	b.ReportMetric(float64(b.N*n)/total.Seconds(), "records/s")
}
