package kafkatest

import (
	"net"
	"sync"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/fencegate/fencegate/internal/netfault"
)

// Links are the fault proxies in front of a cluster's brokers, in the
// order kfake started them.
type Links struct {
	mu    sync.Mutex
	links []*netfault.Link
}

// All returns the links.
func (l *Links) All() []*netfault.Link {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]*netfault.Link(nil), l.links...)
}

// Each applies fault to every link and returns what undoes them all.
func (l *Links) Each(fault func(*netfault.Link) (undo func())) (undo func()) {
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

// StartProxied is Start with every broker behind a fault proxy
// (netfault): each broker advertises its proxy's address, so every
// client, the tests' readers included, reaches it through the proxy. Not
// available against an external cluster (skipped there).
func StartProxied(t testing.TB, topic string, partitions int32, opts ...kfake.Opt) (*Cluster, *Links) {
	t.Helper()
	links := &Links{}
	listen := func(network, addr string) (net.Listener, error) {
		ln, err := net.Listen(network, addr)
		if err != nil {
			return nil, err
		}
		l, err := netfault.New("broker", ln.Addr().String())
		if err != nil {
			ln.Close()
			return nil, err
		}
		links.mu.Lock()
		links.links = append(links.links, l)
		links.mu.Unlock()
		at, err := net.ResolveTCPAddr("tcp", l.Addr)
		if err != nil {
			return nil, err
		}
		return advertised{Listener: ln, at: at}, nil
	}
	c := Start(t, topic, partitions, append([]kfake.Opt{kfake.ListenFn(listen)}, opts...)...)
	t.Cleanup(func() {
		for _, l := range links.All() {
			l.Close()
		}
	})
	return c, links
}

// advertised is a listener that reports its proxy's address, which kfake
// advertises in metadata.
type advertised struct {
	net.Listener
	at net.Addr
}

func (a advertised) Addr() net.Addr { return a.at }
