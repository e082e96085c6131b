package netfault_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/netfault"
)

// echo serves a line echo on a free port until the test ends.
func echo(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	return ln.Addr().String()
}

func link(t *testing.T) *netfault.Link {
	t.Helper()
	l, err := netfault.New(t.Name(), echo(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	return l
}

// roundTrip writes a line and reads it back within timeout.
func roundTrip(c net.Conn, timeout time.Duration) error {
	_ = c.SetDeadline(time.Now().Add(timeout))
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return err
	}
	_, err := bufio.NewReader(c).ReadString('\n')
	return err
}

func dial(t *testing.T, l *netfault.Link) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", l.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestBlackholeDropsWithoutReset: through a blackholed link a request gets
// no answer and no reset (the read times out); after undo a new
// connection works.
func TestBlackholeDropsWithoutReset(t *testing.T) {
	l := link(t)
	c := dial(t, l)
	if err := roundTrip(c, 5*time.Second); err != nil {
		t.Fatalf("before the fault: %v", err)
	}
	for _, d := range []netfault.Direction{netfault.Both, netfault.Upstream, netfault.Downstream} {
		undo := l.Blackhole(d)
		if err := roundTrip(c, 300*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("blackhole %d: %v, want a timeout (no answer, no reset)", d, err)
		}
		undo()
		c = dial(t, l)
		if err := roundTrip(c, 5*time.Second); err != nil {
			t.Fatalf("after the blackhole %d: %v", d, err)
		}
	}
}

// TestResetAndLatency: a reset link fails a round trip at once (no
// timeout); a slowed one answers no sooner than its latency.
func TestResetAndLatency(t *testing.T) {
	l := link(t)
	c := dial(t, l)
	undo := l.Reset()
	if err := roundTrip(c, 5*time.Second); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("through a reset link: %v, want the connection broken", err)
	}
	undo()
	undo = l.Latency(netfault.Downstream, 200*time.Millisecond, 0)
	defer undo()
	c = dial(t, l)
	start := time.Now()
	if err := roundTrip(c, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 200*time.Millisecond {
		t.Fatalf("a round trip with 200ms latency took %s", took)
	}
}
