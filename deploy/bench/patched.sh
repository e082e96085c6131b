#!/usr/bin/env bash
# usage: deploy/bench/patched.sh [OUT]
# Builds fencegate (default OUT bin/fencegate-patched) against
# confluent-kafka-go with deploy/bench/confluent-kafka-go-poller.patch
# applied: the producer's poller blocks for its next event instead of
# re-entering a 100 ms cgo poll, and Close wakes it with
# rd_kafka_queue_yield. The change one would propose upstream; measured in
# BENCHMARKS-history.md ("Handovers and cold starts"). go.mod is not changed:
# the patched copy lives under bin/ and a copied go.mod (-modfile) points
# at it.
set -euo pipefail
out=${1:-bin/fencegate-patched}
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
mod=github.com/confluentinc/confluent-kafka-go/v2
src=$(go list -m -f '{{.Dir}}' "$mod")
work=bin/patched
rm -rf "$work"
mkdir -p "$work"
cp -r "$src" "$work/confluent-kafka-go"
chmod -R u+w "$work/confluent-kafka-go"
patch -d "$work/confluent-kafka-go" -p1 <deploy/bench/confluent-kafka-go-poller.patch
cp go.mod "$work/go.mod"
cp go.sum "$work/go.sum"
echo "replace $mod => $root/$work/confluent-kafka-go" >>"$work/go.mod"
go build -modfile="$work/go.mod" -o "$out" ./cmd/fencegate
echo "$out"
