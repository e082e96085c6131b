-- 0004: the credential that acquired each generation. A lease's owner id is
-- bound to the API client (bearer token or client certificate) whose
-- request granted it: the gateway refuses renew, release, a new generation
-- and produce with that owner id from another client, unless the config
-- lets that client act for it (docs/security.md, "Owner binding"). NULL for
-- a generation granted before this migration: not bound until its next
-- grant.
ALTER TABLE leases ADD COLUMN client_id text;
