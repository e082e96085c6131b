// Package netfault puts a fault proxy on one TCP link, so that tests and
// the load harness can cut, slow or half-open the network between a
// component and what it depends on (the broker, Postgres) without
// replacing either. The proxy is toxiproxy's, used as a library: every
// connection through a Link passes its toxics.
//
// Faults, each until its undo function runs:
//
//   - Blackhole: bytes in the given directions are dropped, nothing is
//     reset (a partition as TCP sees it: the peer waits). Undoing it
//     closes the connections it held, as a partition healed after TCP
//     gave up does.
//   - Reset: every connection is reset (RST) at its next byte.
//   - Latency: each chunk waits latency ± jitter.
//   - Bandwidth: at most rate KiB/s.
//
// Upstream is the client-to-server direction, Downstream the reply.
//
// It must never be imported by the gateway, the materializer or the lease
// store: faults are injected from outside a component (tests, the load
// harness), never compiled into its own path.
package netfault

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// Direction is the traffic a fault applies to.
type Direction int

// The directions of a link.
const (
	Upstream   Direction = 1 << iota // client to server
	Downstream                       // server to client
	Both       = Upstream | Downstream
)

// Link is a fault proxy in front of one upstream address. Connect to
// Addr instead of the upstream.
type Link struct {
	// Addr is where the proxy listens (127.0.0.1, a free port).
	Addr     string
	Upstream string
	proxy    *toxiproxy.Proxy
	mu       sync.Mutex
	n        int // toxics added, for unique names
}

var (
	serverOnce sync.Once
	server     *toxiproxy.ApiServer
)

// apiServer is the toxiproxy server every Link hangs off: it holds no
// listener of its own here, only the proxies' logger and metrics.
func apiServer() *toxiproxy.ApiServer {
	serverOnce.Do(func() {
		server = toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	})
	return server
}

// New starts a Link to upstream, listening on a free loopback port.
func New(name, upstream string) (*Link, error) {
	p := toxiproxy.NewProxy(apiServer(), name, "127.0.0.1:0", upstream)
	if err := p.Start(); err != nil {
		return nil, fmt.Errorf("netfault: %s: %w", name, err)
	}
	return &Link{Addr: p.Listen, Upstream: upstream, proxy: p}, nil
}

// Close stops the proxy and closes every connection through it.
func (l *Link) Close() { l.proxy.Stop() }

// Blackhole drops the bytes of the directions in d until undo.
func (l *Link) Blackhole(d Direction) (undo func()) {
	return l.add(d, "timeout", `{"timeout":0}`)
}

// Reset resets every connection through the link at its next byte, and
// every new one, until undo.
func (l *Link) Reset() (undo func()) {
	return l.add(Both, "reset_peer", `{"timeout":0}`)
}

// Latency delays the directions in d by latency ± jitter until undo.
func (l *Link) Latency(d Direction, latency, jitter time.Duration) (undo func()) {
	return l.add(d, "latency", fmt.Sprintf(`{"latency":%d,"jitter":%d}`, latency.Milliseconds(), jitter.Milliseconds()))
}

// Bandwidth limits the directions in d to kibPerSecond until undo.
func (l *Link) Bandwidth(d Direction, kibPerSecond int) (undo func()) {
	return l.add(d, "bandwidth", fmt.Sprintf(`{"rate":%d}`, kibPerSecond))
}

// add adds one toxic of kind per direction in d and returns what removes
// them all.
func (l *Link) add(d Direction, kind, attrs string) func() {
	var names []string
	for _, s := range []struct {
		dir  Direction
		name string
	}{{Upstream, "upstream"}, {Downstream, "downstream"}} {
		if d&s.dir == 0 {
			continue
		}
		l.mu.Lock()
		l.n++
		name := fmt.Sprintf("%s-%s-%d", kind, s.name, l.n)
		l.mu.Unlock()
		body := fmt.Sprintf(`{"name":%q,"type":%q,"stream":%q,"toxicity":1,"attributes":%s}`, name, kind, s.name, attrs)
		if _, err := l.proxy.Toxics.AddToxicJson(strings.NewReader(body)); err != nil {
			panic(fmt.Sprintf("netfault: %s: %v", body, err)) // the JSON above is ours: a bug
		}
		names = append(names, name)
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			for _, n := range names {
				_ = l.proxy.Toxics.RemoveToxic(context.Background(), n)
			}
		})
	}
}

// For applies a fault for d and then undoes it; it returns at once.
// The returned channel closes once the fault is undone.
func For(d time.Duration, fault func() (undo func())) <-chan struct{} {
	undo := fault()
	done := make(chan struct{})
	time.AfterFunc(d, func() { undo(); close(done) })
	return done
}

// Links are the fault proxies in front of a cluster's brokers, one each,
// in the order the brokers started.
type Links struct {
	mu    sync.Mutex
	links []*Link
}

// All returns the links.
func (l *Links) All() []*Link {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]*Link(nil), l.links...)
}

// Each applies fault to every link and returns what undoes them all.
func (l *Links) Each(fault func(*Link) (undo func())) (undo func()) {
	var undos []func()
	for _, k := range l.All() {
		undos = append(undos, fault(k))
	}
	return func() {
		for _, u := range undos {
			u()
		}
	}
}

// Close stops every proxy.
func (l *Links) Close() {
	for _, k := range l.All() {
		k.Close()
	}
}

// Listen is a kfake ListenFn (kfake.ListenFn(links.Listen)): each broker
// listens where kfake asks and advertises a fault proxy in front of it
// (kfake advertises its listener's address), added to links; every
// client then reaches the broker through the proxy.
func (l *Links) Listen(network, addr string) (net.Listener, error) {
	ln, err := net.Listen(network, addr)
	if err != nil {
		return nil, err
	}
	k, err := New("broker", ln.Addr().String())
	if err != nil {
		ln.Close()
		return nil, err
	}
	at, err := net.ResolveTCPAddr("tcp", k.Addr)
	if err != nil {
		ln.Close()
		k.Close()
		return nil, err
	}
	l.mu.Lock()
	l.links = append(l.links, k)
	l.mu.Unlock()
	return advertised{Listener: ln, at: at}, nil
}

// advertised is a listener that reports its proxy's address.
type advertised struct {
	net.Listener
	at net.Addr
}

func (a advertised) Addr() net.Addr { return a.at }
