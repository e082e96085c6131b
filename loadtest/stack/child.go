package stack

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
	"syscall"
	"time"

	"github.com/fencegate/fencegate/kafkaconn"
)

// ChildGateway is a `fencegate serve` child process that the harness can
// kill -9 and restart on the same port (FM10: a replica dies after a
// commit, before its reply), or pause with SIGSTOP and resume (FM25: a
// replica freezes mid-commit while its leases move elsewhere).
type ChildGateway struct {
	exe  string
	args []string
	// env carries the secrets (barrier key, SASL password): argv is
	// readable by every user in /proc/<pid>/cmdline, the environment only
	// by the process owner.
	env  []string
	log  *slog.Logger
	mu   sync.Mutex
	cmd  *exec.Cmd
	addr string
	// replica is its --replica name, the same across restarts.
	replica string
}

// StartEmbeddedChild is StartEmbedded with the gateway in a child process
// started from exe (the fencegate binary), so that it can be killed.
func StartEmbeddedChild(ctx context.Context, serverURL, exe string, log *slog.Logger, opts ...StackOption) (*Stack, error) {
	return StartEmbeddedReplicas(ctx, serverURL, exe, 1, log, opts...)
}

// StartEmbeddedReplicas is StartEmbedded with n gateway replicas, each a
// child process started from exe, registered under its own name and
// address so that replicas send each other's clients to the holder (421).
func StartEmbeddedReplicas(ctx context.Context, serverURL, exe string, n int, log *slog.Logger, opts ...StackOption) (*Stack, error) {
	s, err := startEmbedded(ctx, serverURL, log, false, opts)
	if err != nil {
		return nil, err
	}
	if err := s.startChildren(ctx, exe, n, log); err != nil {
		s.Close()
		return nil, err
	}
	if s.balancerKind != "" {
		if err := s.startBalancer(ctx, s.childDir); err != nil {
			s.Close()
			return nil, err
		}
	}
	return s, nil
}

func (s *Stack) startChildren(ctx context.Context, exe string, n int, log *slog.Logger) error {
	cfg, err := writeChildConfig(s)
	if err != nil {
		return err
	}
	s.childDir = filepath.Dir(cfg)
	credential, err := s.replicaCredential(n)
	if err != nil {
		return err
	}
	for i := range n {
		c, err := newChildGateway(s, exe, cfg, fmt.Sprintf("loadtest-replica-%d", i), log)
		if err == nil && credential != "" {
			c.args = append(c.args, "--"+replicaCredentialFlag, credential)
		}
		if err == nil {
			err = c.start(ctx)
		}
		if err != nil {
			return err
		}
		s.children = append(s.children, c)
		s.GatewayURLs = append(s.GatewayURLs, "http://"+c.addr)
		s.closers = append(s.closers, c.stop)
	}
	s.GatewayURL = s.GatewayURLs[0]
	return nil
}

// writeChildConfig writes the children's routes and clients file
// (configYAML: every client the stack registers).
func writeChildConfig(s *Stack) (string, error) {
	dir, err := os.MkdirTemp("", "fencegate-loadtest-")
	if err != nil {
		return "", err
	}
	s.closers = append(s.closers, func() { _ = os.RemoveAll(dir) })
	cfg := filepath.Join(dir, "fencegate.yaml")
	return cfg, os.WriteFile(cfg, s.configYAML(), 0o600)
}

func newChildGateway(s *Stack, exe, cfg, replica string, log *slog.Logger) (*ChildGateway, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	args := []string{"serve", "--listen", addr, "--advertise-url", "http://" + addr,
		"--database-url", s.DatabaseURL, "--config", cfg, "--replica", replica, "--min-ttl", "100ms",
		"--max-inflight", fmt.Sprint(s.caps().MaxInFlight), "--max-inflight-per-client", fmt.Sprint(s.caps().MaxInFlightPerClient)}
	args = append(args, kafkaArgs(s.Kafka)...)
	env := append(os.Environ(), "FENCEGATE_BARRIER_KEY="+barrierKey)
	if s.Kafka.SASLPassword != "" {
		env = append(env, "FENCEGATE_KAFKA_SASL_PASSWORD="+s.Kafka.SASLPassword)
	}
	return &ChildGateway{exe: exe, log: log, addr: addr, args: args, env: env, replica: replica}, nil
}

// kafkaArgs are the serve flags of conn, its password left out (it goes
// in the environment).
func kafkaArgs(c kafkaconn.Config) []string {
	out := []string{"--kafka-brokers", c.Brokers}
	for _, f := range [][2]string{{"--kafka-security-protocol", c.SecurityProtocol},
		{"--kafka-sasl-mechanism", c.SASLMechanism}, {"--kafka-sasl-user", c.SASLUser},
		{"--kafka-sasl-password-file", c.SASLPasswordFile}, {"--kafka-ca-file", c.CAFile},
		{"--kafka-cert-file", c.CertFile}, {"--kafka-key-file", c.KeyFile},
		{"--kafka-oauth-token-url", c.OAuthTokenURL}, {"--kafka-oauth-scope", c.OAuthScope}} {
		if f[1] != "" {
			out = append(out, f[0], f[1])
		}
	}
	return out
}

// start runs the child and waits until it is ready.
func (c *ChildGateway) start(ctx context.Context) error {
	c.mu.Lock()
	cmd := exec.Command(c.exe, c.args...)
	cmd.Env = c.env
	cmd.Stdout, cmd.Stderr = nil, nil
	dieWithUs(cmd)
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
func (c *ChildGateway) kill() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cmd == nil {
		return
	}
	_ = c.cmd.Process.Kill()
	_ = c.cmd.Wait()
	c.cmd = nil
}

func (c *ChildGateway) stop() { c.kill() }

// signal sends sig to the child, if it runs.
func (c *ChildGateway) signal(sig os.Signal) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cmd != nil {
		_ = c.cmd.Process.Signal(sig)
	}
}

// Freeze is the replica-freeze fault: SIGSTOP for at least d and until
// overtaken reports true or 2d passed (the process sees no time pass on
// its own, but its monotonic clock moves), then SIGCONT. stopped is
// called once the child is stopped. It always resumes the child.
func (c *ChildGateway) Freeze(stopped func(), overtaken func() bool, d time.Duration) {
	c.signal(syscall.SIGSTOP)
	defer c.signal(syscall.SIGCONT)
	stopped()
	ctx := context.Background()
	wait(ctx, d)
	for end := time.Now().Add(d); !overtaken() && time.Now().Before(end); {
		wait(ctx, 50*time.Millisecond)
	}
}

// DrainAndRestart sends SIGTERM, waits for the child's graceful drain and
// exit (SIGKILL after limit), starts it again on the same address, and
// returns how long the exit took.
func (c *ChildGateway) DrainAndRestart(ctx context.Context, limit time.Duration) time.Duration {
	c.mu.Lock()
	cmd := c.cmd
	c.mu.Unlock()
	if cmd == nil {
		return 0
	}
	start := time.Now()
	_ = cmd.Process.Signal(syscall.SIGTERM)
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	select {
	case <-exited:
	case <-time.After(limit):
		_ = cmd.Process.Kill()
		<-exited
	}
	took := time.Since(start)
	c.mu.Lock()
	c.cmd = nil
	c.mu.Unlock()
	if err := c.start(context.WithoutCancel(ctx)); err != nil {
		c.log.Error("restarting the drained gateway child", "error", err)
	}
	return took
}

// Replica is the child's --replica name (the same after a restart).
func (c *ChildGateway) Replica() string { return c.replica }

// KillAndRestart is the gateway-kill fault: SIGKILL, then the child
// started again at once on the same port under the same replica name.
func (c *ChildGateway) KillAndRestart(ctx context.Context) {
	c.log.Warn("killing the gateway child with SIGKILL")
	c.kill()
	if err := c.start(context.WithoutCancel(ctx)); err != nil {
		c.log.Error("restarting the gateway child", "error", err)
	}
}

// wait pauses for d or until ctx ends: the polls of a child's readiness
// and the length of a freeze.
func wait(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
