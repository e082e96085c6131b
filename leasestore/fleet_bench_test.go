package leasestore_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencegate/fencegate/leasestore"
)

// BenchmarkRenewFleet renews a fleet of active leases at the SDK's default
// cadence (three renewals per TTL, spread evenly) through one Store, each
// renewal its own statement (alone) and coalesced with 1, 2 (the
// default) and 4 statements in flight,
// and reports per renewal: statements, commits (the bench database's
// xact_commit), WAL fsyncs (pg_stat_wal.wal_sync) and WAL bytes
// (pg_current_wal_lsn), the CPU of every process of the Postgres cluster
// (postmaster and children, /proc) and of this process, and the renewal
// latency p50/p99. WAL and Postgres CPU are the whole cluster's: run it
// on a cluster of its own (deploy/bench/renewals.sh does).
//
// FENCEGATE_BENCH_LEASES (default 5000), FENCEGATE_BENCH_TTL (default
// 10s) and FENCEGATE_BENCH_SECONDS (default 20) size it; the pool has
// `fencegate serve`'s 32 connections. Run with -benchtime=1x.
func BenchmarkRenewFleet(b *testing.B) {
	for _, c := range []leasestore.Config{
		{RenewBatch: 1},
		{RenewStatements: 1},
		{RenewStatements: leasestore.DefaultRenewStatements},
		{RenewStatements: 4},
	} {
		name := "alone"
		if c.RenewBatch != 1 {
			name = fmt.Sprintf("coalesced/statements=%d", c.RenewStatements)
		}
		b.Run(name, func(b *testing.B) {
			f := newFleet(b, c)
			f.run(b)
		})
	}
}

type fleet struct {
	tb     *testBundle
	store  *leasestore.Store
	pool   *pgxpool.Pool
	names  []string
	tokens []int64
	ttl    time.Duration
	window time.Duration
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func newFleet(b *testing.B, c leasestore.Config) *fleet {
	tb := setup(b)
	n := envInt("FENCEGATE_BENCH_LEASES", 5000)
	ttl := 10 * time.Second
	if d, err := time.ParseDuration(os.Getenv("FENCEGATE_BENCH_TTL")); err == nil {
		ttl = d
	}
	cfg, err := pgxpool.ParseConfig(tb.db.URL)
	if err != nil {
		b.Fatal(err)
	}
	cfg.MaxConns, cfg.MinConns = 32, 32
	cfg.AfterConnect = leasestore.PrepareConn
	pool, err := pgxpool.NewWithConfig(tb.ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	store, err := leasestore.New(pool, c)
	if err != nil {
		b.Fatal(err)
	}
	if err := store.Warm(tb.ctx, 32); err != nil {
		b.Fatal(err)
	}
	f := &fleet{tb: tb, store: store, pool: pool, ttl: ttl,
		window: time.Duration(envInt("FENCEGATE_BENCH_SECONDS", 20)) * time.Second}
	rows, err := pool.Query(tb.ctx, `
		INSERT INTO leases (name, owner_id, fencing_token, state, granted_at, expires_at, ttl_ms,
		                    holder, updated_at, producer_id, producer_epoch, client_id)
		SELECT 'fleet:' || i, 'w', nextval('lease_token_seq'), 'active', clock_timestamp(),
		       clock_timestamp() + interval '1 hour', $2::bigint, 'r', clock_timestamp(), i, 0, 'c'
		  FROM generate_series(1, $1::int) i
		RETURNING name, fencing_token`, n, ttl.Milliseconds())
	if err != nil {
		b.Fatal(err)
	}
	for rows.Next() {
		var name string
		var tok int64
		if err := rows.Scan(&name, &tok); err != nil {
			b.Fatal(err)
		}
		f.names, f.tokens = append(f.names, name), append(f.tokens, tok)
	}
	if err := rows.Err(); err != nil {
		b.Fatal(err)
	}
	return f
}

// run renews every lease every TTL/3: a warm-up until every lease has
// renewed once, then the measured window until every lease has renewed
// window/(TTL/3) times more; it reports the figures of the window.
func (f *fleet) run(b *testing.B) {
	every := f.ttl / 3
	cycles := max(1, int(f.window/every))
	var measuring atomic.Bool
	var failed atomic.Int64
	var warm, measured sync.WaitGroup
	warm.Add(len(f.names))
	measured.Add(len(f.names))
	stop := make(chan struct{})
	lat := make([][]time.Duration, len(f.names))
	var wg sync.WaitGroup
	start := time.Now()
	for i := range f.names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			next := start.Add(every * time.Duration(i) / time.Duration(len(f.names)))
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				case <-time.After(time.Until(next)): // pacing, not waiting for an event
				}
				next = next.Add(every)
				t0 := time.Now()
				_, err := f.store.Renew(f.tb.ctx, f.names[i], "w", f.tokens[i], f.ttl, "")
				if err != nil {
					failed.Add(1)
				}
				if n == 0 {
					warm.Done()
				}
				if measuring.Load() {
					if lat[i] = append(lat[i], time.Since(t0)); len(lat[i]) == cycles {
						measured.Done()
					}
				}
			}
		}()
	}
	warm.Wait()
	before := f.sample(b)
	measuring.Store(true)
	measured.Wait()
	measuring.Store(false)
	after := f.sample(b)
	close(stop)
	wg.Wait()
	all := slices.Concat(lat...)
	slices.Sort(all)
	n := float64(len(all))
	if n == 0 {
		b.Fatal("no renewal in the window")
	}
	d := after.minus(before)
	b.ReportMetric(n/d.wall.Seconds(), "renewals/s")
	b.ReportMetric(float64(d.statements)/n, "statements/renewal")
	b.ReportMetric(float64(d.commits)/n, "commits/renewal")
	b.ReportMetric(float64(d.walSyncs)/n, "walsyncs/renewal")
	b.ReportMetric(float64(d.walBytes)/n, "walB/renewal")
	b.ReportMetric(d.pgCPU.Seconds()*1e6/n, "pg-cpu-us/renewal")
	b.ReportMetric(d.pgCPU.Seconds()/d.wall.Seconds()*100, "pg-cpu-%core")
	b.ReportMetric(d.selfCPU.Seconds()*1e6/n, "client-cpu-us/renewal")
	b.ReportMetric(float64(all[len(all)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(all[len(all)*99/100].Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(failed.Load()), "failed")
	b.ReportMetric(0, "ns/op")
}

// fleetSample is the counters read at one instant.
type fleetSample struct {
	wall                time.Duration
	statements, commits int64
	walSyncs, walBytes  int64
	pgCPU, selfCPU      time.Duration
}

func (a fleetSample) minus(b fleetSample) fleetSample {
	return fleetSample{wall: a.wall - b.wall, statements: a.statements - b.statements,
		commits: a.commits - b.commits, walSyncs: a.walSyncs - b.walSyncs, walBytes: a.walBytes - b.walBytes,
		pgCPU: a.pgCPU - b.pgCPU, selfCPU: a.selfCPU - b.selfCPU}
}

func (f *fleet) sample(b *testing.B) fleetSample {
	ctx := context.Background()
	c, err := f.tb.db.Pool.Acquire(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Release()
	// Stats of other backends reach the shared counters when they flush
	// them; ask ours to flush first. xact_commit is the bench database's.
	var s fleetSample
	var pid int
	err = c.QueryRow(ctx, `SELECT pg_stat_force_next_flush(), pg_backend_pid()`).Scan(nil, &pid)
	if err == nil {
		err = c.QueryRow(ctx, `SELECT (SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()),
			(SELECT wal_sync FROM pg_stat_wal), pg_current_wal_lsn() - '0/0'::pg_lsn`).
			Scan(&s.commits, &s.walSyncs, &s.walBytes)
	}
	if err != nil {
		b.Fatal(err)
	}
	s.wall = time.Duration(time.Now().UnixNano())
	s.statements = leasestore.RenewStatements(f.store)
	s.pgCPU = clusterCPU(b, pid)
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	s.selfCPU = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	return s
}

// clusterCPU is the CPU time of backend's postmaster and of all its
// children, from /proc (clock ticks of 10 ms).
func clusterCPU(b *testing.B, backend int) time.Duration {
	_, postmaster, _ := procStat(b, backend)
	var ticks int64
	paths, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range paths {
		pid, _ := strconv.Atoi(strings.Split(p, "/")[2])
		used, parent, ok := procStat(b, pid)
		if ok && (pid == postmaster || parent == postmaster) {
			ticks += used
		}
	}
	return time.Duration(ticks) * 10 * time.Millisecond
}

// procStat reads pid's user+system ticks and parent; ok is false when it
// has gone.
func procStat(b *testing.B, pid int) (ticks int64, parent int, ok bool) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, false
	}
	// Fields after the command's closing parenthesis: state ppid ... utime(14) stime(15).
	s := string(raw)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	parent, _ = strconv.Atoi(fields[1])
	u, _ := strconv.ParseInt(fields[11], 10, 64)
	st, _ := strconv.ParseInt(fields[12], 10, 64)
	return u + st, parent, true
}
