#!/usr/bin/env bash
# Roles of fencegate in the compose Postgres; run by the postgres image at
# its first start only (docker-entrypoint-initdb.d), as the superuser.
#
# fencegate_owner owns the database and runs `fencegate migrate`.
# fencegate_app is what gateways log in as: it reads and writes the tables
# and may call nextval() on the token sequence, but cannot setval() or
# ALTER it (DESIGN: the token sequence is CACHE 1, NO CYCLE, and the
# application must not be able to move it). fencegate_materializer is the
# materializer's: the ledger's tables only, granted after the migrations
# by the migrate service's grant step (RUNBOOK, "Database roles"); here it
# only gets to log in.
set -euo pipefail
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" \
  -v owner_pw="$DB_OWNER_PASSWORD" -v app_pw="$DB_APP_PASSWORD" -v mat_pw="$DB_MATERIALIZER_PASSWORD" \
  -v db="$POSTGRES_DB" <<'SQL'
CREATE ROLE fencegate_owner LOGIN PASSWORD :'owner_pw';
CREATE ROLE fencegate_app LOGIN PASSWORD :'app_pw';
CREATE ROLE fencegate_materializer LOGIN PASSWORD :'mat_pw';
-- The database owner owns schema public (pg_database_owner) and so may
-- create the tables of the migrations.
ALTER DATABASE :"db" OWNER TO fencegate_owner;
REVOKE ALL ON DATABASE :"db" FROM PUBLIC;
GRANT CONNECT ON DATABASE :"db" TO fencegate_app;
GRANT USAGE ON SCHEMA public TO fencegate_app;
GRANT CONNECT, TEMPORARY ON DATABASE :"db" TO fencegate_materializer;
GRANT USAGE ON SCHEMA public TO fencegate_materializer;
-- USAGE on a sequence allows nextval(); setval() needs UPDATE, which is
-- not granted; ALTER SEQUENCE needs ownership.
ALTER DEFAULT PRIVILEGES FOR ROLE fencegate_owner IN SCHEMA public
  GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO fencegate_app;
ALTER DEFAULT PRIVILEGES FOR ROLE fencegate_owner IN SCHEMA public
  GRANT USAGE, SELECT ON SEQUENCES TO fencegate_app;
SQL
