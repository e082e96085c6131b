-- 0001: leases, the token sequence and the lease audit trail.

-- I1 (token order): CACHE 1 so that no backend holds a private block of
-- values; with CACHE > 1 a later grant can get a lower token. NO CYCLE so the
-- sequence can never wrap to a low value. Store.Verify refuses to run
-- otherwise.
CREATE SEQUENCE lease_token_seq AS bigint NO CYCLE CACHE 1;

-- One row per lease name, never deleted: a released or expired row keeps its
-- token as the per-name high-water mark.
CREATE TABLE leases (
    name            text        PRIMARY KEY,
    owner_id        text        NOT NULL,
    fencing_token   bigint      NOT NULL,
    state           text        NOT NULL CHECK (state IN ('pending', 'active', 'released')),
    granted_at      timestamptz NOT NULL,
    expires_at      timestamptz NOT NULL,
    ttl_ms          bigint      NOT NULL CHECK (ttl_ms > 0),
    holder          text        NOT NULL,
    producer_id     bigint,
    producer_epoch  integer,
    updated_at      timestamptz NOT NULL,
    -- The row as it was before the last grant, so that the grant statement
    -- can record what it superseded in lease_events.
    prev_token      bigint,
    prev_owner_id   text,
    prev_state      text,
    prev_expires_at timestamptz
);

CREATE INDEX leases_name_prefix ON leases (name text_pattern_ops);

-- Append-only history of every state change, written by the same statement
-- that makes the change.
CREATE TABLE lease_events (
    id             bigserial   PRIMARY KEY,
    name           text        NOT NULL,
    kind           text        NOT NULL CHECK (kind IN
                       ('acquired', 'regenerated', 'activated', 'renewed',
                        'released', 'superseded', 'abandoned')),
    token          bigint      NOT NULL,
    owner_id       text        NOT NULL,
    holder         text        NOT NULL,
    producer_id    bigint,
    producer_epoch integer,
    expires_at     timestamptz NOT NULL,
    at             timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE INDEX lease_events_name_id ON lease_events (name, id);
