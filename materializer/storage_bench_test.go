package materializer

import (
	"testing"
	"time"
)

// footprint is what the ledger's accepted_records takes on disk, and the
// server's WAL position.
type footprint struct{ table, index, wal int64 }

func ledgerFootprint(b *testing.B, m *Materializer) footprint {
	b.Helper()
	var f footprint
	err := m.pool.QueryRow(b.Context(), `SELECT pg_table_size('accepted_records'), pg_indexes_size('accepted_records'),
		(pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint`).Scan(&f.table, &f.index, &f.wal)
	if err != nil {
		b.Fatal(err)
	}
	return f
}

// BenchmarkLedgerStorage: the bytes one accepted 1 KiB record costs the
// ledger in each LedgerValues mode: accepted_records' heap (TOAST, free
// space and visibility maps included), its indexes, and the WAL written
// while the chunks were applied (the server's: run it on a Postgres of
// its own, docs/RUNBOOK.md "Ledger retention"). One chunk of MaxBatch
// new records per transaction, as benchApply's fresh.
func BenchmarkLedgerStorage(b *testing.B) {
	for _, v := range []LedgerValues{KeepValues, DropValues} {
		b.Run("values="+string(v), func(b *testing.B) { benchStorage(b, v) })
	}
}

func benchStorage(b *testing.B, values LedgerValues) {
	m := newBenchMaterializer(b)
	m.cfg.LedgerValues = values
	l := newBenchLedger(b, m, 1)
	n := m.cfg.MaxBatch
	before := ledgerFootprint(b, m)
	accepted := m.verdictCounter(Accepted).Load()
	round := 0
	for b.Loop() {
		b.StopTimer()
		round++
		recs := l.chunk(n, round)
		b.StartTimer()
		l.apply(b, recs)
	}
	b.StopTimer()
	after := ledgerFootprint(b, m)
	records := int64(b.N * n)
	if got := m.verdictCounter(Accepted).Load() - accepted; got != records {
		b.Fatalf("%d records accepted, want %d", got, records)
	}
	perRecord := func(d int64) float64 { return float64(d) / float64(records) }
	b.ReportMetric(perRecord(after.table-before.table), "table-B/record")
	b.ReportMetric(perRecord(after.index-before.index), "index-B/record")
	b.ReportMetric(perRecord(after.wal-before.wal), "WAL-B/record")
	b.ReportMetric(float64(records)/b.Elapsed().Seconds(), "records/s")
}

// BenchmarkLedgerPrune: rows/s and WAL bytes per row of Prune deleting
// accepted 1 KiB records (values kept) in batches of DefaultPruneBatch;
// each iteration fills 20 chunks and prunes them all.
func BenchmarkLedgerPrune(b *testing.B) {
	m := newBenchMaterializer(b)
	l := newBenchLedger(b, m, 1)
	n := m.cfg.MaxBatch
	var deleted, wal int64
	round := 0
	for b.Loop() {
		b.StopTimer()
		for range 20 {
			round++
			l.apply(b, l.chunk(n, round))
		}
		before := ledgerFootprint(b, m)
		b.StartTimer()
		rep, err := Prune(b.Context(), m.pool, PruneConfig{Now: func() time.Time { return time.Now().Add(DefaultLedgerRetention + time.Hour) }})
		if err != nil || rep.Accepted != int64(20*n) {
			b.Fatalf("prune: %+v %v, want %d rows", rep, err, 20*n)
		}
		b.StopTimer()
		deleted += rep.Accepted
		wal += ledgerFootprint(b, m).wal - before.wal
		b.StartTimer()
	}
	b.ReportMetric(float64(deleted)/b.Elapsed().Seconds(), "rows/s")
	b.ReportMetric(float64(wal)/float64(deleted), "WAL-B/row")
}
