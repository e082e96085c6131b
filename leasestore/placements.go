package leasestore

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Placement is one recorded version of a route's placement: the topic
// and partition count its leases are written under (FM31).
type Placement struct {
	Pattern    string
	Version    int
	Topic      string
	Partitions int32
	RecordedAt time.Time
}

// The placement queries. They sit beside their methods rather than in
// queries.go: they guard no lease invariant, only the operation that
// changes a route's partitions.

// qPlacements returns the latest version of every route's placement.
const qPlacements = `
SELECT DISTINCT ON (pattern) pattern, version, topic, partitions, recorded_at
  FROM route_placements ORDER BY pattern, version DESC`

// qPlacementHistory returns every recorded version of every route's
// placement, oldest first.
const qPlacementHistory = `
SELECT pattern, version, topic, partitions, recorded_at
  FROM route_placements ORDER BY pattern, version`

// qFirstPlacement records version 1 of a route's placement unless one is
// recorded: two gateways starting at once record it once.
const qFirstPlacement = `
INSERT INTO route_placements (pattern, version, topic, partitions)
VALUES ($1, 1, $2, $3) ON CONFLICT DO NOTHING`

// qNextPlacement records the next version of a route's placement; the
// primary key refuses a concurrent change that took the same version.
const qNextPlacement = `
INSERT INTO route_placements (pattern, version, topic, partitions)
SELECT $1, COALESCE(max(version), 0) + 1, $2, $3 FROM route_placements WHERE pattern = $1
RETURNING pattern, version, topic, partitions, recorded_at`

// qForgetPlacements forgets every recorded placement: only for a
// development broker that starts empty, whose topics are made from the
// config each time.
const qForgetPlacements = `TRUNCATE route_placements`

// qLiveNames lists the leases not yet ended, by database time.
const qLiveNames = `
SELECT name FROM leases WHERE state <> 'released' AND expires_at > clock_timestamp() ORDER BY name`

// Placements returns the latest recorded placement of each route, by
// pattern.
func (s *Store) Placements(ctx context.Context) (map[string]Placement, error) {
	rows, err := s.pool.Query(ctx, qPlacements)
	if err != nil {
		return nil, unavailable("placements", err)
	}
	ps, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Placement, error) {
		var p Placement
		return p, r.Scan(&p.Pattern, &p.Version, &p.Topic, &p.Partitions, &p.RecordedAt)
	})
	if err != nil {
		return nil, unavailable("placements", err)
	}
	out := make(map[string]Placement, len(ps))
	for _, p := range ps {
		out[p.Pattern] = p
	}
	return out, nil
}

// PlacementHistory returns every recorded version of every route's
// placement, by pattern and version: where a lease lived before its route
// grew (a checkpoint read waits for the ledger there too, FM82).
func (s *Store) PlacementHistory(ctx context.Context) ([]Placement, error) {
	rows, err := s.pool.Query(ctx, qPlacementHistory)
	if err != nil {
		return nil, unavailable("placements", err)
	}
	ps, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Placement, error) {
		var p Placement
		return p, r.Scan(&p.Pattern, &p.Version, &p.Topic, &p.Partitions, &p.RecordedAt)
	})
	if err != nil {
		return nil, unavailable("placements", err)
	}
	return ps, nil
}

// RecordFirstPlacement records version 1 of pattern's placement unless
// any version is recorded.
func (s *Store) RecordFirstPlacement(ctx context.Context, pattern, topic string, partitions int32) error {
	if _, err := s.pool.Exec(ctx, qFirstPlacement, pattern, topic, partitions); err != nil {
		return unavailable("record placement", err)
	}
	return nil
}

// RecordPlacement records the next version of pattern's placement and
// returns it. The caller has checked that no lease of the route is live
// and that the ledger has caught up (`fencegate routes set-partitions`).
func (s *Store) RecordPlacement(ctx context.Context, pattern, topic string, partitions int32) (Placement, error) {
	if partitions < 1 {
		return Placement{}, fmt.Errorf("%w: partitions %d", ErrInvalid, partitions)
	}
	var p Placement
	err := s.pool.QueryRow(ctx, qNextPlacement, pattern, topic, partitions).
		Scan(&p.Pattern, &p.Version, &p.Topic, &p.Partitions, &p.RecordedAt)
	if err != nil {
		return Placement{}, unavailable("record placement", err)
	}
	return p, nil
}

// LiveNames returns the names of the leases not yet ended (pending or
// active and unexpired), by name.
func (s *Store) LiveNames(ctx context.Context) ([]string, error) {
	rows, err := s.pool.Query(ctx, qLiveNames)
	if err != nil {
		return nil, unavailable("live leases", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, unavailable("live leases", err)
	}
	return names, nil
}

// ForgetPlacements forgets every recorded placement (development only;
// see qForgetPlacements).
func (s *Store) ForgetPlacements(ctx context.Context) error {
	if _, err := s.pool.Exec(ctx, qForgetPlacements); err != nil {
		return unavailable("forget placements", err)
	}
	return nil
}
