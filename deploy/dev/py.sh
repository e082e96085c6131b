#!/usr/bin/env bash
# The Python SDK's checks (make test-python), in a venv of their own.
#
#   deploy/dev/py.sh venv            make or update the venv; print its path
#   deploy/dev/py.sh test [CASES]    venv, mypy --strict, pytest against a
#                                    fencegate dev it starts (or FENCEGATE_URL),
#                                    the wheel, schemathesis (CASES examples
#                                    per operation, default 10)
#   deploy/dev/py.sh fuzz [CASES]    schemathesis alone (default 200 per operation)
#
# Settings (environment):
#   FENCEGATE_PY_VENV   the venv (default /tmp/fencegate-py-venv; outside
#                       the clone, made by this script, never system-wide)
#   FENCEGATE_TEST_DATABASE_URL  the throwaway Postgres (default: deploy/dev/pg.sh url)
#   FENCEGATE_URL       a running gateway to test instead of starting one
set -euo pipefail

root="$(cd "$(dirname "$0")/../.." && pwd)"
venv="${FENCEGATE_PY_VENV:-/tmp/fencegate-py-venv}"
req="$root/python/requirements-dev.txt"

log() { echo "py.sh: $*" >&2; }

make_venv() {
  if [ ! -x "$venv/bin/python" ]; then
    if ! python3 -m venv "$venv" 2>/dev/null; then
      log "python3 -m venv failed: installing python3-venv (needs root)"
      apt-get install -y -qq python3-venv >/dev/null
      python3 -m venv "$venv"
    fi
  fi
  # The pinned tools, again only when the pins changed.
  if ! cmp -s "$req" "$venv/.fencegate-requirements"; then
    "$venv/bin/pip" install -q --disable-pip-version-check -r "$req"
    cp "$req" "$venv/.fencegate-requirements"
  fi
  "$venv/bin/pip" install -q --disable-pip-version-check --no-deps -e "$root/python"
}

# build builds the gateway and the Go fencedb helper the tests run, once.
build() {
  (cd "$root" && go build -o "$venv/bin/fencegate" ./cmd/fencegate && go build -o "$venv/bin/fencedbcli" ./internal/fencedbcli)
  export FENCEGATE_BIN="$venv/bin/fencegate" FENCEDBCLI_BIN="$venv/bin/fencedbcli"
}

run_fuzz() {
  make_venv
  build
  export FENCEGATE_TEST_DATABASE_URL="${FENCEGATE_TEST_DATABASE_URL:-$("$root/deploy/dev/pg.sh" url)}"
  export SCHEMATHESIS_CASES="${1:-200}" PATH="$venv/bin:$PATH"
  cd "$root/python"
  export SCHEMATHESIS_SUMMARY="$venv/schemathesis-summary"
  rm -f "$SCHEMATHESIS_SUMMARY"
  "$venv/bin/python" -m pytest -q -p no:cacheprovider tests/test_schemathesis.py
  cat "$SCHEMATHESIS_SUMMARY"
}

run_tests() {
  local cases="${1:-10}"
  make_venv
  export FENCEGATE_TEST_DATABASE_URL="${FENCEGATE_TEST_DATABASE_URL:-$("$root/deploy/dev/pg.sh" url)}"
  build
  export SCHEMATHESIS_CASES="$cases" PATH="$venv/bin:$PATH"
  cd "$root/python"
  log "mypy --strict"
  "$venv/bin/python" -m mypy --strict src tests
  log "pytest"
  export SCHEMATHESIS_SUMMARY="$venv/schemathesis-summary"
  rm -f "$SCHEMATHESIS_SUMMARY"
  "$venv/bin/python" -m pytest -q -p no:cacheprovider tests
  cat "$SCHEMATHESIS_SUMMARY"
  log "wheel"
  rm -rf "$venv/dist"
  "$venv/bin/python" -m build --wheel --no-isolation --outdir "$venv/dist" . >/dev/null
  rm -rf build src/*.egg-info
  ls "$venv"/dist/*.whl
}

case "${1:-}" in
  venv) make_venv; echo "$venv" ;;
  test) shift; run_tests "$@" ;;
  fuzz) shift; run_fuzz "$@" ;;
  *) echo "usage: $0 venv | test [CASES] | fuzz [CASES]" >&2; exit 2 ;;
esac
