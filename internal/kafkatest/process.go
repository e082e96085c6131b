package kafkatest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fencegate/fencegate/kafkaconn"
)

// Process is a kfake broker in a process of its own (kfakeserve) that
// persists to a data directory with every write synced, so that a test
// can kill it with SIGKILL and start it again on the same port and state:
// a broker crash, as the gateway sees it, with what the broker
// acknowledged kept.
type Process struct {
	*Cluster
	t    testing.TB
	exe  string
	addr string
	data string
	cmd  *exec.Cmd
	done chan struct{}
}

var (
	buildOnce sync.Once
	builtExe  string
	buildErr  error
)

// kfakeserveExe builds kfakeserve once per test binary.
func kfakeserveExe() (string, error) {
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "kfakeserve-bin-")
		if err != nil {
			buildErr = err
			return
		}
		builtExe = filepath.Join(dir, "kfakeserve")
		out, err := exec.Command("go", "build", "-o", builtExe, "github.com/fencegate/fencegate/internal/kafkatest/kfakeserve").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build kfakeserve: %v\n%s", err, out)
		}
	})
	return builtExe, buildErr
}

// StartProcess starts a persisting broker process on a free port with
// topic created, killed when t ends. Skipped against an external cluster.
func StartProcess(t testing.TB, topic string, partitions int32) *Process {
	t.Helper()
	if External() {
		t.Skip("a broker process of the test's own: not against an external cluster")
	}
	exe, err := kfakeserveExe()
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	p := &Process{t: t, exe: exe, addr: addr, data: t.TempDir(),
		Cluster: &Cluster{Brokers: addr, Conn: kafkaconn.Config{Brokers: addr}, Topic: topic}}
	p.Start()
	t.Cleanup(p.Kill)
	if err := CreateTopic(p.Conn, topic, partitions); err != nil {
		t.Fatal(err)
	}
	return p
}

// Start starts the broker again on its port and data directory and waits
// until it answers metadata.
func (p *Process) Start() {
	p.t.Helper()
	p.cmd = exec.Command(p.exe, "--listen", p.addr, "--data-dir", p.data)
	p.cmd.Stdout, p.cmd.Stderr = os.Stderr, os.Stderr
	if err := p.cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	p.done = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) { _ = cmd.Wait(); close(done) }(p.cmd, p.done)
	cl, err := client(p.Conn)
	if err != nil {
		p.t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if why := waitAnswers(ctx, cl); why != "" {
		p.t.Fatalf("kfakeserve on %s did not answer: %s", p.addr, why)
	}
}

// Kill sends SIGKILL and waits for the process to end.
func (p *Process) Kill() { p.signal(syscall.SIGKILL) }

// Stop sends SIGTERM (kfakeserve closes the cluster, writing its state)
// and waits for the process to end.
func (p *Process) Stop() { p.signal(syscall.SIGTERM) }

func (p *Process) signal(sig syscall.Signal) {
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	_ = p.cmd.Process.Signal(sig)
	<-p.done
}

// waitAnswers polls a metadata request until the broker answers.
func waitAnswers(ctx context.Context, cl interface {
	Ping(context.Context) error
}) string {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		err := cl.Ping(ctx)
		if err == nil {
			return ""
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return err.Error()
		}
	}
}
