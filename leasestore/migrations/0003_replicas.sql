-- 0003: the replica registry. Each gateway replica that advertises an
-- address heartbeats here, so that a replica that receives a request for a
-- lease held elsewhere can answer 421 with the holder's address
-- (docs/design.md#several-replicas). Routing information only: no safety decision
-- reads this table.
CREATE TABLE replicas (
    name         text        PRIMARY KEY,
    url          text        NOT NULL,
    heartbeat_at timestamptz NOT NULL
);
