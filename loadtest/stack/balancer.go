package stack

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// BalancerHAProxy is the one load balancer the harness runs in front of
// its replicas (WithBalancer): HAProxy from the OS packages
// (deploy/dev/haproxy.sh install).
const BalancerHAProxy = "haproxy"

// The balancer's health check: a replica that stops answering /readyz
// (killed, frozen, draining) leaves rotation after fall failed checks
// inter apart, within about a second and a half with the check timeout;
// one back in service rejoins after rise good ones.
const (
	checkInter   = 250 * time.Millisecond
	checkTimeout = 500 * time.Millisecond
	checkFall    = 2
	checkRise    = 2
)

// balancerServerTimeout bounds the balancer's wait for a replica's answer:
// above the longest answer of a batch (a forwarder waits up to
// gateway.DefaultForwardAnswerTimeout for the holder's), and the SDK's
// own request timeout (its default HTTP client's), so that the balancer
// cuts no batch the worker would still wait for. A frozen replica's
// requests in flight wait this long at most.
const balancerServerTimeout = 30 * time.Second

// balancerRenewTimeout bounds a renewal (PATCH) at the balancer. A
// renewal is one database round trip at the holder; one that a replica
// has not answered within a second sits in a replica that is stopped or
// stuck, and waiting for it would carry the lease past its local deadline
// (FM52). Cut, it is answered 504 and the SDK renews again, through
// another replica, with a TTL - RenewEvery left before that deadline.
const balancerRenewTimeout = time.Second

// WithBalancer puts a load balancer of kind (BalancerHAProxy) in front of
// the gateway replicas the harness starts as child processes
// (StartEmbeddedReplicas): workers then use BalancerURL as their base URL.
func WithBalancer(kind string) StackOption {
	return func(s *Stack) error {
		if kind != BalancerHAProxy {
			return fmt.Errorf("balancer %q: the harness runs %s only", kind, BalancerHAProxy)
		}
		s.balancerKind = kind
		return nil
	}
}

// balancer is an haproxy child process.
type balancer struct {
	cmd    *exec.Cmd
	addr   string
	socket string // its admin socket (show stat)
	log    *tail
}

// haproxyConfig is the balancer's configuration: HTTP round robin over the
// replicas, health-checked on /readyz. A request goes to another replica
// only when the connection to the first failed (retry-on conn-failure
// with redispatch): once sent, a batch is never sent again by the
// balancer, whose outcome only the worker may retry under its batch id.
//
// A replica the health check marks down has its sessions shut
// (on-marked-down shutdown-sessions): the requests it holds are answered
// at once (502, or the connection closed), outcome unknown, and the SDK
// retries them on another replica. Without it, a stopped replica kept the
// batches and renewals of leases held elsewhere for the server timeout,
// and those leases were lost (FM52). A draining replica has answered its
// requests by then: readiness turns 503 at SIGTERM, and it is marked down
// fall checks later.
func haproxyConfig(listen, socket string, replicas map[string]string, order []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `global
    maxconn 8192
    stats socket %s mode 600 level admin

defaults
    mode http
    option http-keep-alive
    timeout connect 1s
    timeout client 60s
    timeout server %ds
    timeout http-request 10s
    timeout http-keep-alive 30s
    timeout queue 5s
    timeout check %dms
    retries 3
    retry-on conn-failure
    option redispatch 1

frontend fencegate
    bind %s
    default_backend replicas

backend replicas
    balance roundrobin
    option httpchk GET /readyz
    http-check expect status 200
    http-request set-timeout server %dms if { method PATCH }
    default-server inter %dms fastinter %dms downinter %dms fall %d rise %d on-marked-down shutdown-sessions
`, socket, int(balancerServerTimeout.Seconds()), checkTimeout.Milliseconds(), listen, balancerRenewTimeout.Milliseconds(),
		checkInter.Milliseconds(), checkInter.Milliseconds(), checkInter.Milliseconds(), checkFall, checkRise)
	for _, name := range order {
		fmt.Fprintf(&b, "    server %s %s check\n", name, replicas[name])
	}
	return b.String()
}

// startBalancer writes the configuration of the stack's replicas and runs
// haproxy in the foreground (-db) on a free port, and returns once it
// answers /readyz through a replica and sees every replica up.
func (s *Stack) startBalancer(ctx context.Context, dir string) error {
	exe, err := exec.LookPath("haproxy")
	if err != nil {
		return fmt.Errorf("haproxy not found (install it: deploy/dev/haproxy.sh install): %w", err)
	}
	addr, err := freeAddr()
	if err != nil {
		return err
	}
	replicas, order := map[string]string{}, []string{}
	for _, c := range s.children {
		replicas[c.replica] = c.addr
		order = append(order, c.replica)
	}
	bl := &balancer{addr: addr, socket: filepath.Join(dir, "haproxy.sock"), log: &tail{}}
	cfg := filepath.Join(dir, "haproxy.cfg")
	if err := os.WriteFile(cfg, []byte(haproxyConfig(addr, bl.socket, replicas, order)), 0o600); err != nil {
		return err
	}
	bl.cmd = exec.Command(exe, "-db", "-f", cfg)
	bl.cmd.Stdout, bl.cmd.Stderr = bl.log, bl.log
	dieWithUs(bl.cmd)
	if err := bl.cmd.Start(); err != nil {
		return err
	}
	s.bal = bl
	s.closers = append(s.closers, bl.stop)
	s.BalancerURL = "http://" + addr
	for _, name := range order {
		if err := s.WaitInRotation(ctx, name, 30*time.Second); err != nil {
			return err
		}
	}
	return nil
}

func (b *balancer) stop() {
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	exited := make(chan struct{})
	go func() { _ = b.cmd.Wait(); close(exited) }()
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
		_ = b.cmd.Process.Kill()
		<-exited
	}
}

// serverStatus is the balancer's view of replica: "UP", "DOWN", "MAINT",
// a transition ("UP 1/2"), or an error.
func (b *balancer) serverStatus(replica string) (string, error) {
	conn, err := net.DialTimeout("unix", b.socket, time.Second)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := conn.Write([]byte("show stat\n")); err != nil {
		return "", err
	}
	sc := bufio.NewScanner(conn)
	status := -1
	for sc.Scan() {
		f := strings.Split(sc.Text(), ",")
		if strings.HasPrefix(sc.Text(), "# ") {
			for i, name := range f {
				if name == "status" {
					status = i
				}
			}
			continue
		}
		if len(f) > status && status >= 0 && f[0] == "replicas" && f[1] == replica {
			return f[status], nil
		}
	}
	return "", fmt.Errorf("the balancer does not list replica %s (%v)", replica, sc.Err())
}

// WaitInRotation waits until the balancer has replica in rotation (its
// health checks pass) and answers /readyz itself, for at most limit.
func (s *Stack) WaitInRotation(ctx context.Context, replica string, limit time.Duration) error {
	if s.bal == nil {
		return errors.New("no balancer")
	}
	last := ""
	for deadline := time.Now().Add(limit); time.Now().Before(deadline) && ctx.Err() == nil; {
		st, err := s.bal.serverStatus(replica)
		if err == nil && st == "UP" && s.balancerReady() {
			return nil
		}
		last = fmt.Sprintf("status %q, %v", st, err)
		wait(ctx, 50*time.Millisecond)
	}
	return fmt.Errorf("replica %s not in the balancer's rotation within %s (%s): %s", replica, limit, last, s.bal.log)
}

// balancerReady reports whether /readyz through the balancer answers 200.
func (s *Stack) balancerReady() bool {
	resp, err := http.Get(s.BalancerURL + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// Balancer is the kind of load balancer in front of the replicas ("": none).
func (s *Stack) Balancer() string { return s.balancerKind }
