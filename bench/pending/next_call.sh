#!/usr/bin/env bash
# The next device session's calls, written by a session that was lent no GPU (session 46), so that a new
# session can spend its first minutes on the GPU instead of on a script. Run from the repo root on the device
# machine, one part a device call (each part fits the 600 s limit; parts 2-3 need part 1's warm machine: the
# variants' binaries are in /tmp/var_N there). Here, before the call:
#
#   rm -rf .gpupack/var-*; bash bench/make_variants.sh $(bash bench/pending/next_call.sh --variants)
#   git rev-parse --short=12 HEAD > .commit; bash bench/device_tree.sh shrink
#   run: bash bench/pending/next_call.sh 1   (carry .gpupack/gpupack.tar.xz, .commit and every .gpupack/var-*)
#   run: bash bench/pending/next_call.sh 2   (the same carry, right after part 1 returns; then part 3)
#   python3 bench/tools/ab_summary.py /work/.device/N/*.tar.xz --by-side; bash bench/device_tree.sh restore
#
# Part 1: build, main's own sampler check (the review commit c15c73b has not run on a GPU), every variant
# built and run through its .tests. Part 2: greedy batch 1 and 64 at 1k twice, batch 1 at 32k, and the
# --l2-ahead masks again on main at batch 1 (last measured in session 24, before most of today's kernels).
# Part 3: the sampled rows (main must keep de83baec… / 65b015789…), temperature alone, and every binary
# under --l2-ahead 6 (for l2-hints). Part 4: the 64-stream serving row through `gridq serve` (for an H200).
set -uo pipefail
cd "$(dirname "$0")/../.."
P=bench/pending
patches="$P/attn-split-by-kind.patch $P/attn-split-sliding-64.patch $P/sample-temperature-chunked.patch"
patches+=" $P/route-lean.patch $P/pairs-few.patch $P/route-lean.patch+$P/pairs-few.patch $P/l2-hints.patch"
if [ "${1:-}" = "--variants" ]; then
  echo "$patches"
  exit 0
fi
S=bench/gpu_engine_step.sh
B="--synthetic laguna-s-2.1"
if [ "${1:-}" = 2 ] || [ "${1:-}" = 3 ]; then  # (part 4 builds for itself)
  # A machine handed back after its idle time (status: idle_release_s) starts bare: run part 1 again.
  [ -x /tmp/var_1/gridq ] || { echo "next_call: no /tmp/var_1/gridq here (a fresh machine): run part 1 first" >&2; exit 3; }
fi
case "${1:-}" in
  1)
    vars=$(ls -d .gpupack/var-* | tr '\n' ' ')
    bash $S a 560 GRIDQ_STEPS="build tests variants" GRIDQ_FILTER='CudaSampler.*:BenchDecode.*' \
      GRIDQ_KERNEL_FILTER=none GRIDQ_VARIANTS="$vars"
    ;;
  2)
    bash $S b 200 GRIDQ_STEPS=benchab GRIDQ_AB_REPS=2 GRIDQ_BENCH="$B --batches 1,64 --contexts 1024"
    bash $S e 120 GRIDQ_STEPS=benchab GRIDQ_AB_REPS=1 GRIDQ_BENCH="$B --batches 1 --contexts 32768 --steps 16"
    bash $S f 100 GRIDQ_STEPS=benchx GRIDQ_BENCH="$B --batches 1 --contexts 1024" \
      GRIDQ_BENCHX="--l2-ahead 0|--l2-ahead 2|--l2-ahead 4|--l2-ahead 6|--l2-ahead 7"
    ;;
  3)
    bash $S c 120 GRIDQ_STEPS=benchab GRIDQ_AB_REPS=1 \
      GRIDQ_BENCH="$B --batches 1,64 --contexts 1024 --steps 8 --warmup 2 --temperature 0.7 --top-p 0.95"
    bash $S d 120 GRIDQ_STEPS=benchab GRIDQ_AB_REPS=1 \
      GRIDQ_BENCH="$B --batches 1,64 --contexts 1024 --steps 8 --warmup 2 --temperature 0.7"
    # l2-hints (evict-last prefetches, evict-first weight streams) is meant for the masks: time it under one.
    bash $S g 150 GRIDQ_STEPS=benchab GRIDQ_AB_REPS=1 GRIDQ_BENCH="$B --batches 1,64 --contexts 1024 --l2-ahead 6"
    ;;
  4)
    # Issue 11's serving row (its bar is stated for an H200: run this part when the machine is one; carry
    # .gpupack/pysite.tar.xz and .gpupack/qwen.tiktoken.xz too). Works on a bare machine (it builds).
    nvidia-smi --query-gpu=name --format=csv,noheader
    bash $S s 560 GRIDQ_STEPS="build synth" GRIDQ_LOADGEN="--workload random --concurrency 64 --num-prompts 128 \
--prompt-tokens 1024 --output-tokens 256 --seed 11"
    ;;
  *)
    sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
