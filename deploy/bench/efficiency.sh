#!/usr/bin/env bash
# usage: deploy/bench/efficiency.sh OUTDIR
# The efficiency figures of BENCHMARKS-history.md ("Efficiency: the gateway
# next to a like-for-like producer"),
# each run's report in OUTDIR/<run>/ (out.txt, r.json):
#   saturated  the gateway beside the like-for-like direct producers and
#              the bare loop (each stamped and plain), CPU per record by
#              process, materializer paused;
#   half       the same at half the saturated run's steady rate per lease
#              (--rate), direct producers paced alike: batch p50 / p99 of
#              both at the same offered load;
#   cold-1000, cold-5000  cold starts (deploy/bench/coldstart.sh) with the
#              handover yardstick (16 loops).
# Then the same two cold starts with the patched confluent-kafka-go
# (deploy/bench/patched.sh) when PATCHED=1. Needs `make build` (or
# FG=path/to/fencegate) and deploy/dev/pg.sh start. Two shared cores:
# compare ratios inside one run, not absolute figures across runs.
set -euo pipefail
out=${1:?usage: efficiency.sh OUTDIR}
here=$(cd "$(dirname "$0")" && pwd)
fg=$(readlink -f "${FG:-bin/fencegate}")
mkdir -p "$out"
out=$(readlink -f "$out")

run() { # run NAME FLAGS...: one harness run in OUTDIR/NAME
  local name=$1
  shift
  mkdir -p "$out/$name"
  (cd "$out/$name" && "$fg" loadtest --embedded --separate-processes --leases 64 --workers-per-lease 1 \
    --freeze-every 0 --churn-every 0 --naive=false --duration 30s --pause-materializer \
    --json r.json "$@" >out.txt 2>&1) || { tail -20 "$out/$name/out.txt" >&2; return 1; }
  grep -E '^CPU per record|^\| (records/s|batch latency)|^steady state' "$out/$name/out.txt"
}

run saturated --bare-producers 8
# Half the saturated steady rate, in batches/s per lease.
rate=$(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(round(r["steady"]["records_per_s"]/r["scenario"]["leases"]/r["scenario"]["batch_size"]/2, 2))' "$out/saturated/r.json")
echo "half rate: $rate batches/s per lease"
run half --rate "$rate" --bare-producers 0

for n in 1000 5000; do
  d=$(( n == 5000 ? 150 : 75 ))
  FG=$fg "$here/coldstart.sh" "$out/cold-$n" "$n" --cold-start --duration "${d}s"
  grep '^handover yardstick' "$out/cold-$n/out.txt"
  if [ "${PATCHED:-0}" = 1 ]; then
    [ -x "$out/fencegate-patched" ] || "$here/patched.sh" "$out/fencegate-patched" >/dev/null
    FG=$out/fencegate-patched "$here/coldstart.sh" "$out/cold-$n-patched" "$n" --cold-start --duration "${d}s"
    grep '^handover yardstick' "$out/cold-$n-patched/out.txt"
  fi
done
