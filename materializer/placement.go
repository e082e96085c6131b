package materializer

import (
	"fmt"

	"github.com/fencegate/fencegate/barrier"
	"github.com/fencegate/fencegate/txnmap"
)

// checkPlacement says why barrier g, read from key, is not on its lease's
// partition, or "".
//
// A barrier is judged by the placement it signed, not by today's route:
// after a route grows from 16 to 32 partitions, shard:17's older barriers
// sit on partition 1 and its newer ones on 17, and a rebuild from offset
// 0 must accept both (FM31). The signed topic and partition must be the
// partition the barrier was read from, and the route's rule with the
// signed partition count must put the lease there, so a barrier copied
// to another partition, or signing a count under which its lease lives
// elsewhere, is refused.
//
// A barrier written before placements were signed is judged by the
// current router, as before: its lease must live on key today.
func (m *Materializer) checkPlacement(key partitionKey, g barrier.Grant) string {
	var p txnmap.Placement
	var err error
	if g.HasPlacement() {
		if g.Topic != key.topic || g.Partition != key.partition {
			return fmt.Sprintf("signed for %s/%d, read from %s/%d", g.Topic, g.Partition, key.topic, key.partition)
		}
		p, err = m.router.ResolveUnder(g.Lease, g.Partitions)
	} else {
		p, err = m.router.Resolve(g.Lease)
	}
	if err != nil || p.Topic != key.topic || p.Partition != key.partition {
		return fmt.Sprintf("lease %q does not live on %s/%d under %d partitions", g.Lease, key.topic, key.partition, p.Partitions)
	}
	return ""
}
