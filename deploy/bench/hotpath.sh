#!/usr/bin/env bash
# usage: deploy/bench/hotpath.sh OLD_COMMIT OUTDIR [COUNT]
# The hot-path micro-benchmarks (decode, stamp, barrier, the
# materializer's apply) of this tree beside OLD_COMMIT's, compared with
# benchstat (golang.org/x/perf/cmd/benchstat). The two trees' test
# binaries run alternately, COUNT times each (default 6), so that the
# load of a shared machine falls on both alike. barrier/bench_test.go is
# copied into the old tree when it has none. The apply benchmark needs
# Postgres (FENCEGATE_TEST_DATABASE_URL or deploy/dev/pg.sh).
set -euo pipefail
old=${1:?usage: hotpath.sh OLD_COMMIT OUTDIR [COUNT]}
out=${2:?usage: hotpath.sh OLD_COMMIT OUTDIR [COUNT]}
count=${3:-6}
root=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$out"
out=$(readlink -f "$out")
tree="$out/old-tree"
rm -rf "$tree" && mkdir -p "$tree"
git -C "$root" archive "$old" | tar -x -C "$tree"
[ -f "$tree/barrier/bench_test.go" ] || cp "$root/barrier/bench_test.go" "$tree/barrier/"
export FENCEGATE_TEST_DATABASE_URL=${FENCEGATE_TEST_DATABASE_URL:-$("$root/deploy/dev/pg.sh" url)}
# pkg:benchmark regexp
sets=("barrier:." "gateway:^BenchmarkDecodeProduce$" "materializer:^BenchmarkLedgerApply$/^(fresh|redelivered)$")
for side in old new; do
  src=$root
  [ "$side" = old ] && src=$tree
  for s in "${sets[@]}"; do
    pkg=${s%%:*}
    (cd "$src" && go test -c -o "$out/$side-$pkg.test" "./$pkg/")
  done
done
: >"$out/old.txt"
: >"$out/new.txt"
for i in $(seq 1 "$count"); do
  echo "round $i, load $(cut -d' ' -f1-3 /proc/loadavg)"
  for side in old new; do
    src=$root
    [ "$side" = old ] && src=$tree
    for s in "${sets[@]}"; do
      pkg=${s%%:*}
      (cd "$src/$pkg" && "$out/$side-$pkg.test" -test.run '^$' -test.bench "${s#*:}" -test.benchtime 300ms -test.benchmem) \
        | grep -E '^(Benchmark|goos|goarch|pkg|cpu)' >>"$out/$side.txt"
    done
  done
done
(cd "$root" && go run golang.org/x/perf/cmd/benchstat@latest "$out/old.txt" "$out/new.txt") | tee "$out/benchstat.txt"
