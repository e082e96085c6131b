-- 0009: a superseded event names the client of the generation it
-- superseded, so that its token is shown only to clients that may act
-- for that client (FM90). The grant statement keeps the row's client
-- before the grant in prev_client_id, as it keeps prev_token.
ALTER TABLE leases ADD COLUMN prev_client_id text;

-- Superseded events written before this migration: their generation's
-- client is the one its grant recorded.
UPDATE lease_events s
   SET client_id = g.client_id
  FROM lease_events g
 WHERE s.kind = 'superseded' AND s.client_id IS NULL
   AND g.name = s.name AND g.token = s.token
   AND g.kind IN ('acquired', 'regenerated') AND g.client_id IS NOT NULL;
