package loadtest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fencegate/fencegate/kafkaconn"
)

// Separate processes (`loadtest --embedded --separate-processes`): the
// broker (kfake served by `fencegate devbroker`), the gateway (`serve`),
// the materializer (`materialize`) and each baseline (`fencegate
// loadtest-baseline`) run as child processes of the harness, so that the
// CPU and memory of each can be told apart. In one process the broker's
// log is Go heap that the gateway's garbage collector scans, and the load
// generator's CPU is indistinguishable from the gateway's.
//
// CPU is utime+stime of /proc/<pid>/stat in clock ticks; Linux reports
// them in USER_HZ, which is 100 on every architecture Go supports
// (sysconf(_SC_CLK_TCK) returns the same constant), so ticks/100 are
// seconds. A baseline child's CPU is its whole life from the kernel's
// accounting at exit (wait4 rusage): it includes its start and the
// InitTransactions of its producers. Resident memory is VmRSS of
// /proc/<pid>/status, sampled every samplePeriod; the report keeps each
// process's peak.

// clockTicks is USER_HZ, the unit of utime and stime in /proc/<pid>/stat.
const clockTicks = 100

// samplePeriod is how often RSS (and CPU, for restarted children) is read.
const samplePeriod = 250 * time.Millisecond

// Process names in the report.
const (
	ProcBroker       = "broker"
	ProcGateway      = "gateway"
	ProcMaterializer = "materializer"
	ProcHarness      = "harness"
	ProcDirect       = "direct"
	ProcBare         = "bare"
)

// SeparateOptions tune StartSeparateProcesses.
type SeparateOptions struct {
	// GatewayDebugListen, when set, is the gateway child's --debug-listen
	// (net/http/pprof), so that a profile can be taken under load.
	GatewayDebugListen string
	// BareProducers is the number of producers of the bare-producer
	// yardstick run after the direct baseline (0: no yardstick).
	BareProducers int
	// GatewayArgs are more `serve` flags for the gateway child, after the
	// harness's own (a later flag wins), e.g. --park-after=0.
	GatewayArgs []string
	// PauseMaterializer stops the materializer child (SIGSTOP) for the
	// gateway phase and resumes it after, so that the gateway phase, like
	// the direct baseline, runs without a reader of its topic on the
	// broker; the ledger is checked once it has caught up.
	PauseMaterializer bool
}

// separate is what the harness needs of the children besides the gateway.
type separate struct {
	exe   string
	opts  SeparateOptions
	procs []process
}

// process is a child (or the harness itself) whose CPU and memory are
// sampled; pid is read at each sample because a restarted child has a new
// one (0: not running).
type process struct {
	name string
	pid  func() int
}

// signalMaterializer sends sig to the materializer child (separate
// processes only; a no-op otherwise).
func (s *Stack) signalMaterializer(sig syscall.Signal) error {
	if s.separate == nil {
		return nil
	}
	for _, p := range s.separate.procs {
		if pid := p.pid(); p.name == ProcMaterializer && pid > 0 {
			return syscall.Kill(pid, sig)
		}
	}
	return errors.New("no materializer child to signal")
}

// StartSeparateProcesses is StartEmbedded with every component in a child
// process started from exe (the fencegate binary): a fresh database on
// serverURL's server, a kfake broker, one gateway and a materializer.
func StartSeparateProcesses(ctx context.Context, serverURL, exe string, opts SeparateOptions, log *slog.Logger, stackOpts ...StackOption) (*Stack, error) {
	s, err := newStack(stackOpts)
	if err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			s.Close()
		}
	}()
	if err := s.freshDatabase(ctx, serverURL); err != nil {
		return nil, err
	}
	if s.Router, err = newRouter(); err != nil {
		return nil, err
	}
	cfg, err := writeChildConfig(s)
	if err != nil {
		return nil, err
	}
	sep := &separate{exe: exe, opts: opts}
	broker, err := startBroker(ctx, exe, cfg)
	if err != nil {
		return nil, err
	}
	s.closers = append(s.closers, broker.stop)
	s.Kafka = kafkaconn.Config{Brokers: broker.addr}
	c, err := newChildGateway(s, exe, cfg, "loadtest-replica-0", log)
	if err != nil {
		return nil, err
	}
	if opts.GatewayDebugListen != "" {
		c.args = append(c.args, "--debug-listen", opts.GatewayDebugListen)
	}
	c.args = append(c.args, opts.GatewayArgs...)
	if err := c.start(ctx); err != nil {
		c.stop()
		return nil, err
	}
	s.children = append(s.children, c)
	s.GatewayURLs = append(s.GatewayURLs, "http://"+c.addr)
	s.GatewayURL = s.GatewayURLs[0]
	s.closers = append(s.closers, c.stop)
	mat, err := startMaterializerChild(ctx, s, exe, cfg)
	if err != nil {
		return nil, err
	}
	s.closers = append(s.closers, mat.stop)
	sep.procs = []process{
		{ProcBroker, broker.pid}, {ProcGateway, c.pid}, {ProcMaterializer, mat.pid},
		{ProcHarness, os.Getpid},
	}
	s.separate = sep
	ok = true
	return s, nil
}

// child is a long-lived child process stopped with SIGTERM at the end.
type child struct {
	cmd  *exec.Cmd
	addr string
}

func (c *child) pid() int { return c.cmd.Process.Pid }

// stop sends SIGTERM, waits up to 10 s for the exit, then kills.
func (c *child) stop() {
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	exited := make(chan struct{})
	go func() { _ = c.cmd.Wait(); close(exited) }()
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		_ = c.cmd.Process.Kill()
		<-exited
	}
}

// pid of the gateway child (0 while it is not running).
func (c *childGateway) pid() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cmd == nil {
		return 0
	}
	return c.cmd.Process.Pid
}

// freeAddr returns a loopback address with a port free a moment ago.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// startBroker runs `fencegate devbroker` with the routed topics and the
// direct baseline's, and waits for its "ready" line.
func startBroker(ctx context.Context, exe, cfg string) (*child, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, "devbroker", "--listen", addr, "--config", cfg,
		"--topic", DirectTopic, "--partitions", strconv.Itoa(Partitions))
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &child{cmd: cmd, addr: addr}
	ready := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "ready ") {
				ready <- nil
				break
			}
		}
		// Keep reading so that the child never blocks on a full pipe.
		for sc.Scan() {
		}
		select {
		case ready <- errors.New("the broker child exited before it was ready"):
		default:
		}
	}()
	select {
	case err = <-ready:
	case <-time.After(30 * time.Second):
		err = errors.New("the broker child did not become ready")
	case <-ctx.Done():
		err = ctx.Err()
	}
	if err != nil {
		c.stop()
		return nil, err
	}
	return c, nil
}

// startMaterializerChild runs `fencegate materialize` on the stack's
// database and broker and waits for its readiness.
func startMaterializerChild(ctx context.Context, s *Stack, exe, cfg string) (*child, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	args := append([]string{"materialize", "--listen", addr, "--database-url", s.DatabaseURL, "--config", cfg}, kafkaArgs(s.Kafka)...)
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), "FENCEGATE_BARRIER_KEY="+barrierKey)
	if s.Kafka.SASLPassword != "" {
		cmd.Env = append(cmd.Env, "FENCEGATE_KAFKA_SASL_PASSWORD="+s.Kafka.SASLPassword)
	}
	logTail := &tail{}
	cmd.Stderr = logTail
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &child{cmd: cmd, addr: addr}
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline) && ctx.Err() == nil; {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return c, nil
			}
		}
		wait(ctx, 50*time.Millisecond)
	}
	c.stop()
	return nil, fmt.Errorf("the materializer child did not become ready: %s", logTail)
}

// tail keeps the last 4 KiB written to it: a child's log, for errors.
type tail struct {
	mu  sync.Mutex
	buf []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if n := len(t.buf) - 4096; n > 0 {
		t.buf = append(t.buf[:0], t.buf[n:]...)
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(string(t.buf))
}

// sampler accumulates the CPU ticks and peak RSS of processes over one
// phase of the run.
type sampler struct {
	procs []process
	start time.Time
	mu    sync.Mutex
	last  map[string][2]int64 // name -> pid, ticks at the last sample
	ticks map[string]int64    // ticks in this phase
	rssKB map[string]int64    // peak
	stopc chan struct{}
	done  chan struct{}
}

// startSampling samples the stack's processes (and extra) until stop; nil
// when the stack's components do not run as separate processes.
func (s *Stack) startSampling(extra ...process) *sampler {
	if s.separate == nil {
		return nil
	}
	sm := &sampler{procs: append(append([]process{}, s.separate.procs...), extra...), start: time.Now(),
		last: map[string][2]int64{}, ticks: map[string]int64{}, rssKB: map[string]int64{},
		stopc: make(chan struct{}), done: make(chan struct{})}
	sm.sample(true)
	go func() {
		defer close(sm.done)
		t := time.NewTicker(samplePeriod)
		defer t.Stop()
		for {
			select {
			case <-sm.stopc:
				return
			case <-t.C:
				sm.sample(false)
			}
		}
	}()
	return sm
}

// sample reads every process once. The first sample of a pid only sets
// its starting point; a pid first seen later (a restarted child) counts
// from its start.
func (sm *sampler) sample(first bool) {
	sm.mu.Lock()
	defer sm.mu.Unlock()
	for _, p := range sm.procs {
		pid := p.pid()
		if pid <= 0 {
			continue
		}
		ticks, err := procTicks(pid)
		if err != nil {
			continue // exited between the pid and the read
		}
		prev, seen := sm.last[p.name]
		switch {
		case seen && prev[0] == int64(pid):
			sm.ticks[p.name] += ticks - prev[1]
		case !first:
			sm.ticks[p.name] += ticks
		}
		sm.last[p.name] = [2]int64{int64(pid), ticks}
		if kb := procRSSKB(pid); kb > sm.rssKB[p.name] {
			sm.rssKB[p.name] = kb
		}
	}
}

// phaseUsage is what a sampler measured over one phase.
type phaseUsage struct {
	seconds float64
	cpu     map[string]float64 // CPU seconds by process
	rssKB   map[string]int64   // peak
}

// stop takes a last sample and returns the phase's figures (nil sampler:
// nil).
func (sm *sampler) stop() *phaseUsage {
	if sm == nil {
		return nil
	}
	close(sm.stopc)
	<-sm.done
	sm.sample(false)
	u := &phaseUsage{seconds: time.Since(sm.start).Seconds(), cpu: map[string]float64{}, rssKB: sm.rssKB}
	for _, p := range sm.procs {
		u.cpu[p.name] = float64(sm.ticks[p.name]) / clockTicks
	}
	return u
}

// procTicks returns utime+stime of pid in clock ticks.
func procTicks(pid int) (int64, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces:
	// fields are counted after the last ')'. utime and stime are fields
	// 14 and 15, so 12 and 13 after it.
	i := bytes.LastIndexByte(raw, ')')
	if i < 0 {
		return 0, errors.New("unexpected /proc stat format")
	}
	f := strings.Fields(string(raw[i+1:]))
	if len(f) < 13 {
		return 0, errors.New("unexpected /proc stat format")
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	s, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return u + s, nil
}

// procRSSKB returns VmRSS of pid in KiB (0 if unknown).
func procRSSKB(pid int) int64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	return 0
}

// CPUFigures attribute CPU to processes (separate processes only).
type CPUFigures struct {
	// GatewaySecondsPerGiB is the gateway process's CPU seconds in the
	// gateway phase per GiB of record values acknowledged;
	// DirectSecondsPerGiB the direct baseline process's (its whole life)
	// per GiB it committed; BareSecondsPerGiB the bare-producer
	// yardstick's.
	GatewaySecondsPerGiB float64 `json:"gateway_seconds_per_gib"`
	DirectSecondsPerGiB  float64 `json:"direct_seconds_per_gib"`
	BareSecondsPerGiB    float64 `json:"bare_seconds_per_gib,omitempty"`
	// RatioGatewayDirect is GatewaySecondsPerGiB / DirectSecondsPerGiB.
	RatioGatewayDirect float64 `json:"ratio_gateway_direct"`
	// Phases: by phase ("gateway", "direct", "bare"), its wall seconds and
	// each process's CPU seconds in it.
	Phases map[string]PhaseCPU `json:"phases"`
}

// PhaseCPU is one phase's CPU by process.
type PhaseCPU struct {
	Seconds float64            `json:"seconds"`
	CPU     map[string]float64 `json:"cpu_seconds"`
}

// BareFigures are the bare-producer yardstick's: transactional producers
// in a loop, no HTTP, no leases, no per-record delivery wait.
type BareFigures struct {
	Producers int     `json:"producers"`
	Records   int64   `json:"records"`
	Seconds   float64 `json:"seconds"`
	// RecordsPerS and RatioDirectBare (direct records/s over these).
	RecordsPerS     float64 `json:"records_per_s"`
	RatioDirectBare float64 `json:"ratio_direct_bare"`
}

// addPhase records a phase's usage in the report.
func (rep *Report) addPhase(name string, u *phaseUsage) {
	if u == nil {
		return
	}
	if rep.CPU == nil {
		rep.CPU = &CPUFigures{Phases: map[string]PhaseCPU{}}
	}
	if rep.RSSMiB == nil {
		rep.RSSMiB = map[string]float64{}
	}
	rep.CPU.Phases[name] = PhaseCPU{Seconds: u.seconds, CPU: u.cpu}
	for p, kb := range u.rssKB {
		rep.RSSMiB[p] = max(rep.RSSMiB[p], float64(kb)/1024)
	}
}

const gib = 1 << 30

// finishCPU computes the per-GiB figures and ratios.
func (rep *Report) finishCPU() {
	c := rep.CPU
	if c == nil {
		return
	}
	perGiB := func(cpu float64, records int64) float64 {
		if records <= 0 || rep.Scenario.RecordSize <= 0 {
			return 0
		}
		return cpu / (float64(records) * float64(rep.Scenario.RecordSize) / gib)
	}
	c.GatewaySecondsPerGiB = perGiB(c.Phases["gateway"].CPU[ProcGateway], rep.Gateway.Records)
	c.DirectSecondsPerGiB = perGiB(c.Phases["direct"].CPU[ProcDirect], rep.Direct.Records)
	if c.DirectSecondsPerGiB > 0 {
		c.RatioGatewayDirect = c.GatewaySecondsPerGiB / c.DirectSecondsPerGiB
	}
	if b := rep.Bare; b != nil {
		c.BareSecondsPerGiB = perGiB(c.Phases["bare"].CPU[ProcBare], b.Records)
		if b.Seconds > 0 {
			b.RecordsPerS = float64(b.Records) / b.Seconds
		}
		if b.RecordsPerS > 0 {
			b.RatioDirectBare = rep.Throughput.DirectRecordsPerS / b.RecordsPerS
		}
	}
}

// baselineOutput is what `fencegate loadtest-baseline` prints.
type baselineOutput struct {
	Direct *DirectFigures `json:"direct,omitempty"`
	Bare   *BareFigures   `json:"bare,omitempty"`
}

// runBaselineChild runs `fencegate loadtest-baseline` with args while
// sampling the stack's processes, and returns its output and its CPU
// (the kernel's account of its whole life) in the phase's usage.
func (r *runner) runBaselineChild(ctx context.Context, name string, args []string) (*baselineOutput, *phaseUsage, error) {
	sep := r.stack.separate
	args = append(append([]string{"loadtest-baseline"}, args...), kafkaArgs(r.stack.Kafka)...)
	cmd := exec.CommandContext(ctx, sep.exe, args...)
	cmd.Env = os.Environ()
	if r.stack.Kafka.SASLPassword != "" {
		cmd.Env = append(cmd.Env, "FENCEGATE_KAFKA_SASL_PASSWORD="+r.stack.Kafka.SASLPassword)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	pid := cmd.Process.Pid
	var exited sync.Mutex // guards reading the pid's /proc after the reap
	gone := false
	sm := r.stack.startSampling(process{name, func() int {
		exited.Lock()
		defer exited.Unlock()
		if gone {
			return 0
		}
		return pid
	}})
	werr := cmd.Wait()
	exited.Lock()
	gone = true
	exited.Unlock()
	u := sm.stop()
	if werr != nil {
		return nil, u, fmt.Errorf("%s child: %w: %s", name, werr, strings.TrimSpace(stderr.String()))
	}
	u.cpu[name] = (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds()
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		u.rssKB[name] = max(u.rssKB[name], ru.Maxrss) // KiB on Linux
	}
	var out baselineOutput
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		return nil, u, fmt.Errorf("%s child output: %w", name, err)
	}
	return &out, u, nil
}

// directChild runs the direct baseline in its own process.
func (r *runner) directChild(ctx context.Context, rep *Report) error {
	out, u, err := r.runBaselineChild(ctx, ProcDirect, []string{"--mode", "direct",
		"--producers", strconv.Itoa(r.sc.Leases), "--batch-size", strconv.Itoa(r.sc.BatchSize),
		"--record-size", strconv.Itoa(r.sc.RecordSize), "--duration", r.baselineDuration().String()})
	rep.addPhase("direct", u)
	if err != nil {
		return err
	}
	if out.Direct == nil {
		return errors.New("the direct child printed no figures")
	}
	rep.Direct = *out.Direct
	return nil
}

// bareChild runs the bare-producer yardstick in its own process.
func (r *runner) bareChild(ctx context.Context, rep *Report) error {
	n := r.stack.separate.opts.BareProducers
	out, u, err := r.runBaselineChild(ctx, ProcBare, []string{"--mode", "bare",
		"--producers", strconv.Itoa(n), "--batch-size", strconv.Itoa(r.sc.BatchSize),
		"--record-size", strconv.Itoa(r.sc.RecordSize), "--duration", r.baselineDuration().String()})
	rep.addPhase("bare", u)
	if err != nil {
		return err
	}
	if out.Bare == nil {
		return errors.New("the bare child printed no figures")
	}
	rep.Bare = out.Bare
	return nil
}

// separateBaselines runs the baselines that have a process of their own.
func (r *runner) separateBaselines(ctx context.Context, rep *Report) error {
	if r.sc.Direct {
		if err := r.directChild(ctx, rep); err != nil {
			return fmt.Errorf("direct baseline: %w", err)
		}
	}
	if r.stack.separate.opts.BareProducers > 0 {
		if err := r.bareChild(ctx, rep); err != nil {
			return fmt.Errorf("bare-producer yardstick: %w", err)
		}
	}
	return nil
}

// writeProcesses writes the per-process figures to the Markdown summary.
func (rep *Report) writeProcesses(w io.Writer) {
	c := rep.CPU
	if c == nil {
		return
	}
	fmt.Fprintln(w, "\n| process | CPU s (cores), gateway phase | CPU s (cores), direct phase | CPU s (cores), bare phase | peak RSS MiB |")
	fmt.Fprintln(w, "|---|---|---|---|---|")
	cell := func(phase, proc string) string {
		p, ok := c.Phases[phase]
		v, has := p.CPU[proc]
		if !ok || !has || p.Seconds <= 0 {
			return ""
		}
		return fmt.Sprintf("%.1f (%.2f)", v, v/p.Seconds)
	}
	for _, proc := range []string{ProcGateway, ProcBroker, ProcMaterializer, ProcHarness, ProcDirect, ProcBare} {
		if _, ok := rep.RSSMiB[proc]; !ok {
			continue
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %.0f |\n", proc, cell("gateway", proc), cell("direct", proc), cell("bare", proc), rep.RSSMiB[proc])
	}
	fmt.Fprintf(w, "\nCPU per GiB of record values: gateway process %.1f s, direct producer process %.1f s (ratio %.2f)",
		c.GatewaySecondsPerGiB, c.DirectSecondsPerGiB, c.RatioGatewayDirect)
	if b := rep.Bare; b != nil {
		fmt.Fprintf(w, ", bare producers %.1f s\nbare-producer yardstick: %d producers, %.0f records/s; direct / bare %.2f",
			c.BareSecondsPerGiB, b.Producers, b.RecordsPerS, b.RatioDirectBare)
	}
	fmt.Fprintln(w)
}

// processCells are the HTML report's rows of the per-process figures.
func (rep *Report) processCells() [][2]cell {
	c := rep.CPU
	if c == nil {
		return nil
	}
	rows := [][2]cell{
		{text("gateway process CPU per GiB"), text(fmt.Sprintf("%.1f s", c.GatewaySecondsPerGiB))},
		{text("direct producer process CPU per GiB"), text(fmt.Sprintf("%.1f s (gateway / direct %.2f)", c.DirectSecondsPerGiB, c.RatioGatewayDirect))},
	}
	if b := rep.Bare; b != nil {
		rows = append(rows, [2]cell{text(fmt.Sprintf("bare producers (%d) records/s", b.Producers)),
			text(fmt.Sprintf("%s (direct / bare %.2f; %.1f CPU s per GiB)", num(b.RecordsPerS), b.RatioDirectBare, c.BareSecondsPerGiB))})
	}
	for _, phase := range []string{"gateway", "direct", "bare"} {
		p, ok := c.Phases[phase]
		if !ok || p.Seconds <= 0 {
			continue
		}
		var parts []string
		for _, proc := range sortedNames(p.CPU) {
			parts = append(parts, fmt.Sprintf("%s %.2f", proc, p.CPU[proc]/p.Seconds))
		}
		rows = append(rows, [2]cell{text("cores by process, " + phase + " phase"), text(strings.Join(parts, ", "))})
	}
	var parts []string
	for _, proc := range sortedNames(rep.RSSMiB) {
		parts = append(parts, fmt.Sprintf("%s %.0f", proc, rep.RSSMiB[proc]))
	}
	return append(rows, [2]cell{text("peak resident memory, MiB"), text(strings.Join(parts, ", "))})
}

func sortedNames(m map[string]float64) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
