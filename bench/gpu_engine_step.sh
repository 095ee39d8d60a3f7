#!/usr/bin/env bash
# One bench/gpu_engine.sh invocation inside a device call, returned as ONE file: $OUT/NAME.tar.xz (its files
# and its console log). The device tool returns at most 8 files from $OUT, so a call of several invocations
# (build + variants, then A/B rounds with other flags) packs each as it ends: a call cut off at its limit
# still returns the invocations that finished. The commit recorded is .commit's (write it here with
# `git rev-parse --short=12 HEAD > .commit` and carry it), unless GRIDQ_COMMIT is set.
#
#   bash bench/gpu_engine_step.sh NAME SECONDS [VAR=value ...]
#
# Example (one device call; variants from bench/make_variants.sh, then two A/Bs of them):
#   bash bench/gpu_engine_step.sh x 300 GRIDQ_STEPS="build variants" GRIDQ_VARIANTS=".gpupack/var-a .gpupack/var-b"
#   bash bench/gpu_engine_step.sh w 60 GRIDQ_STEPS=benchab GRIDQ_AB_REPS=2 \
#     GRIDQ_BENCH="--synthetic laguna-s-2.1 --batches 1,64 --contexts 1024"
#   bash bench/gpu_engine_step.sh v 40 GRIDQ_STEPS=benchab GRIDQ_AB_REPS=1 \
#     GRIDQ_BENCH="--synthetic laguna-s-2.1 --batches 1 --contexts 32768 --steps 16"
# Here: python3 bench/tools/ab_summary.py /work/.device/N/*.tar.xz prints the rows and hashes.
set -uo pipefail
cd "$(dirname "$0")/.."
if [ $# -lt 2 ] || [ "$1" = "--help" ]; then
  sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'
  exit 0
fi
name=$1 secs=$2
shift 2
OUT=${OUT:-/tmp/out}
commit=${GRIDQ_COMMIT:-$(cat .commit 2> /dev/null || echo unknown)}
mkdir -p "$OUT"
env GRIDQ_NO_PACK=1 OUT="$OUT/$name" GRIDQ_COMMIT="$commit" "$@" timeout "$secs" bash bench/gpu_engine.sh \
  > "$OUT/$name.log" 2>&1
rc=$?
echo "== $name: exit $rc" | tee -a "$OUT/$name.log"
tail -5 "$OUT/$name.log"
(cd "$OUT" && tar cJf "$name.tar.xz" "$name" "$name.log" && rm -rf "$name" "$name.log")
exit $rc
