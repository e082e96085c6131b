-- 0008: the audit says when a replica acted for a client (FM89). A
-- release forwarded by another replica records that replica's name;
-- NULL for a request served where it arrived, and for events written
-- before this migration.
ALTER TABLE lease_events ADD COLUMN forwarded_by text;
