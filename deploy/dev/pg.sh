#!/usr/bin/env bash
# Throwaway PostgreSQL for development, tests and CI.
#
#   deploy/dev/pg.sh start|stop|status|url
#
# start   installs PostgreSQL from the OS packages when its binaries are missing
#         (needs root), creates a cluster owned by a non-root user in a temp
#         directory outside the clone, listens on loopback only, and creates
#         role and database "fencegate" (trust auth on loopback only).
#         A running cluster is left alone.
# stop    stops it (the data stays until the directory is removed).
# status  exit 0 when it answers, 1 otherwise.
# url     prints the connection URL.
#
# Settings (environment):
#   FENCEGATE_PG_PORT  port on 127.0.0.1            (default 54329)
#   FENCEGATE_PG_DIR   cluster directory            (default /tmp/fencegate-pg-$PORT)
#   FENCEGATE_PG_USER  OS user that owns the cluster when run as root
#                      (default fencegate-pg; created if missing)
set -euo pipefail

port="${FENCEGATE_PG_PORT:-54329}"
dir="${FENCEGATE_PG_DIR:-/tmp/fencegate-pg-$port}"
osuser="${FENCEGATE_PG_USER:-fencegate-pg}"
url="postgres://fencegate@127.0.0.1:$port/fencegate?sslmode=disable"

log() { echo "pg.sh: $*" >&2; }

find_bindir() {
  local d
  if command -v pg_ctl >/dev/null 2>&1 && command -v initdb >/dev/null 2>&1; then
    dirname "$(readlink -f "$(command -v pg_ctl)")"
    return 0
  fi
  for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
    [ -x "$d/pg_ctl" ] && [ -x "$d/initdb" ] && { echo "$d"; return 0; }
  done
  return 1
}

install_pg() {
  if [ "$(id -u)" -ne 0 ]; then
    log "PostgreSQL binaries not found and not root: install the 'postgresql' package"
    exit 1
  fi
  log "installing PostgreSQL from the OS packages"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq postgresql >/dev/null
  # The package may start its own cluster on 5432; we do not use it.
}

# as_owner runs a command as the cluster's owner.
as_owner() {
  if [ "$(id -u)" -eq 0 ]; then
    runuser -u "$osuser" -- "$@"
  else
    "$@"
  fi
}

ensure_osuser() {
  [ "$(id -u)" -eq 0 ] || return 0
  id "$osuser" >/dev/null 2>&1 && return 0
  useradd --system --no-create-home --shell /usr/sbin/nologin "$osuser"
}

is_up() {
  local bindir
  bindir="$(find_bindir)" || return 1
  "$bindir/pg_isready" -q -h 127.0.0.1 -p "$port" >/dev/null 2>&1
}

init_cluster() {
  local bindir="$1"
  mkdir -p "$dir"
  [ "$(id -u)" -eq 0 ] && chown "$osuser" "$dir"
  chmod 700 "$dir"
  as_owner "$bindir/initdb" -D "$dir/data" -U postgres --auth=trust \
    --encoding=UTF8 --locale=C >"$dir/initdb.log" 2>&1 || {
    cat "$dir/initdb.log" >&2
    exit 1
  }
  cat >"$dir/data/pg_hba.conf" <<HBA
# Throwaway development cluster: trust on loopback only.
local all all trust
host  all all 127.0.0.1/32 trust
HBA
  cat >>"$dir/data/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$dir'
max_connections = 300
shared_buffers = 128MB
CONF
}

create_role_db() {
  local bindir="$1"
  as_owner "$bindir/psql" -q -h 127.0.0.1 -p "$port" -U postgres -d postgres -v ON_ERROR_STOP=1 <<SQL
SELECT 'CREATE ROLE fencegate LOGIN CREATEDB'
 WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'fencegate') \gexec
SELECT 'CREATE DATABASE fencegate OWNER fencegate'
 WHERE NOT EXISTS (SELECT 1 FROM pg_database WHERE datname = 'fencegate') \gexec
SQL
}

start() {
  local bindir
  bindir="$(find_bindir)" || { install_pg; bindir="$(find_bindir)"; }
  if is_up; then
    log "already running on 127.0.0.1:$port"
    create_role_db "$bindir"
    return 0
  fi
  ensure_osuser
  [ -f "$dir/data/PG_VERSION" ] || init_cluster "$bindir"
  as_owner "$bindir/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 start >/dev/null || {
    tail -n 30 "$dir/server.log" >&2
    exit 1
  }
  create_role_db "$bindir"
  log "running on 127.0.0.1:$port (data in $dir)"
}

stop() {
  local bindir
  bindir="$(find_bindir)" || return 0
  [ -f "$dir/data/PG_VERSION" ] || return 0
  as_owner "$bindir/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null 2>&1 || true
  log "stopped"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) if is_up; then echo "running: $url"; else echo "not running"; exit 1; fi ;;
  url) echo "$url" ;;
  *) echo "usage: $0 start|stop|status|url" >&2; exit 2 ;;
esac
