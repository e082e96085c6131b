-- 0008: a checkpoint keeps the type it was written as (docs/api.md,
-- "Checkpoints"): a batch sent as JSON with {"type": "JSON", ...} or
-- {"type": "STRING", ...} is read back so, not as BINARY base64 that every
-- client would have to guess at. The gateway stamps the type on the
-- checkpoint record (fencegate-checkpoint-type); rows written before
-- this migration, and every checkpoint of the binary body, are BINARY.
ALTER TABLE checkpoints
    ADD COLUMN value_type text NOT NULL DEFAULT 'BINARY' CHECK (value_type IN ('BINARY', 'STRING', 'JSON'));
