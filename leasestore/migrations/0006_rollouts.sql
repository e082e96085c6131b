-- 0006: the rollout state of each route pattern, and its audit trail
-- (docs/design.md#rollout, FM21). A pattern moves observe -> gated ->
-- enforced, and back when an operator says so. A pattern with no row is
-- enforced: what every deployment did before this migration, so an
-- upgrade never loosens one.
--
-- Only clients whose config says kind: direct (old binaries that take
-- leases here and write Kafka themselves) are judged by it: they are
-- granted and renewed leases of the pattern only while it is in observe.
-- The grant and renewal statements read the row FOR SHARE, so a change of
-- state waits for grants in flight and every grant after it sees it.
-- Versions come from a sequence, not a counter: a change whose markers
-- reached Kafka but whose transaction here rolled back has burnt its
-- version, so the next attempt's markers are newer than those on every
-- partition (the materializer takes only a newer marker).
CREATE SEQUENCE rollout_version_seq;

CREATE TABLE rollout_states (
    pattern    text        PRIMARY KEY,
    state      text        NOT NULL CHECK (state IN ('observe', 'gated', 'enforced')),
    version    bigint      NOT NULL CHECK (version > 0),
    changed_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    changed_by text        NOT NULL,
    reason     text        NOT NULL DEFAULT ''
);

-- One row per change, never updated or deleted: who, when, from which
-- state, and whether the step's precondition was overridden (--force, with
-- its reason).
CREATE TABLE rollout_events (
    id         bigserial   PRIMARY KEY,
    pattern    text        NOT NULL,
    version    bigint      NOT NULL,
    from_state text        NOT NULL CHECK (from_state IN ('observe', 'gated', 'enforced')),
    to_state   text        NOT NULL CHECK (to_state IN ('observe', 'gated', 'enforced')),
    forced     boolean     NOT NULL DEFAULT false,
    actor      text        NOT NULL,
    reason     text        NOT NULL DEFAULT '',
    at         timestamptz NOT NULL DEFAULT clock_timestamp(),
    UNIQUE (pattern, version)
);
