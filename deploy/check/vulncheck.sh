#!/usr/bin/env bash
# Dependency scan of `make lint`: govulncheck over both modules (the
# repository's and client/, the SDK's own), symbol by symbol: a finding is
# a vulnerable function the code can reach, in a dependency or in the
# standard library of the Go that runs this script.
#
#   deploy/check/vulncheck.sh            (make vulncheck; the end of make lint)
#
# The database (FENCEGATE_VULNDB):
#   unset        a local copy built from the Go module golang.org/x/vulndb at
#                VULNDB_VERSION below (it ships every advisory as OSV JSON;
#                its cmd/indexdb indexes them), cached under
#                ${XDG_CACHE_HOME:-~/.cache}/fencegate/. It knows the
#                advisories up to that version's date and none published
#                later: bump VULNDB_VERSION to scan against newer ones. This
#                is the way on machines that reach only the module proxy
#                (vuln.go.dev is out of reach there).
#   a URL        used as govulncheck -db as it is: CI that reaches the live
#                database sets FENCEGATE_VULNDB=https://vuln.go.dev.
#
# Exit status: 0 no finding; 1 findings (listed; the whole report in
# vulncheck.log) or a scan that failed; 0 with "NOT SCANNED" on stdout when
# the default local database cannot be had (no module proxy): the scan is
# then skipped, loudly, never reported as clean. An explicit
# FENCEGATE_VULNDB that cannot be read fails.
set -euo pipefail
cd "$(dirname "$0")/../.."

GO="${GO:-go}"
GOVULNCHECK=golang.org/x/vuln/cmd/govulncheck@v1.9.0
VULNDB_MODULE=golang.org/x/vulndb
VULNDB_VERSION=v0.0.0-20261105234957-e22db6528018 # advisories to 2026-11-05
log=vulncheck.log

say() { echo "vulncheck: $*"; }

local_db() { # prints the file:// URL of the local database, building it once
  local cache="${XDG_CACHE_HOME:-$HOME/.cache}/fencegate/vulndb-$VULNDB_VERSION"
  if [ ! -s "$cache/index/db.json" ]; then
    local dir tmp
    dir="$("$GO" mod download -json "$VULNDB_MODULE@$VULNDB_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",*$/\1/p')" || return 1
    [ -d "$dir/data/osv" ] || return 1
    mkdir -p "${cache%/*}" && tmp="$(mktemp -d "${cache%/*}/tmp.XXXXXX")" || return 1
    say "building the local database from $VULNDB_MODULE@$VULNDB_VERSION (once; about two minutes)" >&2
    if ! "$GO" run "$VULNDB_MODULE/cmd/indexdb@$VULNDB_VERSION" -vulns "$dir/data/osv" -out "$tmp/db" >&2; then
      rm -rf "$tmp"; return 1
    fi
    rm -rf "$cache" && mv "$tmp/db" "$cache" && rm -rf "$tmp"
  fi
  echo "file://$cache"
}

db="${FENCEGATE_VULNDB:-}"
if [ -n "$db" ]; then
  say "database $db (FENCEGATE_VULNDB)"
elif db="$(local_db)"; then
  say "database: a local copy of $VULNDB_MODULE@$VULNDB_VERSION (advisories to 2026-11-05; later ones are not in it;"
  say "  CI that reaches the live database runs FENCEGATE_VULNDB=https://vuln.go.dev make vulncheck)"
else
  say "NOT SCANNED: no vulnerability database here: $VULNDB_MODULE@$VULNDB_VERSION could not be"
  say "  downloaded or indexed, and FENCEGATE_VULNDB is not set. Dependencies and the standard library"
  say "  were NOT checked. Run FENCEGATE_VULNDB=https://vuln.go.dev make vulncheck where it is reachable."
  exit 0
fi

# Installed, not `go run`: go run reports every exit status as 1, and 3
# is govulncheck's "findings".
bin="${XDG_CACHE_HOME:-$HOME/.cache}/fencegate/bin"
GOBIN="$bin" "$GO" install "$GOVULNCHECK"

: > "$log"
rc=0
for mod in . client; do
  echo "== govulncheck ($("$GO" env GOVERSION)) in module $mod" >> "$log"
  set +e
  (cd "$mod" && "$bin/govulncheck" -db "$db" ./...) >> "$log" 2>&1
  code=$?
  set -e
  case $code in
    0) say "$mod: no vulnerable symbol reached" ;;
    3) say "$mod: FINDINGS"; rc=1 ;;
    *) say "$mod: govulncheck failed (exit $code); see $log"; tail -n 20 "$log"; exit 1 ;;
  esac
done
if [ "$rc" -ne 0 ]; then
  # Findings listed in vuln-accepted.txt (read, with the reason) pass;
  # any other fails.
  accepted=deploy/check/vuln-accepted.txt
  found="$(grep -oE '^Vulnerability #[0-9]+: GO-[0-9]+-[0-9]+' "$log" | awk '{print $3}' | sort -u)"
  new="$(comm -23 <(echo "$found") <(grep -oE '^GO-[0-9]+-[0-9]+' "$accepted" | sort -u))"
  gone="$(comm -13 <(echo "$found") <(grep -oE '^GO-[0-9]+-[0-9]+' "$accepted" | sort -u))"
  for id in $found; do
    if ! grep -q "^$id" <<<"$new"; then say "accepted $(grep "^$id " "$accepted")"; fi
  done
  for id in $gone; do say "no longer found: $id (remove its line from $accepted)"; done
  if [ -z "$new" ]; then
    say "clean but for $(wc -w <<<"$found") accepted finding(s) ($accepted; whole report: $log)"
    exit 0
  fi
  say "NEW findings: $(tr '\n' ' ' <<<"$new")"
  # One block per finding: id, summary, where found, where fixed.
  grep -E '^(== govulncheck|Vulnerability #|Your code|This scan|vulnerabilities in|these vulnerabilities)|^    [A-Z]|^  (Module|Standard library)|Found in:|Fixed in:' "$log" | grep -v 'Example traces' || true
  say "FAILED: the code reaches the vulnerabilities above (whole report with traces: $log)."
  say "  Fix: upgrade the module (go get MODULE@FIXED), or Go itself for the standard library's;"
  say "  'Fixed in: N/A' has no fix yet: read the advisory and decide (docs/security.md, \"Dependency scan\")."
  exit 1
fi
say "clean"
