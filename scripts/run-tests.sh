#!/usr/bin/env bash
# Runs every test: the unit and CLI tests of the normal build, the same unit tests under ASan+UBSan,
# a bounded libFuzzer run of the safetensors header parser, and the Python tests (references: tokenizers,
# jinja2, the openai SDK). Expects scripts/setup-deps.sh and `make build` to have run (make test does both).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
ASAN_BUILD=${ASAN_BUILD:-build-asan}
JOBS=${JOBS:-$(nproc)}
export GRIDQ_SOURCE_DIR=$PWD

echo "== $(date +%T) unit + CLI tests ($BUILD)"
ctest --test-dir "$BUILD" --output-on-failure -j "$JOBS" --timeout 900

if [ -x "$BUILD/tests/test_cuda" ]; then
  # The CUDA tests' binary (a build with CUDA): without a GPU its GPU cases skip and its host-only cases run
  # (synthetic specs, split plans, the bench's byte model); on the GPU machine bench/gpu_engine.sh runs it all.
  echo "== $(date +%T) CUDA test binary, host-only cases ($BUILD/tests/test_cuda)"
  "$BUILD/tests/test_cuda" --gtest_brief=1
fi

echo "== $(date +%T) sanitizer build (ASan+UBSan) of the unit tests"
# Only the unit-test binaries (what ctest -L unit runs), with line tables (-g1) rather than full debug info:
# ASan reports keep file:line, and the build is the longest step of a cold CI run.
cmake -S . -B "$ASAN_BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DGRIDQ_SANITIZE=ON -DGRIDQ_CUDA=OFF -DGRIDQ_WERROR=ON \
  -DCMAKE_CXX_FLAGS="-O1" -DCMAKE_CXX_FLAGS_DEBUG="-g1" >/dev/null
cmake --build "$ASAN_BUILD" -j "$JOBS" --target unit_tests
ASAN_OPTIONS=detect_leaks=1 ctest --test-dir "$ASAN_BUILD" --output-on-failure -j "$JOBS" -L unit --timeout 1800

if [ -f tests/fuzz/CMakeLists.txt ]; then
  echo "== $(date +%T) libFuzzer: safetensors header parser (bounded)"
  cmake -S . -B build-fuzz -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DGRIDQ_FUZZ=ON \
    -DGRIDQ_TESTS=OFF -DGRIDQ_CUDA=OFF >/dev/null
  cmake --build build-fuzz -j "$JOBS" --target fuzz_safetensors_header
  mkdir -p build-fuzz/corpus
  build-fuzz/tests/fuzz/fuzz_safetensors_header -max_total_time="${FUZZ_SECONDS:-60}" -rss_limit_mb=2048 \
    build-fuzz/corpus tests/fuzz/seeds
fi

if [ -d tests/python ] && ls tests/python/test_*.py >/dev/null 2>&1; then
  echo "== $(date +%T) Python tests"
  GRIDQ_BIN="$PWD/$BUILD/gridq" .venv/bin/python -m pytest -q tests/python
fi
