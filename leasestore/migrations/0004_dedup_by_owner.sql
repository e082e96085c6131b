-- 0004: the ledger's dedup key is scoped to the owner: (lease, owner_id,
-- batch_id, seq). A later owner that restarts its batch counter (b-1
-- again) writes a new batch, and an acknowledged batch must never be
-- filed as a duplicate of another owner's.

ALTER TABLE applied_keys ADD COLUMN owner_id text;
ALTER TABLE accepted_records ADD COLUMN owner_id text;

-- Existing rows: the owner of a record is the owner its token was granted
-- to, as the lease history recorded it. A key whose token has no history
-- row keeps the empty owner (it still dedups against its own kind).
UPDATE accepted_records a
   SET owner_id = COALESCE((SELECT e.owner_id FROM lease_events e
                             WHERE e.name = a.lease AND e.token = a.token
                             ORDER BY e.id LIMIT 1), '');
UPDATE applied_keys k
   SET owner_id = COALESCE((SELECT a.owner_id FROM accepted_records a
                             WHERE a.lease = k.lease AND a.batch_id = k.batch_id AND a.seq = k.seq), '');

ALTER TABLE applied_keys ALTER COLUMN owner_id SET NOT NULL;
ALTER TABLE accepted_records ALTER COLUMN owner_id SET NOT NULL;

ALTER TABLE applied_keys DROP CONSTRAINT applied_keys_pkey;
ALTER TABLE applied_keys ADD PRIMARY KEY (lease, owner_id, batch_id, seq);
ALTER TABLE accepted_records DROP CONSTRAINT accepted_records_lease_batch_id_seq_key;
ALTER TABLE accepted_records ADD CONSTRAINT accepted_records_dedup_key UNIQUE (lease, owner_id, batch_id, seq);

ALTER TABLE rejected_records ADD COLUMN owner_id text;
