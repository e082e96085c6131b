package kafkadev

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/fencegate/fencegate/internal/netfault"
)

// A Proxied cluster reaches every node through fault proxies, one per
// path: the clients' path to node n, and node k's own path to node n's
// broker (its replication, its transaction markers) and to node n's
// controller (the quorum and the broker's heartbeats). Each node has a
// replication listener per calling node (REPL1-REPL3) and names its own
// as its inter-broker listener, and a controller listener per calling
// node (CTL1-CTL3), each advertised as that caller's proxy, its own named
// first in controller.listener.names; its quorum voters are its own
// proxies to the controllers. So Isolate can cut a node off in both
// directions (what it sends and what it is sent) and leave the other
// nodes' paths to each other whole: a real partition of one node from
// the rest. With one CONTROLLER listener, a KRaft leader advertised its
// own address in BeginQuorumEpoch and a follower fetched from it there,
// past the proxies: cut off, the leader kept that follower, so the
// quorum never elected another and the other node never dropped it
// (TestIsolateFencesTheNode, 3 of 5 cuts of a leader).

// link is one fault proxy: the path from node from (0: the clients) to
// node to's broker or, when controller, its controller.
type link struct {
	from, to   int
	controller bool
	*netfault.Link
}

// pathOffset is the offset from FENCEGATE_KAFKA_PORT of node n's
// replication listener for node k's calls (a Proxied cluster only).
func pathOffset(n, k int) int { return 300 + 3*(n-1) + k }

// controllerOffset is the offset from FENCEGATE_KAFKA_PORT of node n's
// controller listener for node k's calls (a Proxied cluster only).
func controllerOffset(n, k int) int { return 310 + 3*(n-1) + k }

// proxyNodes starts the fault proxies of every node for the ports of
// c.Port (those of an earlier try closed first) and the settings that
// point the nodes at them.
func (c *Cluster) proxyNodes() error {
	c.closeLinks()
	c.links, c.proxy = nil, nil
	if c.mode != "cluster" {
		return ErrProxiedSingle
	}
	for n := 1; n <= 3; n++ {
		if err := c.addLink(link{from: 0, to: n}, c.Port+99+n); err != nil {
			return err
		}
		for k := 1; k <= 3; k++ {
			if err := c.addLink(link{from: k, to: n}, c.Port+pathOffset(n, k)); err != nil {
				return err
			}
			if err := c.addLink(link{from: k, to: n, controller: true}, c.Port+controllerOffset(n, k)); err != nil {
				return err
			}
		}
	}
	for n := 1; n <= 3; n++ {
		c.proxy = append(c.proxy, fmt.Sprintf("FENCEGATE_KAFKA_NODE_CONFIG_%d=%s", n, c.nodeConfig(n)))
	}
	return nil
}

// ErrProxiedSingle is Launch's error for a single node with Proxied:
// only a cluster has nodes to cut off from each other.
var ErrProxiedSingle = errors.New("kafkadev: Proxied needs Nodes: 3")

// addLink starts the proxy of path l in front of port.
func (c *Cluster) addLink(l link, port int) error {
	var err error
	l.Link, err = netfault.New(fmt.Sprintf("kafka-%d-%d-%t-%d", l.from, l.to, l.controller, port), "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		return err
	}
	c.links = append(c.links, l)
	return nil
}

// path returns the address of the proxy of the path from from to to's
// broker (or controller).
func (c *Cluster) path(from, to int, controller bool) string {
	for _, l := range c.links {
		if l.from == from && l.to == to && l.controller == controller {
			return l.Addr
		}
	}
	return ""
}

// clientAddrs are the clients' paths to every node, in node order.
func (c *Cluster) clientAddrs() string {
	var out []string
	for n := 1; n <= c.Nodes(); n++ {
		out = append(out, c.path(0, n, false))
	}
	return strings.Join(out, ",")
}

// nodeConfig is node n's listeners, what it advertises on each, its
// inter-broker and controller listeners and its quorum voters: its own
// paths.
func (c *Cluster) nodeConfig(n int) string {
	listeners := []string{fmt.Sprintf("PLAINTEXT://127.0.0.1:%d", c.Port+99+n)}
	advertised := []string{"PLAINTEXT://" + c.path(0, n, false)}
	protocols := []string{"PLAINTEXT:PLAINTEXT"}
	controllers := []string{fmt.Sprintf("CTL%d", n)}
	var voters []string
	for k := 1; k <= 3; k++ {
		repl, ctl := fmt.Sprintf("REPL%d", k), fmt.Sprintf("CTL%d", k)
		listeners = append(listeners, fmt.Sprintf("%s://127.0.0.1:%d", repl, c.Port+pathOffset(n, k)),
			fmt.Sprintf("%s://127.0.0.1:%d", ctl, c.Port+controllerOffset(n, k)))
		advertised = append(advertised, repl+"://"+c.path(k, n, false), ctl+"://"+c.path(k, n, true))
		protocols = append(protocols, repl+":PLAINTEXT", ctl+":PLAINTEXT")
		if k != n {
			controllers = append(controllers, ctl)
		}
		voters = append(voters, fmt.Sprintf("%d@%s", k, c.path(n, k, true)))
	}
	return strings.Join([]string{
		"listeners=" + strings.Join(listeners, ","),
		"advertised.listeners=" + strings.Join(advertised, ","),
		"listener.security.protocol.map=" + strings.Join(protocols, ","),
		fmt.Sprintf("inter.broker.listener.name=REPL%d", n),
		"controller.listener.names=" + strings.Join(controllers, ","),
		"controller.quorum.voters=" + strings.Join(voters, ","),
	}, "\n")
}

func (c *Cluster) closeLinks() {
	for _, l := range c.links {
		l.Close()
	}
}

// ErrNotProxied is Isolate's error on a cluster started without Proxied.
var ErrNotProxied = errors.New("kafkadev: Isolate needs Options.Proxied")

// Isolate cuts node n off from the clients and the other nodes, both
// ways: every byte on every path to it or from it is dropped (its
// connections stay open, as behind a failed switch), while the other
// nodes still reach each other. heal lets the bytes pass again.
func (c *Cluster) Isolate(n int) (heal func(), err error) {
	if c.links == nil {
		return nil, ErrNotProxied
	}
	var undo []func()
	for _, l := range c.links {
		if cuts(l, n) {
			undo = append(undo, l.Blackhole(netfault.Both))
		}
	}
	return func() {
		for _, u := range undo {
			u()
		}
	}, nil
}

// cuts reports whether isolating node n cuts path l: a path to or from n,
// but not n's path to itself.
func cuts(l link, n int) bool {
	return l.from != l.to && (l.from == n || l.to == n)
}
