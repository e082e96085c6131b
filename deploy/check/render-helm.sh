#!/usr/bin/env bash
# The Helm chart (deploy/helm/fencegate) rendered and linted with the real
# helm, built from the Go module proxy (the first run builds it, about 3
# minutes on two cores; then it is in the Go build cache).
#
#   deploy/check/render-helm.sh write   renders into deploy/helm/rendered/
#   deploy/check/render-helm.sh check   helm lint, and the committed
#                                       renderings equal helm template's
#
# Two renderings, each a file that TestDeploy* (cmd/fencegate) and k8s.mjs
# read: default.yaml (the chart's defaults) and full.yaml (ci/full-values.yaml:
# HTTPS with cert-manager, ServiceMonitor, NetworkPolicy, Namespace).
# check also proves the ServiceMonitor's capability switch: the defaults
# render none without monitoring.coreos.com/v1 and two with it; and that a
# NetworkPolicy without Postgres and Kafka destinations refuses to render.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
# The newest helm the proxy serves that builds with this Go (go1.26).
HELM_VERSION=v3.22.0
KUBE_VERSION=1.30.0
chart=deploy/helm/fencegate
out=deploy/helm/rendered
log() { echo "render-helm: $*" >&2; }
helm() { go run "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" "$@"; }

# render NAME [helm template flags...]: the rendering as committed.
render() {
  local name="$1"; shift
  printf '# Rendered by deploy/check/render-helm.sh (helm %s template fencegate %s -n fencegate%s); do not edit.\n' \
    "$HELM_VERSION" "$chart" "${*:+ $*}"
  helm template fencegate "$chart" -n fencegate --kube-version "$KUBE_VERSION" "$@"
}

renderings() { # NAME and flags, one a line
  echo "default"
  echo "full -f $chart/ci/full-values.yaml"
}

write() {
  mkdir -p "$out"
  while read -r name flags; do
    # shellcheck disable=SC2086 # flags are words
    render "$name" $flags > "$out/$name.yaml"
    log "wrote $out/$name.yaml"
  done < <(renderings)
}

check() {
  helm lint --strict --kube-version "$KUBE_VERSION" "$chart" >/dev/null
  helm lint --strict --kube-version "$KUBE_VERSION" -f "$chart/ci/full-values.yaml" "$chart" >/dev/null
  local tmp; tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' RETURN
  while read -r name flags; do
    # shellcheck disable=SC2086 # flags are words
    render "$name" $flags > "$tmp/$name.yaml"
    if ! diff -u "$out/$name.yaml" "$tmp/$name.yaml" >&2; then
      log "FAIL: $out/$name.yaml is not what the chart renders: run deploy/check/render-helm.sh write and commit it"
      return 1
    fi
  done < <(renderings)
  local n
  n="$(grep -c '^kind: ServiceMonitor$' "$out/default.yaml" || true)"
  [ "$n" -eq 0 ] || { log "FAIL: ServiceMonitor rendered without monitoring.coreos.com/v1"; return 1; }
  n="$(helm template fencegate "$chart" -n fencegate --kube-version "$KUBE_VERSION" \
    --api-versions monitoring.coreos.com/v1/ServiceMonitor | grep -c '^kind: ServiceMonitor$' || true)"
  [ "$n" -eq 2 ] || { log "FAIL: $n ServiceMonitors with monitoring.coreos.com/v1 served, want 2"; return 1; }
  if helm template fencegate "$chart" -n fencegate --kube-version "$KUBE_VERSION" \
    --set networkPolicy.enabled=true >/dev/null 2>&1; then
    log "FAIL: a NetworkPolicy without Postgres and Kafka destinations rendered"; return 1
  fi
  if helm template fencegate "$chart" -n fencegate --kube-version "$KUBE_VERSION" \
    --set tls.enabled=false >/dev/null 2>&1; then
    log "FAIL: forwarding without TLS (the replica credential in clear) rendered"; return 1
  fi
  log "helm $HELM_VERSION lint clean (defaults, full values); $(renderings | wc -l) renderings equal helm template; ServiceMonitor only with its API or forced; NetworkPolicy refuses to render without destinations; forwarding refuses to render in clear"
}

case "${1:-}" in
  write) write ;;
  check) check ;;
  *) echo "usage: $0 write|check" >&2; exit 2 ;;
esac
