#!/usr/bin/env bash
# The next device session's calls, kept as a script so that a session spends its first minutes on the GPU
# instead of on writing one (session 46). Run from the repo root on the device machine, one part a device
# call (each fits the 600 s limit; part 2 needs part 1's warm machine, which is handed back after its idle
# time: call it as soon as part 1 returns). Here, before the calls:
#
#   rm -rf .gpupack/var-*; bash bench/make_variants.sh $(bash bench/pending/next_call.sh --variants)
#   git rev-parse --short=12 HEAD > .commit; bash bench/device_tree.sh shrink
#   run: bash bench/pending/next_call.sh 1   (carry .gpupack/gpupack.tar.xz, .commit and every .gpupack/var-*)
#   run: bash bench/pending/next_call.sh 2   (the same carry)
#   python3 bench/tools/ab_summary.py /work/.device/N/*.tar.xz --by-side; bash bench/device_tree.sh restore
#
# Part 1: build, main's sampler check, the variants built and run through their .tests. Part 2: greedy
# batch 1 and 64 at 1k twice, batch 1 at 32k, the sampled rows (main must keep de83baec… / 65b015789…):
# temperature + top-p, temperature alone, temperature + top-p + top-k. Part 3: l2-hints, built alone and
# timed under masks 6, -1 and 4 (session 47: its tests failed with an illegal instruction; find which
# hinted instruction the device refuses before spending a call on it). Part 4 (an H200): issue 11's 64-stream
# serving row and the default's threshold (carry .gpupack/pysite.tar.xz and .gpupack/qwen.tiktoken.xz too).
# Part q: the short form of 1 + 2 in one call (NEXT_NV variants, one greedy round, main's sampled check).
set -uo pipefail
cd "$(dirname "$0")/../.."
P=bench/pending
# In order of what they may gain at batch 1 (bench/pending/README.md).
patches="$P/sample-lean-passes.patch"
if [ "${1:-}" = "--variants" ]; then
  echo "$patches"
  exit 0
fi
S=bench/gpu_engine_step.sh
B="--synthetic laguna-s-2.1"
# The variant folders make_variants.sh made of the list, in its order (a call cut off at its limit keeps
# the first ones): var-A+B for A.patch+B.patch.
vars=""
for p in $patches; do
  vars+=" .gpupack/var-$(echo "$p" | tr '+' '\n' | xargs -n1 basename | sed 's/\.patch$//' | paste -sd+)"
done
if [ "${1:-}" = 2 ]; then
  # A machine handed back after its idle time (status: idle_release_s) starts bare: run part 1 again.
  [ -x /tmp/var_1/gridq ] || { echo "next_call: no /tmp/var_1/gridq here (a fresh machine): run part 1 first" >&2; exit 3; }
fi
case "${1:-}" in
  1)
    bash $S a 570 GRIDQ_STEPS="build tests variants" \
      GRIDQ_FILTER='CudaSampler.*:BenchDecode.*:CudaInvariance.L2PrefetchMasksKeepTheBits' \
      GRIDQ_KERNEL_FILTER=none GRIDQ_VARIANTS="$vars"
    ;;
  q)
    # The short form when little device time is left: the first three variants, one greedy round and the
    # sampled check of main.
    # NEXT_NV: how many of the list (default 3); NEXT_SAMPLED=0 skips the sampled round.
    vars=$(echo $vars | cut -d' ' -f1-"${NEXT_NV:-3}")
    vars=${NEXT_VARS:-$vars}  # or an explicit list of .gpupack/var-* folders
    bash $S a 420 GRIDQ_STEPS="build tests variants" GRIDQ_FILTER='CudaSampler.*:BenchDecode.*' \
      GRIDQ_KERNEL_FILTER=none GRIDQ_VARIANTS="$vars"
    bash $S b 90 GRIDQ_STEPS=benchab GRIDQ_AB_REPS=1 GRIDQ_BENCH="$B --batches 1,64 --contexts 1024"
    [ "${NEXT_SAMPLED:-1}" = 0 ] || bash $S c 60 GRIDQ_STEPS=benchab GRIDQ_AB_REPS=1 \
      GRIDQ_BENCH="$B --batches 1,64 --contexts 1024 --steps 8 --warmup 2 --temperature 0.7 --top-p 0.95"
    ;;
  2)
    bash $S b 150 GRIDQ_STEPS=benchab GRIDQ_AB_REPS=2 GRIDQ_BENCH="$B --batches 1,64 --contexts 1024"
    bash $S e 100 GRIDQ_STEPS=benchab GRIDQ_AB_REPS=1 GRIDQ_BENCH="$B --batches 1 --contexts 32768 --steps 16"
    bash $S c 80 GRIDQ_STEPS=benchab GRIDQ_AB_REPS=1 \
      GRIDQ_BENCH="$B --batches 1,64 --contexts 1024 --steps 8 --warmup 2 --temperature 0.7 --top-p 0.95"
    bash $S d 80 GRIDQ_STEPS=benchab GRIDQ_AB_REPS=1 \
      GRIDQ_BENCH="$B --batches 1,64 --contexts 1024 --steps 8 --warmup 2 --temperature 0.7"
    bash $S k 80 GRIDQ_STEPS=benchab GRIDQ_AB_REPS=1 \
      GRIDQ_BENCH="$B --batches 1,64 --contexts 1024 --steps 8 --warmup 2 --temperature 0.7 --top-p 0.95 --top-k 50"
    ;;
  3)
    # Which hinted instruction the device refuses (session 47: the variant's tests failed with an illegal
    # instruction): each case in a process of its own, ≈ 10 s. Then the variant, if the probe says it can run.
    # (make_variants.sh bench/pending/l2-hints.patch first: its folder is the only one carried.)
    mkdir -p "${OUT:-/tmp/out}"
    nvcc -std=c++17 -gencode=arch=compute_90a,code=sm_90a -o /tmp/l2_hint_probe bench/tools/l2_hint_probe.cu &&
      /tmp/l2_hint_probe 2>&1 | tee "${OUT:-/tmp/out}/l2_hint_probe.txt"
    bash $S h 330 GRIDQ_STEPS="build variants" GRIDQ_VARIANTS=".gpupack/var-l2-hints"
    bash $S g 100 GRIDQ_STEPS=benchab GRIDQ_AB_REPS=1 GRIDQ_BENCH="$B --batches 1,64 --contexts 1024 --l2-ahead 6"
    bash $S i 100 GRIDQ_STEPS=benchab GRIDQ_AB_REPS=1 GRIDQ_BENCH="$B --batches 1,64 --contexts 1024"
    bash $S j 100 GRIDQ_STEPS=benchab GRIDQ_AB_REPS=1 GRIDQ_BENCH="$B --batches 1,64 --contexts 1024 --l2-ahead 4"
    ;;
  4)
    nvidia-smi --query-gpu=name --format=csv,noheader
    bash $S s 460 GRIDQ_STEPS="build synth" GRIDQ_LOADGEN="--workload random --concurrency 64 --num-prompts 128 \
--prompt-tokens 1024 --output-tokens 256 --seed 11"
    bash $S t 100 GRIDQ_STEPS=benchx GRIDQ_BENCH="--synthetic laguna-s-2.1 --batches 1,4,16,32,64 --contexts 1024" \
      GRIDQ_BENCHX="--l2-ahead 0|--l2-ahead -1"
    ;;
  *)
    sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
