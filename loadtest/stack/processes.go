package stack

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fencegate/fencegate/kafkaconn"
	"github.com/fencegate/fencegate/loadtest/report"
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

// The hidden subcommands of the fencegate binary that the stack starts as
// child processes; cmd/fencegate/hidden.go implements both, on
// startDevBroker (the broker of `fencegate dev`) and on the baselines of
// package loadtest.
const (
	CommandDevBroker = "devbroker"
	CommandBaseline  = "loadtest-baseline"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/<pid>/stat.
const clockTicks = 100

// samplePeriod is how often RSS (and CPU, for restarted children) is read.
const samplePeriod = 250 * time.Millisecond

// SeparateOptions tune StartSeparateProcesses.
type SeparateOptions struct {
	// GatewayDebugListen, when set, is the gateway child's --debug-listen
	// (net/http/pprof), so that a profile can be taken under load.
	GatewayDebugListen string
	// BareProducers is the number of producers of the bare-producer
	// yardstick run after the direct baseline (0: no yardstick).
	BareProducers int
	// BareHandovers is the number of loops of the handover yardstick
	// (baseline.RunBareHandovers) run after the gateway phase (0: none).
	BareHandovers int
	// GatewayArgs are more `serve` flags for the gateway child, after the
	// harness's own (a later flag wins), e.g. --park-after=0.
	GatewayArgs []string
	// PauseMaterializer stops the materializer child (SIGSTOP) for the
	// gateway phase and resumes it after, so that the gateway phase, like
	// the direct baseline, runs without a reader of its topic on the
	// broker; the ledger is checked once it has caught up.
	PauseMaterializer bool
	// Replicas is the number of gateway child processes (0 or 1: one,
	// named report.ProcGateway; more: report.ReplicaProc's names), each
	// with its CPU and memory in the report. Only the first gets
	// GatewayDebugListen.
	Replicas int
	// NoMaterializer starts no materializer: the broker has no reader of
	// the lease topic besides the checks after the run, and the ledger is
	// not checked (the report says so). For runs that measure the
	// gateways, whose ledger would otherwise take a share of the cores.
	NoMaterializer bool
	// Brokers, when set, is an external Kafka cluster (Apache Kafka from
	// deploy/dev/kafka.sh) used instead of the kfake broker child: the
	// harness creates the routed topics and the direct baseline's there
	// (one that exists is kept, so the caller deletes them before a run
	// whose checks must read only that run's records).
	Brokers string
	// BrokerPID, with Brokers, is the external broker's pid, sampled as
	// report.ProcBroker like a child (0: not sampled).
	BrokerPID int
	// KafkaCluster starts a three-node Apache Kafka cluster of the
	// harness's own (kafka.sh cluster, every node behind a fault proxy;
	// KafkaCluster) and uses it as Brokers, for the broker faults of
	// Scenario.BrokerFaultEvery.
	KafkaCluster bool
}

// separate is what the harness needs of the children besides the gateway.
type separate struct {
	exe   string
	cfg   string // the children's config file
	opts  SeparateOptions
	procs []Process
	// mat is the materializer child (nil: none), replaced when
	// KillMaterializer restarts it.
	matMu sync.Mutex
	mat   *child
	// second is a trusted-only materializer child of the same group,
	// started and stopped by ToggleSecondTrusted (nil: not running).
	second *child
}

func (sep *separate) setMat(c *child) {
	sep.matMu.Lock()
	defer sep.matMu.Unlock()
	sep.mat = c
}

// MaterializerLog is the end of the materializer child's log, for a
// failure that the materializer may explain ("": no child).
func (s *Stack) MaterializerLog() string { return s.materializerLog((*tail).String) }

// TrustedSinkLog returns the last 16 KiB of the materializer child's
// lines about its trusted sink ("" without a child), which its other
// lines would push out of MaterializerLog.
func (s *Stack) TrustedSinkLog() string { return s.materializerLog((*tail).Kept) }

func (s *Stack) materializerLog(part func(*tail) string) string {
	if s.separate == nil {
		return ""
	}
	s.separate.matMu.Lock()
	defer s.separate.matMu.Unlock()
	if s.separate.mat == nil || s.separate.mat.log == nil {
		return ""
	}
	return part(s.separate.mat.log)
}

// MaterializerGoroutines returns the materializer child's goroutines
// with their stacks, from its pprof listener: where a stalled sink
// waits.
func (s *Stack) MaterializerGoroutines() (string, error) {
	if s.separate == nil {
		return "", errors.New("no materializer child")
	}
	s.separate.matMu.Lock()
	debug := ""
	if s.separate.mat != nil {
		debug = s.separate.mat.debug
	}
	s.separate.matMu.Unlock()
	if debug == "" {
		return "", errors.New("no materializer child with a debug listener")
	}
	cl := http.Client{Timeout: 30 * time.Second}
	resp, err := cl.Get("http://" + debug + "/debug/pprof/goroutine?debug=2")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// matPID is the materializer child's pid (0: none).
func (sep *separate) matPID() int {
	sep.matMu.Lock()
	defer sep.matMu.Unlock()
	if sep.mat == nil {
		return 0
	}
	return sep.mat.pid()
}

// stopMat stops the materializer children of the moment.
func (sep *separate) stopMat() {
	sep.matMu.Lock()
	defer sep.matMu.Unlock()
	for _, c := range []*child{sep.mat, sep.second} {
		if c != nil {
			c.stop()
		}
	}
}

// Process is a child (or the harness itself) whose CPU and memory are
// sampled; PID is read at each sample because a restarted child has a new
// one (0: not running).
type Process struct {
	Name string
	PID  func() int
}

// SignalMaterializer sends sig to the materializer child (separate
// processes only; a no-op otherwise).
func (s *Stack) SignalMaterializer(sig syscall.Signal) error {
	if s.separate == nil {
		return nil
	}
	for _, p := range s.separate.procs {
		if pid := p.PID(); p.Name == report.ProcMaterializer && pid > 0 {
			return syscall.Kill(pid, sig)
		}
	}
	return errors.New("no materializer child to signal")
}

// StartSeparateProcesses is StartEmbedded with every component in a child
// process started from exe (the fencegate binary): a fresh database on
// serverURL's server, a kfake broker, one gateway (opts.Replicas: more)
// and a materializer (opts.NoMaterializer: none).
func StartSeparateProcesses(ctx context.Context, serverURL, exe string, opts SeparateOptions, log *slog.Logger, stackOpts ...StackOption) (*Stack, error) {
	s, err := newStack(stackOpts)
	if err != nil {
		return nil, err
	}
	if s.mixed {
		return nil, errMixedInProcess
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
	if s.Router, err = NewRouter(); err != nil {
		return nil, err
	}
	cfg, err := writeChildConfig(s)
	if err != nil {
		return nil, err
	}
	if opts.KafkaCluster {
		if err := s.startCluster(&opts); err != nil {
			return nil, err
		}
	}
	sep := &separate{exe: exe, cfg: cfg, opts: opts}
	if sep.procs, err = s.openBroker(ctx, exe, cfg, opts); err != nil {
		return nil, err
	}
	n := max(opts.Replicas, 1)
	for i := range n {
		c, err := newChildGateway(s, exe, cfg, fmt.Sprintf("loadtest-replica-%d", i), log)
		if err != nil {
			return nil, err
		}
		if opts.GatewayDebugListen != "" && i == 0 {
			c.args = append(c.args, "--debug-listen", opts.GatewayDebugListen)
		}
		c.args = append(c.args, opts.GatewayArgs...)
		if err := c.start(ctx); err != nil {
			c.stop()
			return nil, err
		}
		s.children = append(s.children, c)
		s.GatewayURLs = append(s.GatewayURLs, "http://"+c.addr)
		s.closers = append(s.closers, c.stop)
		sep.procs = append(sep.procs, Process{report.ReplicaProc(i, n), c.pid})
	}
	s.GatewayURL = s.GatewayURLs[0]
	if opts.NoMaterializer {
		s.Materialize = false
	} else {
		mat, err := startMaterializerChild(ctx, s, exe, cfg)
		if err != nil {
			return nil, err
		}
		sep.mat = mat
		s.closers = append(s.closers, sep.stopMat)
		sep.procs = append(sep.procs, Process{report.ProcMaterializer, sep.matPID})
	}
	sep.procs = append(sep.procs, Process{report.ProcHarness, os.Getpid})
	s.separate = sep
	ok = true
	return s, nil
}

// child is a long-lived child process stopped with SIGTERM at the end.
type child struct {
	cmd  *exec.Cmd
	addr string
	// debug is its pprof listener's address ("": none).
	debug string
	// log is the end of its standard error (nil: not kept).
	log *tail
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
func (c *ChildGateway) pid() int {
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

// openBroker starts the kfake broker child, or with opts.Brokers creates
// the harness's topics on that cluster, and returns the broker's process
// to sample (none for an external broker without opts.BrokerPID).
func (s *Stack) openBroker(ctx context.Context, exe, cfg string, opts SeparateOptions) ([]Process, error) {
	if opts.Brokers == "" {
		broker, err := startBroker(ctx, exe, cfg)
		if err != nil {
			return nil, err
		}
		s.closers = append(s.closers, broker.stop)
		s.Kafka = kafkaconn.Config{Brokers: broker.addr}
		return []Process{{report.ProcBroker, broker.pid}}, nil
	}
	s.Kafka = kafkaconn.Config{Brokers: opts.Brokers}
	for _, t := range []string{LeaseTopic, NaiveTopic, DirectTopic} {
		if err := s.Kafka.CreateTopic(ctx, t, Partitions, nil); err != nil {
			return nil, fmt.Errorf("topic %s on %s: %w", t, opts.Brokers, err)
		}
	}
	if opts.BrokerPID <= 0 {
		return nil, nil
	}
	return []Process{{report.ProcBroker, func() int { return opts.BrokerPID }}}, nil
}

// startBroker runs `fencegate devbroker` with the routed topics and the
// direct baseline's, and waits for its "ready" line.
func startBroker(ctx context.Context, exe, cfg string) (*child, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, CommandDevBroker, "--listen", addr, "--config", cfg,
		"--topic", DirectTopic, "--partitions", strconv.Itoa(Partitions))
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	dieWithUs(cmd)
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
	var sinks []string
	if s.Trusted {
		// A static member: the child restarted after a kill takes its
		// partitions back at once (KillMaterializer).
		sinks = []string{"--sinks", "postgres,kafka", "--trusted-name", TrustedName, "--trusted-instance-id", "loadtest-materializer"}
	}
	if s.LedgerValues != "" {
		sinks = append(sinks, "--ledger-values", string(s.LedgerValues))
	}
	return startMaterializeCommand(ctx, s, exe, cfg, sinks)
}

// startMaterializeCommand runs `fencegate materialize` with the stack's
// database, broker and config and the sink flags given, and waits for its
// readiness.
func startMaterializeCommand(ctx context.Context, s *Stack, exe, cfg string, sinks []string) (*child, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	debug, err := freeAddr()
	if err != nil {
		return nil, err
	}
	args := append([]string{"materialize", "--listen", addr, "--debug-listen", debug, "--database-url", s.DatabaseURL, "--config", cfg}, kafkaArgs(s.Kafka)...)
	args = append(args, sinks...)
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), "FENCEGATE_BARRIER_KEY="+barrierKey)
	if s.Kafka.SASLPassword != "" {
		cmd.Env = append(cmd.Env, "FENCEGATE_KAFKA_SASL_PASSWORD="+s.Kafka.SASLPassword)
	}
	logTail := &tail{keep: "trusted sink"}
	cmd.Stderr = logTail
	dieWithUs(cmd)
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &child{cmd: cmd, addr: addr, debug: debug, log: logTail}
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
// With keep set it also keeps, in kept, the last 16 KiB of the lines that
// hold keep: a component's lines that the rest would push out.
type tail struct {
	mu   sync.Mutex
	buf  []byte
	keep string
	line []byte // the line being written, for keep
	kept []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = last(append(t.buf, p...), 4096)
	if t.keep != "" {
		t.line = append(t.line, p...)
		for {
			i := bytes.IndexByte(t.line, '\n')
			if i < 0 {
				break
			}
			if bytes.Contains(t.line[:i], []byte(t.keep)) {
				t.kept = last(append(t.kept, t.line[:i+1]...), 16384)
			}
			t.line = append(t.line[:0], t.line[i+1:]...)
		}
	}
	return len(p), nil
}

// last returns the last n bytes of b, in b's array.
func last(b []byte, n int) []byte {
	if over := len(b) - n; over > 0 {
		return append(b[:0], b[over:]...)
	}
	return b
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(string(t.buf))
}

// Kept returns the lines kept for keep.
func (t *tail) Kept() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(string(t.kept))
}

// Sampler accumulates the CPU ticks and peak RSS of processes over one
// phase of the run.
type Sampler struct {
	procs []Process
	start time.Time
	mu    sync.Mutex
	last  map[string][2]int64 // name -> pid, ticks at the last sample
	ticks map[string]int64    // ticks in this phase
	rssKB map[string]int64    // peak
	// series are the CPU seconds by process so far at each sample, for
	// the figures of a window inside the phase (Usage.CPUBetween).
	series []CPUSample
	stopc  chan struct{}
	done   chan struct{}
}

// sampledProcesses are the processes a Sampler reads: the separate
// processes' children, or the gateway replicas that run as children and
// the harness (which then holds the broker and the materializer); none
// when everything runs in this process.
func (s *Stack) sampledProcesses() []Process {
	if s.separate != nil {
		return s.separate.procs
	}
	if len(s.children) == 0 {
		return nil
	}
	var out []Process
	for i, c := range s.children {
		out = append(out, Process{report.ReplicaProc(i, len(s.children)), c.pid})
	}
	return append(out, Process{report.ProcHarness, os.Getpid})
}

// StartSampling samples the stack's processes (and extra) until Stop; nil
// when the stack's components all run in this process.
func (s *Stack) StartSampling(extra ...Process) *Sampler {
	procs := s.sampledProcesses()
	if procs == nil {
		return nil
	}
	sm := &Sampler{procs: append(append([]Process{}, procs...), extra...), start: time.Now(),
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
func (sm *Sampler) sample(first bool) {
	sm.mu.Lock()
	defer sm.mu.Unlock()
	for _, p := range sm.procs {
		pid := p.PID()
		if pid <= 0 {
			continue
		}
		ticks, err := procTicks(pid)
		if err != nil {
			continue // exited between the pid and the read
		}
		prev, seen := sm.last[p.Name]
		switch {
		case seen && prev[0] == int64(pid):
			sm.ticks[p.Name] += ticks - prev[1]
		case !first:
			sm.ticks[p.Name] += ticks
		}
		sm.last[p.Name] = [2]int64{int64(pid), ticks}
		if kb := procRSSKB(pid); kb > sm.rssKB[p.Name] {
			sm.rssKB[p.Name] = kb
		}
	}
	cpu := make(map[string]float64, len(sm.ticks))
	for name, t := range sm.ticks {
		cpu[name] = float64(t) / clockTicks
	}
	sm.series = append(sm.series, CPUSample{At: time.Now(), CPU: cpu})
}

// CPUSample is the CPU seconds by process from the start of a phase to At.
type CPUSample struct {
	At  time.Time
	CPU map[string]float64
}

// Usage is what a Sampler measured over one phase.
type Usage struct {
	Seconds float64
	CPU     map[string]float64 // CPU seconds by process
	RSSKB   map[string]int64   // peak
	// Series are the samples of the phase, oldest first.
	Series []CPUSample
}

// CPUBetween returns the CPU seconds by process between the samples
// nearest to from and to (samples are samplePeriod apart), and the
// seconds between those samples (nil and 0 when they are the same one).
func (u *Usage) CPUBetween(from, to time.Time) (map[string]float64, float64) {
	first, last := u.nearest(from), u.nearest(to)
	if first == nil || !last.At.After(first.At) {
		return nil, 0
	}
	out := map[string]float64{}
	for name, v := range last.CPU {
		out[name] = v - first.CPU[name]
	}
	return out, last.At.Sub(first.At).Seconds()
}

// nearest is the sample nearest to t (nil: none).
func (u *Usage) nearest(t time.Time) *CPUSample {
	var best *CPUSample
	for i := range u.Series {
		s := &u.Series[i]
		if best == nil || abs(s.At.Sub(t)) < abs(best.At.Sub(t)) {
			best = s
		}
	}
	return best
}

func abs(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}

// Stop takes a last sample and returns the phase's figures (nil Sampler:
// nil).
func (sm *Sampler) Stop() *Usage {
	if sm == nil {
		return nil
	}
	close(sm.stopc)
	<-sm.done
	sm.sample(false)
	u := &Usage{Seconds: time.Since(sm.start).Seconds(), CPU: map[string]float64{}, RSSKB: sm.rssKB, Series: sm.series}
	for _, p := range sm.procs {
		u.CPU[p.Name] = float64(sm.ticks[p.Name]) / clockTicks
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

// RunBaselineChild runs `fencegate loadtest-baseline` with args (and the
// stack's Kafka connection) while sampling the stack's processes, the
// child among them as name, and returns what it printed and the phase's
// usage, the child's CPU there the kernel's account of its whole life.
// The stack must run as separate processes.
func (s *Stack) RunBaselineChild(ctx context.Context, name string, args []string) ([]byte, *Usage, error) {
	if s.separate == nil {
		return nil, nil, errors.New("a baseline child needs --separate-processes")
	}
	args = append(append([]string{CommandBaseline}, args...), kafkaArgs(s.Kafka)...)
	cmd := exec.CommandContext(ctx, s.separate.exe, args...)
	cmd.Env = os.Environ()
	if s.Kafka.SASLPassword != "" {
		cmd.Env = append(cmd.Env, "FENCEGATE_KAFKA_SASL_PASSWORD="+s.Kafka.SASLPassword)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	dieWithUs(cmd)
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	pid := cmd.Process.Pid
	var exited sync.Mutex // guards reading the pid's /proc after the reap
	gone := false
	sm := s.StartSampling(Process{name, func() int {
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
	u := sm.Stop()
	if werr != nil {
		return nil, u, fmt.Errorf("%s child: %w: %s", name, werr, strings.TrimSpace(stderr.String()))
	}
	u.CPU[name] = (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds()
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		u.RSSKB[name] = max(u.RSSKB[name], ru.Maxrss) // KiB on Linux
	}
	return stdout.Bytes(), u, nil
}
