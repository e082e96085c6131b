// Package kafkadev runs an Apache Kafka broker, or a three-node KRaft
// cluster, of deploy/dev/kafka.sh in a directory of its own, and controls
// its nodes as faults do: SIGKILL (a crash), SIGTERM (a clean stop),
// SIGSTOP (a long pause), and a node cut off the network through a fault
// proxy (internal/netfault) in front of each of its listeners.
//
// It is the process control of the tests' brokers (internal/kafkatest)
// and of `fencegate loadtest --kafka-cluster`, which outlives no test
// binary and imports no testing package. Every wait is for an event: a
// process that ended, a node that serves (kafka.sh waits), a cluster
// whose partitions are all led with full ISRs (WaitHealthy).
//
// It must never touch a broker it did not start (the shared broker of
// make test, an operator's cluster): every node it signals is one of its
// own directory's, found by kafka.sh's pid files.
package kafkadev

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Options configure New.
type Options struct {
	// Nodes is 1 (a combined broker-controller, the default) or 3.
	Nodes int
	// Config lines (key=value) written last into every node's
	// server.properties, so they win over kafka.sh's.
	Config []string
	// Proxied (three nodes only) puts a fault proxy on every path to a
	// node: the clients' and each node's own path to each broker and
	// controller, so that Isolate cuts one node off from all the others,
	// both ways (partition.go).
	Proxied bool
	// Secure starts kafka.sh's secured single broker
	// (FENCEGATE_KAFKA_SECURE=1).
	Secure bool
	// Env is more of kafka.sh's settings (NAME=value).
	Env []string
	// DirPattern names the cluster's directory (os.MkdirTemp's pattern;
	// default "fencegate-kafka-").
	DirPattern string
}

// Cluster is a broker or cluster of kafka.sh's in a directory of its
// own. Its nodes are stopped by Close, and by kafka.sh's watcher when
// this process dies first.
type Cluster struct {
	// Brokers are the bootstrap servers clients use: the proxies when
	// Proxied, else the nodes' own listeners. Set by Launch.
	Brokers string
	// Dir holds the nodes' data, logs and pids; Port is kafka.sh's
	// FENCEGATE_KAFKA_PORT (the nodes' ports derive from it).
	Dir  string
	Port int

	mode    string // "single" or "cluster"
	config  string
	secure  bool
	env     []string
	proxied bool
	// links are the fault proxies in front of the nodes (Proxied,
	// partition.go).
	links []link
	proxy []string // kafka.sh's settings that point the nodes at them
}

// New makes the cluster's directory; Launch starts its nodes.
func New(o Options) (*Cluster, error) {
	c := &Cluster{mode: "single", config: strings.Join(o.Config, "\n"), secure: o.Secure, env: o.Env, proxied: o.Proxied}
	if o.Nodes == 3 {
		c.mode = "cluster"
	}
	dir, err := os.MkdirTemp("", cmp.Or(o.DirPattern, "fencegate-kafka-"))
	c.Dir = dir
	return c, err
}

// Script returns the path of deploy/dev/kafka.sh, found by walking up
// from the working directory to the repository's go.mod.
func Script() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil &&
			bytes.Contains(b, []byte("module github.com/fencegate/fencegate\n")) {
			return filepath.Join(dir, "deploy", "dev", "kafka.sh"), nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("kafkadev: deploy/dev/kafka.sh not found above the working directory")
		}
		dir = parent
	}
}

// Close stops the nodes and removes their directory.
func (c *Cluster) Close() {
	_ = c.run("stop")
	c.closeLinks()
	_ = os.RemoveAll(c.Dir)
}

// Launch starts the nodes on free ports and waits until they serve.
func (c *Cluster) Launch() error {
	var last error
	for range 3 {
		c.Port = freeBase(c.mode, c.secure, c.proxied)
		if c.proxied {
			if err := c.proxyNodes(); err != nil {
				return err
			}
		}
		if last = c.run(c.startVerb()); last == nil {
			break
		}
		if !strings.Contains(last.Error(), "is taken by another process") {
			return last
		}
	}
	if last != nil {
		return last
	}
	c.Brokers = c.url()
	if c.proxied {
		c.Brokers = c.clientAddrs()
	}
	return nil
}

// Nodes is the number of nodes: 1 or 3.
func (c *Cluster) Nodes() int {
	if c.mode == "cluster" {
		return 3
	}
	return 1
}

func (c *Cluster) startVerb() string {
	if c.mode == "cluster" {
		return "cluster"
	}
	return "start"
}

// Start starts the nodes that are not running (after Kill or Stop) and
// waits until they serve.
func (c *Cluster) Start() error { return c.run(c.startVerb()) }

// Kill sends SIGKILL to node n (1-3) and waits for it to end: a crash.
func (c *Cluster) Kill(n int) error { return c.signalAndWait(n, syscall.SIGKILL) }

// Stop sends SIGTERM to node n and waits for its clean shutdown.
func (c *Cluster) Stop(n int) error { return c.signalAndWait(n, syscall.SIGTERM) }

// Pause freezes node n with SIGSTOP (a broker in a long GC pause); the
// returned function resumes it with SIGCONT.
func (c *Cluster) Pause(n int) (resume func(), err error) {
	pid, err := c.Pid(n)
	if err != nil {
		return nil, err
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		return nil, err
	}
	return func() { _ = syscall.Kill(pid, syscall.SIGCONT) }, nil
}

// Pid returns node n's process id (an error when it is not running).
func (c *Cluster) Pid(n int) (int, error) {
	out, err := c.output("pids")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && f[0] == strconv.Itoa(n) {
			return strconv.Atoi(f[1])
		}
	}
	return 0, fmt.Errorf("kafkadev: node %d is not running", n)
}

// LogTail returns the last lines of node n's server log, for a failure
// message.
func (c *Cluster) LogTail(n, lines int) string {
	b, err := os.ReadFile(c.LogFile(n))
	if err != nil {
		return err.Error()
	}
	all := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}

// LogFile is the path of node n's server log.
func (c *Cluster) LogFile(n int) string {
	sub := "single"
	if c.mode == "cluster" {
		sub = filepath.Join("cluster", "node-"+strconv.Itoa(n))
	}
	return filepath.Join(c.Dir, sub, "server.log")
}

func (c *Cluster) signalAndWait(n int, sig syscall.Signal) error {
	pid, err := c.Pid(n)
	if err != nil {
		return err
	}
	if err := syscall.Kill(pid, sig); err != nil {
		return err
	}
	return waitGone(pid)
}

// stopBound bounds the wait for a signalled node to end: a clean shutdown
// that takes longer is a hung broker, not a slow one.
const stopBound = 2 * time.Minute

// waitGone polls until pid no longer runs (the broker is not our child,
// so there is nothing to wait on).
func waitGone(pid int) error {
	deadline := time.Now().Add(stopBound)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			return fmt.Errorf("kafkadev: pid %d still runs %s after its signal", pid, stopBound)
		}
		<-tick.C
	}
	return nil
}

func (c *Cluster) url() string {
	out, _ := c.output("url")
	return strings.TrimSpace(out)
}

func (c *Cluster) environ() []string {
	return append(append(append(os.Environ(), c.proxy...),
		"FENCEGATE_KAFKA_PORT="+strconv.Itoa(c.Port),
		"FENCEGATE_KAFKA_DIR="+c.Dir,
		"FENCEGATE_KAFKA_MODE="+c.mode,
		"FENCEGATE_KAFKA_HEAP=384m",
		// A restart on a loaded machine can take longer than the first
		// start's minute; a dead node still fails at once.
		"FENCEGATE_KAFKA_START_TIMEOUT=180",
		"FENCEGATE_KAFKA_CONFIG="+c.config,
		"FENCEGATE_KAFKA_WATCH_PID="+strconv.Itoa(os.Getpid()),
		"FENCEGATE_KAFKA_SECURE="+map[bool]string{true: "1", false: "0"}[c.secure],
	), c.env...)
}

func (c *Cluster) run(verb string) error {
	_, err := c.output(verb)
	return err
}

func (c *Cluster) output(verb string) (string, error) {
	script, err := Script()
	if err != nil {
		return "", err
	}
	cmd := exec.Command("bash", script, verb)
	cmd.Env = c.environ()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("kafka.sh %s: %v: %s", verb, err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// freeBase picks a base port whose broker and controller ports (those
// kafka.sh derives for mode) are free now.
func freeBase(mode string, secure, proxied bool) int {
	offsets := []int{0, 1}
	if secure {
		offsets = append(offsets, 2)
	}
	if mode == "cluster" {
		offsets = []int{100, 101, 102, 200, 201, 202}
		if proxied {
			for n := 1; n <= 3; n++ {
				for k := 1; k <= 3; k++ {
					offsets = append(offsets, pathOffset(n, k), controllerOffset(n, k))
				}
			}
		}
	}
	for {
		base := 20000 + rand.IntN(9000)
		if allFree(base, offsets) {
			return base
		}
	}
}

func allFree(base int, offsets []int) bool {
	for _, o := range offsets {
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(base+o))
		if err != nil {
			return false
		}
		ln.Close()
	}
	return true
}

// Secure says whether the broker is kafka.sh's secured one.
func (c *Cluster) Secure() bool { return c.secure }
