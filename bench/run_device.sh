#!/usr/bin/env bash
# Device-side driver for the CUDA kernel work (run through the device tool from the repo root, carrying
# build-pcre/: the device image has no PCRE2, so a copy of libpcre2-8 (lib/, include/, a pkg-config file whose
# prefix is the placeholder PREFIX) travels with the tree). Builds test_cuda with the lean device build
# (bench/device/CMakeLists.txt: core, io, gridbook, runtime/cuda only — ~15 s on the device's 16 cores), runs the
# CUDA tests and `bench kernels` (through test_cuda, tests/cuda/test_bench.cpp), optionally Nsight Compute.
# Every step writes under $OUT as it goes, so a run stopped at its time limit still returns what it did.
#
#   GRIDQ_COMMIT       commit recorded in the bench JSON (pass `git rev-parse HEAD` of the sent tree)
#   GRIDQ_TEST_ARGS    extra arguments for the tests (e.g. --gtest_filter=...); GRIDQ_SKIP_TESTS=1 skips them
#   GRIDQ_BENCH_PASSES bench passes separated by ';', each "NAME:RING:FILTER" (RING: '' library default, 1 copy
#                      engine, 0 cp.async; FILTER '' = every row); env GRIDQ_BENCH_DIAG=1 adds the diagnostic rows
#                      to the first pass. Default: one pass "bench::" (all rows).
#   GRIDQ_NCU          Nsight Compute passes, each "KERNEL_REGEX@SKIP@BENCH_FILTER" separated by ';' (2 kernels
#                      each, after SKIP launches of matching kernels)
#
# The run recorded in bench/results/2026-11-30-h200-kernels-v2.* (device tool, carry ["build-pcre"]):
#   GRIDQ_COMMIT="$(git rev-parse HEAD)+uncommitted" GRIDQ_BENCH_DIAG=1 GRIDQ_TEST_TIMEOUT=60 \
#   GRIDQ_CHAIN_TEST_TIMEOUT=45 GRIDQ_BENCH_TIMEOUT=90 GRIDQ_BENCH_PASSES="bench:1:;bench_cp:0:" \
#   GRIDQ_NCU="gemv_kernel@20@cb K16 v2 3072->9216;chain_kernel@4@cb K16 v2 3072->9216" bash bench/run_device.sh
set -o pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw \
    --format=csv
  nvcc --version | tail -2
} 2>&1 | tee "$OUT/gpu.txt"

PCRE="$PWD/build-pcre"
mkdir -p /tmp/pcre-pc
sed "s#^prefix=.*#prefix=$PCRE#" "$PCRE/lib/pkgconfig/libpcre2-8.pc" > /tmp/pcre-pc/libpcre2-8.pc
export PKG_CONFIG_PATH="/tmp/pcre-pc${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
export LD_LIBRARY_PATH="$PCRE/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

t0=$(date +%s)
TEST=build-dev/test_cuda
if ! { cmake -S bench/device -B build-dev -G Ninja -DCMAKE_BUILD_TYPE=Release \
         -DGRIDQ_GIT_COMMIT="${GRIDQ_COMMIT:-unknown}" > "$OUT/build.txt" 2>&1 &&
       ninja -C build-dev -j16 test_cuda >> "$OUT/build.txt" 2>&1; }; then
  tail -25 "$OUT/build.txt"
  echo "lean build failed; trying the full build of test_cuda"
  cmake -S . -B build-full -G Ninja -DCMAKE_BUILD_TYPE=Release -DGRIDQ_CUDA=ON -DGRIDQ_TESTS=ON -DGRIDQ_WERROR=OFF \
    -DGRIDQ_CUDA_ARCHS=90a -DCMAKE_CUDA_ARCHITECTURES=90a > "$OUT/build_full.txt" 2>&1 &&
    ninja -C build-full -j16 test_cuda >> "$OUT/build_full.txt" 2>&1 || { tail -40 "$OUT/build_full.txt"; exit 1; }
  TEST=build-full/tests/test_cuda
fi
echo "build: $(($(date +%s) - t0)) s"
rm -f "$OUT/build.txt" "$OUT/build_full.txt"  # at most 8 files come back

# The single-kernel tests first, then the persistent-chain tests under a time limit: a chain that hung (a grid
# barrier that never opens) must not cost the rest of the run; the bench then runs without the chain rows.
run_tests() {  # name filter limit
  local t0 rc
  t0=$(date +%s)
  timeout "$3" "$TEST" --gtest_filter="$2" ${GRIDQ_TEST_ARGS:-} > "$OUT/$1.txt" 2>&1
  rc=$?
  grep -E "^\[( +OK|  FAILED|  PASSED|  SKIPPED)|Failure|SEED|expected|Which is|worst err" "$OUT/$1.txt" \
    | grep -v "worst err/limit = 0\.[0-8]" | head -80
  echo "$1 exit: $rc ($(($(date +%s) - t0)) s)"
  return $rc
}
if [ "${GRIDQ_SKIP_TESTS:-0}" != 1 ]; then
  run_tests tests "-CudaBench.*:CudaChain.*" "${GRIDQ_TEST_TIMEOUT:-150}"
  run_tests tests_chain "CudaChain.*" "${GRIDQ_CHAIN_TEST_TIMEOUT:-90}"
  [ $? = 124 ] && { echo "chain tests timed out: bench without the chain rows"; export GRIDQ_BENCH_NO_CHAIN=1; }
fi

i=0
IFS=';' read -ra PASSES <<< "${GRIDQ_BENCH_PASSES:-bench::}"
for pass in "${PASSES[@]}"; do
  i=$((i + 1))
  name=${pass%%:*}
  rest=${pass#*:}
  ring=${rest%%:*}
  filt=${rest#*:}
  diag=0
  [ $i = 1 ] && diag=${GRIDQ_BENCH_DIAG:-0}
  echo "== bench pass $i ($name): ring '$ring' filter '$filt' diag $diag"
  t0=$(date +%s)
  if [ -n "$ring" ]; then export GRIDQ_BENCH_CHAIN_BULK=$ring; else unset GRIDQ_BENCH_CHAIN_BULK; fi
  GRIDQ_BENCH_OUT="$OUT/$name.json" GRIDQ_BENCH_FILTER="$filt" GRIDQ_BENCH_DIAG=$diag \
    timeout "${GRIDQ_BENCH_TIMEOUT:-400}" "$TEST" --gtest_filter=CudaBench.* > "$OUT/$name.txt" 2>&1
  echo "bench exit: $? ($(($(date +%s) - t0)) s)"
  grep -v "^\[\|^Note\|^$" "$OUT/$name.txt"
done

if [ -n "${GRIDQ_NCU:-}" ]; then
  i=0
  IFS=';' read -ra NPASSES <<< "$GRIDQ_NCU"
  for pass in "${NPASSES[@]}"; do
    i=$((i + 1))
    kern=${pass%%@*}
    rest=${pass#*@}
    skip=${rest%%@*}
    filt=${rest#*@}
    echo "== ncu pass $i: kernels /$kern/ after $skip launches, in rows '$filt'"
    env -u GRIDQ_BENCH_CHAIN_BULK GRIDQ_BENCH_DIAG=0 GRIDQ_BENCH_OUT=/tmp/ncu_bench.json GRIDQ_BENCH_FILTER="$filt" \
      timeout "${GRIDQ_NCU_TIMEOUT:-60}" ncu --clock-control none -k "regex:$kern" --launch-skip "$skip" --launch-count 2 \
      --section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats \
      --section SchedulerStats --section MemoryWorkloadAnalysis \
      "$TEST" --gtest_filter=CudaBench.* > /tmp/ncu$i.txt 2>&1
    echo "ncu exit: $?"
    { echo "== ncu pass $i: $pass"; cat /tmp/ncu$i.txt; } >> "$OUT/ncu.txt"
    grep -E "^  [a-z_]+.*\(|Duration|DRAM Throughput|Memory Throughput|Compute \(SM\)|Registers Per|Achieved Occupancy|Issued Ipc|No Eligible|Warp Cycles Per Issued|Block Limit|Grid Size|L2 Hit|Mem Busy|Max Bandwidth" \
      /tmp/ncu$i.txt | head -80
  done
fi
