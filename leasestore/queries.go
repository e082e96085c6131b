package leasestore

// Every query of the package, each named and commented with the invariant it
// protects. Every write is one statement: a transition and its
// lease_events row (and the row's notification, migration 0007) commit
// together or not at all, and all time is database time
// (clock_timestamp()), never an application clock.

// qSequenceSettings reads the token sequence's settings for Verify.
// I1: a cache above 1 or a cycling sequence can hand out a lower token later.
const qSequenceSettings = `
SELECT cache_size, cycle
  FROM pg_sequences
 WHERE sequencename = 'lease_token_seq'
   AND schemaname = ANY (current_schemas(false))
 ORDER BY array_position(current_schemas(false), schemaname)
 LIMIT 1`

// leaseColumns is the column list every query returns for a Lease.
const leaseColumns = `name, owner_id, fencing_token, state, granted_at, expires_at,
       ttl_ms, holder, COALESCE(producer_id, -1), COALESCE(producer_epoch, -1), updated_at,
       COALESCE(prev_token, 0), COALESCE(prev_owner_id, ''), COALESCE(client_id, '')`

// gateCTE is the rollout gate every grant and renewal statement carries
// (FM21): the statement's $N is the route pattern a direct client must be
// allowed on, or the empty string for a fenced client, which every state allows. A
// direct client is allowed only while the pattern's row says observe; the
// row is read FOR SHARE, so a change of state (qLockRollout) waits for the
// statements in flight and every later statement sees the new state.
func gateCTE(n string) string {
	return `gate AS (
    SELECT 1 AS ok
     WHERE $` + n + `::text = ''
        OR EXISTS (SELECT 1 FROM rollout_states r
                    WHERE r.pattern = $` + n + `::text AND r.state = 'observe' FOR SHARE)
), `
}

// qAcquire grants a lease: insert a new row, or take over a row whose lease
// has ended (expires_at <= clock_timestamp(); released rows have ended too).
//
// I1: on takeover the token is nextval() evaluated in DO UPDATE SET, that is
// under the row lock. A value allocated before the lock (the VALUES
// expression, reachable as EXCLUDED) may be older than the token it would
// replace and is never used on takeover; that value is simply burned.
// Exclusivity: the WHERE on DO UPDATE leaves an unexpired row untouched, so
// at most one unexpired grant exists per name at any database instant.
var qAcquire = `
WITH ` + gateCTE("6") + `granted AS (
    INSERT INTO leases AS l (name, owner_id, fencing_token, state, granted_at,
                             expires_at, ttl_ms, holder, updated_at, client_id)
    SELECT $1, $2, nextval('lease_token_seq'), 'pending', clock_timestamp(),
           clock_timestamp() + $3::bigint * interval '1 millisecond', $3::bigint, $4, clock_timestamp(), $5
      FROM gate
    ON CONFLICT (name) DO UPDATE
       SET prev_token      = l.fencing_token,
           prev_owner_id   = l.owner_id,
           prev_state      = l.state,
           prev_expires_at = l.expires_at,
           prev_client_id  = l.client_id,
           fencing_token   = nextval('lease_token_seq'),
           owner_id        = EXCLUDED.owner_id,
           state           = 'pending',
           granted_at      = clock_timestamp(),
           expires_at      = clock_timestamp() + EXCLUDED.ttl_ms * interval '1 millisecond',
           ttl_ms          = EXCLUDED.ttl_ms,
           holder          = EXCLUDED.holder,
           client_id       = EXCLUDED.client_id,
           producer_id     = NULL,
           producer_epoch  = NULL,
           updated_at      = clock_timestamp()
     WHERE l.expires_at <= clock_timestamp()
    RETURNING l.*
), superseded AS (
    INSERT INTO lease_events (name, kind, token, owner_id, holder, expires_at, client_id)
    SELECT name, 'superseded', prev_token, prev_owner_id, holder, prev_expires_at, prev_client_id
      FROM granted
     WHERE prev_token IS NOT NULL AND prev_state <> 'released'
), acquired AS (
    INSERT INTO lease_events (name, kind, token, owner_id, holder, expires_at, at, client_id)
    SELECT name, 'acquired', fencing_token, owner_id, holder, expires_at, granted_at, client_id
      FROM granted
)
SELECT ` + leaseColumns + ` FROM granted`

// qRegenerate gives the current owner a new generation (token N+1) of a
// lease it still holds: after an ambiguous commit, or to move the lease to
// another replica.
//
// The predicate is the renew predicate (name + owner + token + unexpired +
// active): only the acknowledged owner of the current generation can end it.
// I1: nextval() is evaluated under the row lock, as in qAcquire.
var qRegenerate = `
WITH ` + gateCTE("7") + `granted AS (
    UPDATE leases AS l
       SET prev_token      = l.fencing_token,
           prev_owner_id   = l.owner_id,
           prev_state      = l.state,
           prev_expires_at = l.expires_at,
           fencing_token   = nextval('lease_token_seq'),
           state           = 'pending',
           granted_at      = clock_timestamp(),
           expires_at      = clock_timestamp() + $4::bigint * interval '1 millisecond',
           ttl_ms          = $4::bigint,
           holder          = $5,
           client_id       = $6,
           producer_id     = NULL,
           producer_epoch  = NULL,
           updated_at      = clock_timestamp()
     WHERE l.name = $1 AND l.owner_id = $2 AND l.fencing_token = $3
       AND l.state = 'active' AND l.expires_at > clock_timestamp()
       AND EXISTS (SELECT 1 FROM gate)
    RETURNING l.*
), ev AS (
    INSERT INTO lease_events (name, kind, token, owner_id, holder, expires_at, at, client_id)
    SELECT name, 'regenerated', fencing_token, owner_id, holder, expires_at, granted_at, client_id
      FROM granted
)
SELECT ` + leaseColumns + ` FROM granted`

// qActivate marks a grant active once its producer epoch was bumped and its
// barrier committed.
//
// I4 and FM06: the grant must still be current (same token, still pending,
// unexpired). A replica that froze between its grant and its epoch bump
// finds its token superseded here and never acknowledges.
const qActivate = `
WITH activated AS (
    UPDATE leases
       SET state = 'active', producer_id = $3, producer_epoch = $4,
           updated_at = clock_timestamp()
     WHERE name = $1 AND fencing_token = $2 AND state = 'pending'
       AND expires_at > clock_timestamp()
    RETURNING *
), ev AS (
    INSERT INTO lease_events (name, kind, token, owner_id, holder, producer_id,
                              producer_epoch, expires_at, client_id)
    SELECT name, 'activated', fencing_token, owner_id, holder, producer_id,
           producer_epoch, expires_at, client_id
      FROM activated
)
SELECT ` + leaseColumns + ` FROM activated`

// qRenew extends an active lease. It writes no event: lease_events keeps
// transitions, and the row keeps the last renewal (renewed_at).
//
// FM03: owner, token and expires_at > clock_timestamp() in one predicate: an
// expired lease can never be renewed, even with the right token.
var qRenew = `
WITH ` + gateCTE("5") + `renewed AS (
    UPDATE leases
       SET expires_at = clock_timestamp() + $4::bigint * interval '1 millisecond',
           ttl_ms = $4::bigint, updated_at = clock_timestamp(), renewed_at = clock_timestamp()
     WHERE name = $1 AND owner_id = $2 AND fencing_token = $3
       AND state = 'active' AND expires_at > clock_timestamp()
       AND EXISTS (SELECT 1 FROM gate)
    RETURNING *
)
SELECT ` + leaseColumns + ` FROM renewed`

// qRenewBatch is qRenew for many leases in one statement (renewQueue):
// $1..$5 are parallel arrays of name, owner, token, TTL in ms and gate
// pattern, at most one element per name. It returns the rows it renewed;
// a caller whose row is not among them was refused.
//
// FM03: each row is renewed under qRenew's own predicate, with its own
// owner, token and TTL, and clock_timestamp() evaluated for that row: a
// lease that expires while the statement runs (say, while it waits for
// another writer's row lock, after which Postgres checks the predicate
// again on the newest row) is refused, whatever the other rows do.
// FM21: each renewal's gate pattern is read FOR SHARE, as in gateCTE,
// and only renewals whose pattern allows them are applied.
var qRenewBatch = `
WITH renewed AS (
    UPDATE leases AS l
       SET expires_at = clock_timestamp() + req.ttl_ms * interval '1 millisecond',
           ttl_ms = req.ttl_ms, updated_at = clock_timestamp(), renewed_at = clock_timestamp()
      FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[], $5::text[])
           AS req(name, owner_id, token, ttl_ms, gate)
     WHERE l.name = req.name AND l.owner_id = req.owner_id AND l.fencing_token = req.token
       AND l.state = 'active' AND l.expires_at > clock_timestamp()
       AND (req.gate = ''
            OR EXISTS (SELECT 1 FROM rollout_states r
                        WHERE r.pattern = req.gate AND r.state = 'observe' FOR SHARE))
    RETURNING l.*
)
SELECT ` + leaseColumns + ` FROM renewed`

// qGenericPlans makes a connection's prepared statements use generic
// plans only (PrepareConn says why).
const qGenericPlans = `SET plan_cache_mode = force_generic_plan`

// qRelease ends an active lease now. The row and its token stay: the token
// remains the high-water mark for the next grant (I1). $4 is the replica
// that forwarded the release (empty for none), kept in the audit (FM89).
const qRelease = `
WITH released AS (
    UPDATE leases
       SET state = 'released', expires_at = clock_timestamp(),
           updated_at = clock_timestamp()
     WHERE name = $1 AND owner_id = $2 AND fencing_token = $3
       AND state = 'active' AND expires_at > clock_timestamp()
    RETURNING *
), ev AS (
    INSERT INTO lease_events (name, kind, token, owner_id, holder, producer_id,
                              producer_epoch, expires_at, client_id, forwarded_by)
    SELECT name, 'released', fencing_token, owner_id, holder, producer_id,
           producer_epoch, expires_at, client_id, NULLIF($4, '')
      FROM released
)
SELECT ` + leaseColumns + ` FROM released`

// qAbandon ends a grant whose handover failed (the owner was never
// acknowledged). Only a still-pending grant of exactly this token is
// touched, so a later generation is never harmed.
const qAbandon = `
WITH abandoned AS (
    UPDATE leases
       SET state = 'released', expires_at = clock_timestamp(),
           updated_at = clock_timestamp()
     WHERE name = $1 AND fencing_token = $2 AND state = 'pending'
    RETURNING *
), ev AS (
    INSERT INTO lease_events (name, kind, token, owner_id, holder, expires_at, client_id)
    SELECT name, 'abandoned', fencing_token, owner_id, holder, expires_at, client_id
      FROM abandoned
)
SELECT ` + leaseColumns + ` FROM abandoned`

// qGet reads one lease with the database's current time, so callers can
// tell expired from live without their own clock.
const qGet = `SELECT ` + leaseColumns + `, clock_timestamp() FROM leases WHERE name = $1`

// qList lists a page of the leases whose name starts with a prefix: names
// in [$1, $2) after the cursor $3, in byte order, at most $4. The bounds
// are computed by the caller (prefixEnd), so the scan is an index range
// whatever the client's prefix: the byte-order operators (~>=~, ~<~) use
// leases_name_prefix (text_pattern_ops) under any database collation, and
// LIMIT cuts a page, never the set a client may see (FM40: the client's
// patterns narrow the prefix before the query, not after its LIMIT).
const qList = `SELECT ` + leaseColumns + `, clock_timestamp() FROM leases
 WHERE name ~>=~ $1 AND name ~<~ $2 AND name ~>~ $3 ORDER BY name USING ~<~ LIMIT $4`

// qListFrom is qList for a prefix no name can sort past (the empty one):
// no upper bound.
const qListFrom = `SELECT ` + leaseColumns + `, clock_timestamp() FROM leases
 WHERE name ~>=~ $1 AND name ~>~ $2 ORDER BY name USING ~<~ LIMIT $3`

// eventColumns is the column list every query returns for an Event.
const eventColumns = `id, name, kind, token, owner_id, holder, COALESCE(producer_id, -1),
       COALESCE(producer_epoch, -1), expires_at, at, COALESCE(client_id, ''), COALESCE(forwarded_by, '')`

// qEvents returns the newest events of a lease, newest first.
const qEvents = `SELECT ` + eventColumns + `
  FROM lease_events WHERE name = $1 ORDER BY id DESC LIMIT $2`

// qEventsAfter reads the events after id $1 in id order, at most $2, with
// the bounds of the statement's snapshot: the relay's read. Event ids are
// allocated in order (CACHE 1) but may commit out of order, so a missing
// id is either in flight or rolled back; EventsAfter's caller tells which
// from the snapshots (gateway/relay.go, settle).
const qEventsAfter = `
SELECT ` + eventColumns + `, pg_snapshot_xmin(pg_current_snapshot())::text::bigint,
       pg_snapshot_xmax(pg_current_snapshot())::text::bigint
  FROM lease_events WHERE id > $1 ORDER BY id LIMIT $2`

// qSnapshot is the bounds of the current snapshot: transactions below
// xmin are all finished (gateway/relay.go, settle).
const qSnapshot = `SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint`

// qEventsRange reads the events in ids ($3, $4] of the names in the
// ranges [$1[i], $2[i]), in id order, at most $5: a watch stream's
// catch-up, below the relay's cursor, where no id is in flight any more.
// Each range is its own scan of the (name text_pattern_ops, id) index
// (migration 0010): the rows read are the events under the caller's
// prefixes, not every event of the id window (FM91).
const qEventsRange = `SELECT ` + eventColumns + `
  FROM unnest($1::text[], $2::text[]) AS r(lo, hi)
 CROSS JOIN LATERAL (
       SELECT * FROM lease_events
        WHERE name ~>=~ r.lo AND name ~<~ r.hi AND id > $3 AND id <= $4
        ORDER BY id LIMIT $5) AS e
 ORDER BY id LIMIT $5`

// qLastEventID is the newest event id (0: none), where a relay starts,
// and its snapshot's xmax: the events in flight then are settled once a
// snapshot's xmin reaches it.
const qLastEventID = `SELECT COALESCE(max(id), 0), pg_snapshot_xmax(pg_current_snapshot())::text::bigint
  FROM lease_events`

// qPruneEvents deletes up to $2 events older than $1 milliseconds
// (database time), the oldest first; the caller repeats until none is
// left, so no statement holds many row locks or a long transaction.
const qPruneEvents = `
DELETE FROM lease_events WHERE id IN (
    SELECT id FROM lease_events
     WHERE at < clock_timestamp() - $1::bigint * interval '1 millisecond'
     ORDER BY at LIMIT $2)`

// qListen subscribes the relay's connection to the notifications the
// lease_events trigger sends (migration 0007).
const qListen = `LISTEN fencegate_lease_events`

// qPing checks that the database answers.
const qPing = `SELECT 1`

// qHeartbeat records that a replica is alive at an address.
const qHeartbeat = `
INSERT INTO replicas (name, url, heartbeat_at) VALUES ($1, $2, clock_timestamp())
ON CONFLICT (name) DO UPDATE SET url = EXCLUDED.url, heartbeat_at = EXCLUDED.heartbeat_at`

// qDeregister removes a draining replica from the registry, so that other
// replicas answer not_holder for its leases at once instead of sending
// workers to an address about to close. Routing only: lease rows keep
// their holder (a name), and nothing safety-related reads this table.
const qDeregister = `DELETE FROM replicas WHERE name = $1`

// qReplica reads a replica's address and whether it heartbeated within
// the given number of milliseconds (database time).
const qReplica = `
SELECT url, heartbeat_at > clock_timestamp() - $2::bigint * interval '1 millisecond'
  FROM replicas WHERE name = $1`

// rolloutColumns is the column list of a Rollout.
const rolloutColumns = `pattern, state, version, changed_at, changed_by, reason`

// qRollout reads a pattern's rollout state.
const qRollout = `SELECT ` + rolloutColumns + ` FROM rollout_states WHERE pattern = $1 AND changed_by <> ''`

// qRollouts reads every recorded rollout state.
const qRollouts = `SELECT ` + rolloutColumns + ` FROM rollout_states WHERE changed_by <> '' ORDER BY pattern`

// qEnsureRollout gives a pattern with no recorded state a row to lock:
// enforced, the state of a pattern with none, and no actor (RolloutOf
// reads such a row as nothing recorded).
const qEnsureRollout = `
INSERT INTO rollout_states (pattern, state, version, changed_by) VALUES ($1, 'enforced', 1, '')
ON CONFLICT (pattern) DO NOTHING`

// qLockRollout locks a pattern's row for the change of state: grants and
// renewals of direct clients read it FOR SHARE (gateCTE) and wait.
const qLockRollout = `SELECT ` + rolloutColumns + ` FROM rollout_states WHERE pattern = $1 FOR UPDATE`

// qRecordRollout records a change of state and its audit event in one
// statement, with the database's time.
const qRecordRollout = `
WITH st AS (
    UPDATE rollout_states
       SET state = $2, version = $3, changed_at = clock_timestamp(), changed_by = $4, reason = $5
     WHERE pattern = $1
    RETURNING changed_at
), ev AS (
    INSERT INTO rollout_events (pattern, version, from_state, to_state, forced, actor, reason, at)
    SELECT $1, $3, $6, $2, $7, $4, $5, changed_at FROM st
)
SELECT changed_at FROM st`

// qDirectLeases lists the live leases under a literal prefix granted to
// one of the named clients; the caller matches the pattern itself.
const qDirectLeases = `SELECT ` + leaseColumns + `, clock_timestamp() FROM leases
 WHERE name ~>=~ $1 AND client_id = ANY($2) AND state <> 'released' AND expires_at > clock_timestamp()
 ORDER BY name`

// qNextRolloutVersion is the version of a change of rollout state: from a
// sequence, so that markers of a change rolled back here after they
// reached Kafka are older than the next attempt's.
const qNextRolloutVersion = `SELECT nextval('rollout_version_seq')`

// qForgetRollouts forgets every rollout state (ForgetRollouts).
const qForgetRollouts = `TRUNCATE rollout_states`
