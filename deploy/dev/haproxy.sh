#!/usr/bin/env bash
# HAProxy from the OS packages, for the load balancer in front of the
# harness's gateway replicas (`fencegate loadtest --replicas 3 --balancer
# haproxy` and TestBalancedReplicasShort). The harness writes its own
# haproxy.cfg and runs haproxy in the foreground on a free port; nothing
# here runs a server.
#
#   deploy/dev/haproxy.sh install|bin
#
# install  installs Debian's 'haproxy' package when haproxy is missing
#          (needs root). The package's own service, if the init system
#          starts one, is stopped: it would listen for nothing of ours.
# bin      prints the path of the haproxy binary.
set -euo pipefail

log() { echo "haproxy.sh: $*" >&2; }

have() { command -v haproxy >/dev/null 2>&1; }

install() {
  if have; then
    return 0
  fi
  if [ "$(id -u)" -ne 0 ]; then
    log "haproxy not found and not root: install the 'haproxy' package"
    exit 1
  fi
  log "installing HAProxy from the OS packages"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq --no-install-recommends haproxy >/dev/null
  # Where an init system started the packaged service, stop it: the
  # harness runs its own haproxy with its own configuration.
  if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet haproxy 2>/dev/null; then
    systemctl stop haproxy || true
  elif command -v service >/dev/null 2>&1; then
    service haproxy stop >/dev/null 2>&1 || true
  fi
  have || { log "the haproxy package did not provide haproxy"; exit 1; }
}

case "${1:-}" in
  install) install ;;
  bin) install; readlink -f "$(command -v haproxy)" ;;
  *) echo "usage: $0 install|bin" >&2; exit 2 ;;
esac
