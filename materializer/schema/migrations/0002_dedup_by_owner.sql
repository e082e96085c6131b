-- 0002: the ledger's dedup key is scoped to the owner: (lease, owner_id,
-- batch_id, seq). A later owner that restarts its batch counter (b-1
-- again) writes a new batch, and an acknowledged batch must never be
-- filed as a duplicate of another owner's. Written to run on a ledger of
-- any earlier shape (it may have had this change under the lease store's
-- line already).

ALTER TABLE applied_keys ADD COLUMN IF NOT EXISTS owner_id text;
ALTER TABLE accepted_records ADD COLUMN IF NOT EXISTS owner_id text;
ALTER TABLE rejected_records ADD COLUMN IF NOT EXISTS owner_id text;

-- Existing rows: the owner of a record is the owner its token was granted
-- to, as the lease history recorded it (when the ledger shares the lease
-- store's database). A key whose token has no history row keeps the empty
-- owner (it still dedups against its own kind).
DO $$
BEGIN
    IF to_regclass('lease_events') IS NOT NULL THEN
        UPDATE accepted_records a
           SET owner_id = (SELECT e.owner_id FROM lease_events e
                            WHERE e.name = a.lease AND e.token = a.token
                            ORDER BY e.id LIMIT 1)
         WHERE owner_id IS NULL;
    END IF;
END $$;
UPDATE accepted_records SET owner_id = '' WHERE owner_id IS NULL;
UPDATE applied_keys k
   SET owner_id = COALESCE((SELECT a.owner_id FROM accepted_records a
                             WHERE a.lease = k.lease AND a.batch_id = k.batch_id AND a.seq = k.seq
                             LIMIT 1), '')
 WHERE owner_id IS NULL;

ALTER TABLE applied_keys ALTER COLUMN owner_id SET NOT NULL;
ALTER TABLE accepted_records ALTER COLUMN owner_id SET NOT NULL;

ALTER TABLE applied_keys DROP CONSTRAINT IF EXISTS applied_keys_pkey;
ALTER TABLE applied_keys ADD CONSTRAINT applied_keys_pkey PRIMARY KEY (lease, owner_id, batch_id, seq);
ALTER TABLE accepted_records DROP CONSTRAINT IF EXISTS accepted_records_lease_batch_id_seq_key;
ALTER TABLE accepted_records DROP CONSTRAINT IF EXISTS accepted_records_dedup_key;
ALTER TABLE accepted_records ADD CONSTRAINT accepted_records_dedup_key UNIQUE (lease, owner_id, batch_id, seq);
