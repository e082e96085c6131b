package kafkadev

import (
	"context"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"
)

// fenceWithin bounds how long the quorum may take to fence a node cut
// off both ways: its broker session (6 s here) and an election when it
// led the quorum, with room for a loaded machine.
const fenceWithin = time.Minute

// TestIsolateFencesTheNode: Isolate is a real partition: the node cut
// off, whether it leads the KRaft quorum or not, misses its heartbeats
// and every other node drops it from its metadata; healed, it is back.
// Cut only inbound (the node's own connections left whole) it stayed in
// the metadata for 5 min; with one CONTROLLER listener per node, a cut
// leader kept a follower that fetched from the address the leader
// advertised, past the proxies, and no node dropped it within 60 s in 3
// of 5 leader cuts (partition.go). Three Apache Kafka nodes of its own.
func TestIsolateFencesTheNode(t *testing.T) {
	t.Parallel()
	c, err := New(Options{Nodes: 3, Proxied: true, Config: []string{"broker.session.timeout.ms=6000", "broker.heartbeat.interval.ms=1000"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	if err := c.Launch(); err != nil {
		t.Fatal(err)
	}
	a, err := c.NewAdmin()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	ctx := context.Background()
	for _, leader := range []bool{true, false} {
		if err := a.WaitHealthy(ctx, 3); err != nil {
			t.Fatal(err)
		}
		n, err := a.ActiveController(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !leader {
			n = n%3 + 1
		}
		heal, err := c.Isolate(n)
		if err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithTimeout(ctx, fenceWithin)
		took, err := a.WaitDropped(wctx, n, 3)
		cancel()
		heal()
		if err != nil {
			for m := 1; m <= 3; m++ {
				t.Logf("node %d's quorum lines (%s):\n%s", m, c.LogFile(m), quorumLines(c.LogFile(m), 40))
			}
			t.Fatalf("node %d (leads the quorum: %v) cut off: %v", n, leader, err)
		}
		t.Logf("node %d (leads the quorum: %v) cut off both ways: dropped by every other node after %s", n, leader, took.Round(100*time.Millisecond))
	}
	if err := a.WaitHealthy(ctx, 3); err != nil {
		t.Fatalf("healed, the cluster is not whole: %v", err)
	}
}

// quorumLines are the last n lines of a node's log about the KRaft
// quorum's elections and the brokers' fencing.
func quorumLines(file string, n int) string {
	b, err := os.ReadFile(file)
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if quorumWord.MatchString(l) && !strings.Contains(l, "Disconnecting from node") && !strings.Contains(l, "Cancelled in-flight") {
			out = append(out, l)
		}
	}
	return strings.Join(out[max(0, len(out)-n):], "\n")
}

var quorumWord = regexp.MustCompile(`(?i)vote|leader|epoch|prospective|candidate|resign|fenc|unattached|election`)
