#!/usr/bin/env bash
# Prometheus and promtool from the OS packages, for the alert-rule tests and
# the end-to-end scrape test (the tests start their own Prometheus on a free
# port with their own configuration; nothing here runs a server).
#
#   deploy/dev/prom.sh install|check|bin
#
# install  installs Debian's 'prometheus' package when prometheus or promtool
#          is missing (needs root). The package's own service, if the init
#          system starts one, is stopped: it would scrape nothing of ours.
# check    runs `promtool check config` on deploy/prometheus/prometheus.yml
#          (which checks the rules file it loads, alerts.yaml) and
#          `promtool test rules` on deploy/prometheus/alerts_test.yaml.
# bin      prints the directory holding prometheus and promtool.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"

log() { echo "prom.sh: $*" >&2; }

have() { command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1; }

install() {
  if have; then
    return 0
  fi
  if [ "$(id -u)" -ne 0 ]; then
    log "prometheus/promtool not found and not root: install the 'prometheus' package"
    exit 1
  fi
  log "installing Prometheus from the OS packages"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  # No recommends: the node exporter would be a second daemon for nothing.
  apt-get install -y -qq --no-install-recommends prometheus >/dev/null
  # Where an init system started the packaged service, stop it: port 9090
  # stays free and nothing scrapes in the background of the tests.
  if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet prometheus 2>/dev/null; then
    systemctl stop prometheus || true
  elif command -v service >/dev/null 2>&1; then
    service prometheus stop >/dev/null 2>&1 || true
  fi
  have || { log "the prometheus package did not provide prometheus and promtool"; exit 1; }
}

check() {
  install
  promtool check config "$here/deploy/prometheus/prometheus.yml"
  (cd "$here/deploy/prometheus" && promtool test rules alerts_test.yaml)
}

case "${1:-}" in
  install) install ;;
  check) check ;;
  bin) install; dirname "$(readlink -f "$(command -v promtool)")" ;;
  *) echo "usage: $0 install|check|bin" >&2; exit 2 ;;
esac
