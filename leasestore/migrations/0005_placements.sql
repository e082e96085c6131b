-- 0005: the placement of each route: the topic and partition count under
-- which its leases are written, one row per version. A route's partition
-- count changes only by `fencegate routes set-partitions`, which records
-- the next version; `serve` records version 1 on first start and refuses
-- a config whose count differs from the latest version
-- (docs/design.md#placement, FM31).
CREATE TABLE route_placements (
    pattern     text        NOT NULL,
    version     integer     NOT NULL CHECK (version > 0),
    topic       text        NOT NULL,
    partitions  integer     NOT NULL CHECK (partitions > 0),
    recorded_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (pattern, version)
);
