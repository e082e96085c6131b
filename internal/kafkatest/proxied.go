package kafkatest

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/fencegate/fencegate/internal/netfault"
)

// StartProxied is Start with every broker behind a fault proxy
// (netfault.Links.Listen): each broker advertises its proxy's address, so
// every client, the tests' readers included, reaches it through the
// proxy. Not available against an external cluster (skipped there).
func StartProxied(t testing.TB, topic string, partitions int32, opts ...kfake.Opt) (*Cluster, *netfault.Links) {
	t.Helper()
	links := &netfault.Links{}
	c := Start(t, topic, partitions, append([]kfake.Opt{kfake.ListenFn(links.Listen)}, opts...)...)
	t.Cleanup(links.Close)
	return c, links
}
