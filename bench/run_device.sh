#!/usr/bin/env bash
# Device-side driver for the CUDA kernel work (run through the device tool from the repo root):
# runs the CUDA tests and `gridq bench kernels` with binaries built on the workstation and carried in
# build-h6dev/ (bin/ + the non-system shared libraries they need in lib/), or, when GRIDQ_DEV_BUILD=1,
# builds test_cuda and gridq there first. Results and logs go to $OUT.
set -o pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw --format=csv \
  | tee "$OUT/gpu.txt"
nvcc --version | tail -2 | tee -a "$OUT/gpu.txt"
B=build-h6dev/bin
if [ "${GRIDQ_DEV_BUILD:-0}" = 1 ]; then
  cmake -S . -B build-dev -G Ninja -DCMAKE_BUILD_TYPE=Release -DGRIDQ_CUDA=ON -DGRIDQ_TESTS=ON -DGRIDQ_WERROR=OFF -DGRIDQ_CUDA_ARCHS=90a \
    -DCMAKE_CUDA_ARCHITECTURES=90a -DCMAKE_CUDA20_STANDARD_COMPILE_OPTION=-std=c++20 \
    -DCMAKE_CUDA20_EXTENSION_COMPILE_OPTION=-std=c++20 > "$OUT/build.txt" 2>&1 &&
    ninja -C build-dev -j16 test_cuda gridq >> "$OUT/build.txt" 2>&1 || { tail -40 "$OUT/build.txt"; exit 1; }
  B=build-dev
  cp build-dev/tests/test_cuda build-dev/gridq "$B/" 2>/dev/null
fi
export LD_LIBRARY_PATH="$PWD/build-h6dev/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
TEST=$B/test_cuda; [ -x "$TEST" ] || TEST=$B/tests/test_cuda
ldd "$TEST" | grep "not found" && exit 1
"$TEST" ${GRIDQ_TEST_ARGS:-} 2>&1 | tee "$OUT/tests.txt" | grep -E "^\[( +OK|  FAILED|  PASSED|  SKIPPED)|Failure|error|SEED|expected|Which is" | head -150
echo "test_cuda exit: ${PIPESTATUS[0]}"
if [ "${GRIDQ_SKIP_BENCH:-0}" != 1 ]; then
  "$B/gridq" bench kernels --out "$OUT/bench.json" ${GRIDQ_BENCH_ARGS:-} > "$OUT/bench.txt" 2>&1
  echo "bench exit: $?"
  grep -v " us " "$OUT/bench.txt"
fi
# Optional extra bench passes (tuning), each "ARGS" in GRIDQ_BENCH_EXTRA separated by ';'.
if [ -n "${GRIDQ_BENCH_EXTRA:-}" ]; then
  i=0
  IFS=';' read -ra EXTRA <<< "$GRIDQ_BENCH_EXTRA"
  for args in "${EXTRA[@]}"; do
    i=$((i + 1))
    echo "== extra pass $i: $args"
    eval "\"$B/gridq\" bench kernels --out \"$OUT/bench_extra$i.json\" $args" 2>/dev/null | tail -n +3
  done
fi
