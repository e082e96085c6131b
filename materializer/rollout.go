package materializer

import (
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/barrier"
)

// The rollout states as markers carry them (leasestore.RolloutState's
// values; the materializer does not import the lease store).
const (
	stateObserve  = "observe"
	stateGated    = "gated"
	stateEnforced = "enforced"
)

// mark is a pattern's rollout state on one partition, as its markers set
// it so far. A pattern with no marker is enforced: the ledger refuses
// what it always refused (FM21).
type mark struct {
	state   string
	version int64
}

// keeps says whether the state lets the ledger keep what it would refuse.
func (k mark) keeps() bool { return k.state == stateObserve || k.state == stateGated }

// readMarks reads qLockMarks' rows into a.marks.
func (a *applyTx) readMarks(res pgx.BatchResults) error {
	rows, err := res.Query()
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var pattern string
		var k mark
		if err := rows.Scan(&pattern, &k.state, &k.version); err != nil {
			return err
		}
		a.marks[pattern] = k
	}
	if err := rows.Err(); err != nil {
		return err
	}
	return a.m.afterStatement()
}

// checkMarker opens a marker and says why it is refused, or "".
func (m *Materializer) checkMarker(key partitionKey, value []byte) (barrier.Marker, string) {
	mk, err := m.signer.OpenMarker(value)
	if err != nil {
		return mk, err.Error()
	}
	if mk.Topic != key.topic || mk.Partition != key.partition {
		return mk, fmt.Sprintf("rollout marker signed for %s/%d, read from %s/%d", mk.Topic, mk.Partition, key.topic, key.partition)
	}
	switch mk.State {
	case stateObserve, stateGated, stateEnforced:
	default:
		return mk, fmt.Sprintf("rollout marker state %q is not observe, gated or enforced", mk.State)
	}
	for _, rt := range m.router.Routes() {
		if rt.Pattern == mk.Pattern && rt.Topic == key.topic {
			return mk, ""
		}
	}
	return mk, fmt.Sprintf("rollout marker pattern %q is no route of topic %s", mk.Pattern, key.topic)
}
