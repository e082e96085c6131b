-- 0007: lease_events becomes an outbox worth keeping and watching
-- (docs/design.md, "Revocation notices").
--
-- Transitions only: a renewal no longer writes an event (at 10,000 leases
-- renewed every 3.3 s that was 3,000 rows a second, kept forever); the
-- lease row keeps the last one (renewed_at). Rows of 'renewed' written
-- before this migration stay until pruned.
ALTER TABLE leases ADD COLUMN renewed_at timestamptz;

-- The API client of the generation an event is about (leases.client_id
-- at the time): a watch stream shows the token only to clients that may
-- act for it (FM38). NULL for events written before this migration.
ALTER TABLE lease_events ADD COLUMN client_id text;

-- Retention is by age (`fencegate leases prune-events`): the index keeps
-- the prune a range scan.
CREATE INDEX lease_events_at ON lease_events (at);

-- The notification is sent by the transaction that writes the event, so
-- it is delivered exactly when the event commits, never for an event
-- rolled back. Its payload is the event id; listeners read the events
-- themselves (by id, which also catches up after a lost notification).
CREATE FUNCTION lease_events_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('fencegate_lease_events', NEW.id::text);
    RETURN NULL;
END
$$;

CREATE TRIGGER lease_events_notify AFTER INSERT ON lease_events
    FOR EACH ROW EXECUTE FUNCTION lease_events_notify();
