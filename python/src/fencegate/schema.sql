-- fencedb's tables (Postgres): one fence row per resource, and one receipt
-- per refused write. Apply once per database, with fencedb.Migrate or by
-- hand; every statement is idempotent.

-- The generation each resource accepts: the highest token whose write was
-- applied to it. Moved only by Check under this row's lock, never down.
CREATE TABLE IF NOT EXISTS fencegate_fences (
    resource   text        PRIMARY KEY,
    token      bigint      NOT NULL CHECK (token >= 0),
    owner_id   text        NOT NULL DEFAULT '',
    updated_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- A write refused because a later generation already wrote the resource:
-- "rejected" is a fact worth keeping; "missing" reads like success.
CREATE TABLE IF NOT EXISTS fencegate_refusals (
    id          bigserial   PRIMARY KEY,
    resource    text        NOT NULL,
    token       bigint      NOT NULL,
    fence_token bigint      NOT NULL,
    owner_id    text        NOT NULL DEFAULT '',
    reason      text        NOT NULL CHECK (reason IN ('stale')),
    at          timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE INDEX IF NOT EXISTS fencegate_refusals_resource ON fencegate_refusals (resource, at);
