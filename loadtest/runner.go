package loadtest

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/fencegate/fencegate/internal/telemetry"
	"github.com/fencegate/fencegate/loadtest/baseline"
	"github.com/fencegate/fencegate/loadtest/report"
	"github.com/fencegate/fencegate/loadtest/stack"
	"github.com/fencegate/fencegate/verify"
)

// Options of one run besides the scenario.
type Options struct {
	// Progress receives the live progress line (nil: none).
	Progress io.Writer
	// Terminal: refresh one line with \r instead of printing lines.
	Terminal bool
	Logger   *slog.Logger
	// Command is the command line the report records (nil: os.Args).
	Command []string
}

type runner struct {
	sc    Scenario
	stack *stack.Stack
	// clients by gateway URL and API client (index of the stack's
	// tokens): one per replica and API client, and one per holder_url a
	// 421 named.
	clientsMu sync.Mutex
	clients   map[clientKey]*client
	// lost are the offsets, per partition, of acknowledged records that
	// I3 found missing (described from the whole log afterwards).
	lost map[int32][]int64
	// read is what fencegate's reader read of the lease topic after the
	// run, per partition: what every check judges (verify).
	read  map[int32][]verify.Record
	st    *stats
	items *itemStats // the stateful workers' counts
	// fenced is the stateful workers' own table, written through
	// client/fencedb (nil: not stateful, or no database).
	fenced  *fencedState
	value   []byte
	workers [][]*worker
	opts    Options
	// bal are a balanced run's counts (SDK workers behind a balancer).
	bal *balancedStats
	// threadsBefore is the process's OS thread count before the run.
	threadsBefore int
	// matKills counts the materializer child's kills
	// (KillMaterializerEvery).
	matKills atomic.Int64
	// trustedJoins and trustedLeaves count the second trusted sink
	// instance's starts (each with partitions moved to it) and stops
	// (TrustedRebalanceEvery).
	trustedJoins, trustedLeaves atomic.Int64
	// trustedJoinMs is the longest join: start to both instances with
	// partitions.
	trustedJoinMs atomic.Int64
	// bf are the broker faults (BrokerFaultEvery).
	bf brokerFaultState
	// workerFaults orders the worker freezes with what holds them off
	// (freezesHeld: holdWorkerFreezes, as a broker fault's judgement
	// does); frozenWorkers counts the workers frozen now.
	workerFaults  sync.Mutex
	freezesHeld   bool
	frozenWorkers atomic.Int64
}

// threadCount reads the process's OS threads from /proc (0 if unknown).
func threadCount() int {
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "Threads:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return 0
}

// Run drives the stack with the scenario, then verifies and runs the
// baselines, and returns the report.
func Run(ctx context.Context, s *stack.Stack, sc Scenario, opts Options) (*report.Report, error) {
	if err := sc.Validate(); err != nil {
		return nil, err
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	for _, e := range on(sc, s) {
		if e.run != nil {
			return e.run(ctx, s, sc, opts)
		}
	}
	if err := needs(sc, s); err != nil {
		return nil, err
	}
	r := newRunner(s, sc, opts)
	for _, e := range on(sc, s) {
		if e.prepare != nil {
			if err := e.prepare(ctx, r); err != nil {
				return nil, err
			}
		}
	}
	sep, _ := s.Separate()
	pause := sep.PauseMaterializer
	if pause {
		if err := s.SignalMaterializer(syscall.SIGSTOP); err != nil {
			return nil, err
		}
	}
	started := time.Now()
	sampling := s.StartSampling()
	if err := r.gatewayPhase(ctx); err != nil {
		return nil, err
	}
	usage := sampling.Stop()
	if pause {
		if err := s.SignalMaterializer(syscall.SIGCONT); err != nil {
			return nil, err
		}
	}
	rep := r.report()
	for _, e := range on(sc, s) {
		if e.figures != nil {
			e.figures(r, rep, started.Add(sc.Duration))
		}
	}
	rep.Run = runInfo(started, opts.Command)
	rep.MaterializerPaused = pause
	r.addGatewayPhase(rep, usage)
	if err := r.verify(ctx, rep); err != nil {
		return rep, err
	}
	if err := r.baselines(ctx, rep); err != nil {
		return rep, err
	}
	rep.Finish()
	return rep, nil
}

func newRunner(s *stack.Stack, sc Scenario, opts Options) *runner {
	return &runner{sc: sc, stack: s, clients: map[clientKey]*client{}, lost: map[int32][]int64{},
		st: newStats(sc.Leases), items: &itemStats{}, value: recordValue(sc.RecordSize), opts: opts, threadsBefore: threadCount(),
		bal: newBalancedStats()}
}

// runInfo is the report's account of a run started at started by this
// binary with the command line command (nil: this process's).
func runInfo(started time.Time, command []string) report.RunInfo {
	if command == nil {
		command = os.Args
	}
	b := telemetry.Build()
	return report.NewRunInfo(started, b.Version, b.Commit, command)
}

func (r *runner) gatewayPhase(ctx context.Context) error {
	pctx, cancel := context.WithTimeout(ctx, r.sc.Duration)
	defer cancel()
	r.st = newStats(r.sc.Leases)
	var wg sync.WaitGroup
	if r.balanced() {
		if err := r.startSDKWorkers(pctx, &wg); err != nil {
			return err
		}
	} else {
		r.startWorkers(pctx, &wg)
	}
	var faults sync.WaitGroup
	fctx, fcancel := r.faultWindow(pctx)
	defer fcancel()
	r.every(pctx, &faults, time.Second, r.progress)
	p := &phase{ctx: pctx, faultCtx: fctx, end: func() { r.st.endEarly(); cancel() }, faults: &faults}
	for _, e := range on(r.sc, r.stack) {
		if e.start != nil {
			if err := e.start(r, p); err != nil {
				return err
			}
		}
	}
	wg.Wait()
	faults.Wait()
	r.progressDone()
	return nil
}

// startWorkers starts the gateway workers, WorkersPerLease for each of
// the leases shard:0..shard:Leases-1, until ctx ends.
func (r *runner) startWorkers(ctx context.Context, wg *sync.WaitGroup) {
	urls, tokens := r.stack.URLs(), r.stack.WorkerTokens()
	for l := range r.sc.Leases {
		var ws []*worker
		for i := range r.sc.WorkersPerLease {
			// Contenders of a lease start on different replicas, so that
			// one of them takes the lease over while the other's replica
			// is frozen.
			// Workers take the API clients in turn.
			w := &worker{id: fmt.Sprintf("w%d-%d", l, i), lease: fmt.Sprintf("shard:%d", l), r: r,
				api: (l*r.sc.WorkersPerLease + i) % len(tokens)}
			w.gw.Store(r.client(urls[(l+i)%len(urls)], w.api))
			ws = append(ws, w)
			wg.Add(1)
			go func() { defer wg.Done(); w.run(ctx) }()
		}
		r.workers = append(r.workers, ws)
	}
}

// clientKey names a client: a gateway URL and an API client.
type clientKey struct {
	url string
	api int
}

// client returns the client of the gateway at url as API client api (an
// index of the stack's tokens). Each has connections of its own, enough
// for its share of the workers.
func (r *runner) client(url string, api int) *client {
	r.clientsMu.Lock()
	defer r.clientsMu.Unlock()
	k := clientKey{url, api}
	c := r.clients[k]
	if c == nil {
		tokens := r.stack.WorkerTokens()
		workers := r.sc.Leases * r.sc.WorkersPerLease
		c = newClient(url, tokens[api], (workers+len(tokens)-1)/len(tokens)+8)
		r.clients[k] = c
	}
	return c
}

// every runs fn every d until ctx ends (d == 0: never).
func (r *runner) every(ctx context.Context, wg *sync.WaitGroup, d time.Duration, fn func()) {
	if d <= 0 {
		return
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(d)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				fn()
			}
		}
	}()
}

// faultWindow is the part of the run in which replica faults strike: all
// of it but the last three TTLs (at least 5 s), in which every lease must
// be served again after the last fault.
func (r *runner) faultWindow(ctx context.Context) (context.Context, context.CancelFunc) {
	quiet := max(3*r.sc.TTL, 5*time.Second)
	return context.WithTimeout(ctx, max(r.sc.Duration-quiet, r.sc.Duration/2))
}

// churnHolder forces one current holder to hand its lease over.
func (r *runner) churnHolder() { r.pickHolder(func(w *worker) { w.churn.Store(true) }) }

// pickHolder applies fn to one random current holder (racy by design: a
// worker checks its flag on its next step).
func (r *runner) pickHolder(fn func(*worker)) {
	for _, l := range rand.Perm(len(r.workers)) {
		for _, w := range r.workers[l] {
			if w.owned.Load() {
				fn(w)
				return
			}
		}
	}
}

// nextBatch returns when the batch after one due at prev is due
// (baseline.NextBatch at the scenario's rate).
func (r *runner) nextBatch(prev time.Time) time.Time { return baseline.NextBatch(prev, r.sc.Rate) }

func (r *runner) progressLine() string {
	el := time.Since(r.st.start)
	return fmt.Sprintf("%5.0fs  %8.0f rec/s  %6.0f batch/s  p50 %6.1fms  p99 %6.1fms  handovers %d  stale refused %d  fenced %d  errors %d",
		el.Seconds(), float64(r.st.records.Load())/el.Seconds(), float64(r.st.batches.Load())/el.Seconds(),
		r.st.produce.Ms(0.5), r.st.produce.Ms(0.99), r.st.handovers.Load(), r.st.staleRefused.Load(),
		r.st.fences.Load(), r.st.errors.Load())
}

func (r *runner) progress() {
	if r.opts.Progress == nil {
		return
	}
	if r.opts.Terminal {
		fmt.Fprintf(r.opts.Progress, "\r%s", r.progressLine())
		return
	}
	fmt.Fprintln(r.opts.Progress, r.progressLine())
}

func (r *runner) progressDone() {
	if r.opts.Progress != nil && r.opts.Terminal {
		fmt.Fprintf(r.opts.Progress, "\r%s\n", r.progressLine())
	}
}

// holdWorkerFreezes turns the worker freezes off (on: true), calls off
// those told and not begun (a worker that lost its lease keeps its flag
// until it holds one again, which may be never), and waits until no
// worker is frozen; or turns them back on.
func (r *runner) holdWorkerFreezes(ctx context.Context, on bool) {
	r.workerFaults.Lock()
	r.freezesHeld = on
	if on {
		for _, ws := range r.workers {
			for _, w := range ws {
				w.freeze.Store(false)
			}
		}
	}
	r.workerFaults.Unlock()
	for on && ctx.Err() == nil && r.frozenWorkers.Load() > 0 {
		wait(ctx, 50*time.Millisecond)
	}
}

// freezeWorker is the worker-freeze fault, unless something holds the
// freezes off (holdWorkerFreezes).
func (r *runner) freezeWorker() {
	r.workerFaults.Lock()
	defer r.workerFaults.Unlock()
	if !r.freezesHeld {
		r.pickHolder(func(w *worker) { w.freeze.Store(true) })
	}
}
