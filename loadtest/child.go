package loadtest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	"github.com/fencegate/fencegate/gateway"
)

// childGateway is a `fencegate serve` child process that the harness can
// kill -9 and restart on the same port (FM10: a replica dies after a
// commit, before its reply).
type childGateway struct {
	exe  string
	args []string
	log  *slog.Logger
	mu   sync.Mutex
	cmd  *exec.Cmd
	addr string
}

// StartEmbeddedChild is StartEmbedded with the gateway in a child process
// started from exe (the fencegate binary), so that it can be killed.
func StartEmbeddedChild(ctx context.Context, serverURL, exe string, log *slog.Logger) (*Stack, error) {
	s, err := startEmbedded(ctx, serverURL, log, false)
	if err != nil {
		return nil, err
	}
	c, err := newChildGateway(s, exe, log)
	if err == nil {
		err = c.start(ctx)
	}
	if err != nil {
		s.Close()
		return nil, err
	}
	s.child = c
	s.GatewayURL = "http://" + c.addr
	s.closers = append(s.closers, c.stop)
	return s, nil
}

func newChildGateway(s *Stack, exe string, log *slog.Logger) (*childGateway, error) {
	dir, err := os.MkdirTemp("", "fencegate-loadtest-")
	if err != nil {
		return nil, err
	}
	s.closers = append(s.closers, func() { _ = os.RemoveAll(dir) })
	cfg := filepath.Join(dir, "fencegate.yaml")
	yaml := fmt.Sprintf("transactional_id_prefix: loadtest\nroutes:\n"+
		"  - {pattern: \"shard:*\", topic: %s, partitions: %d}\n  - {pattern: \"naive:*\", topic: %s, partitions: %d}\n"+
		"clients:\n  - {name: loadtest, token_sha256: %s, allow: [\"shard:*\"]}\n",
		LeaseTopic, Partitions, NaiveTopic, Partitions, gateway.HashToken(WorkerToken))
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return &childGateway{exe: exe, log: log, addr: addr, args: []string{"serve", "--listen", addr,
		"--kafka-brokers", s.Brokers, "--database-url", s.DatabaseURL, "--config", cfg,
		"--barrier-key", barrierKey, "--replica", "loadtest-child", "--min-ttl", "100ms"}}, nil
}

// start runs the child and waits until it is ready.
func (c *childGateway) start(ctx context.Context) error {
	c.mu.Lock()
	cmd := exec.Command(c.exe, c.args...)
	cmd.Stdout, cmd.Stderr = nil, nil
	if err := cmd.Start(); err != nil {
		c.mu.Unlock()
		return err
	}
	c.cmd = cmd
	c.mu.Unlock()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get("http://" + c.addr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		wait(ctx, 50*time.Millisecond)
	}
	return errors.New("the gateway child did not become ready")
}

// kill sends SIGKILL and reaps the child.
func (c *childGateway) kill() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cmd == nil {
		return
	}
	_ = c.cmd.Process.Kill()
	_ = c.cmd.Wait()
	c.cmd = nil
}

func (c *childGateway) stop() { c.kill() }

// killAndRestart is the gateway-kill fault.
func (c *childGateway) killAndRestart(ctx context.Context) {
	c.log.Warn("killing the gateway child with SIGKILL")
	c.kill()
	if err := c.start(context.WithoutCancel(ctx)); err != nil {
		c.log.Error("restarting the gateway child", "error", err)
	}
}
