#!/usr/bin/env bash
# Issue 15 items 3 and 4 on the bundled model: what the residual-stream rotation (`quantize --rotate hadamard`)
# and the W4A16 activation contract (`eval --activation-contract w4a16`) buy at 2.28125 bits per routed weight.
# Routed experts NVFP4_CB_K16 v2 with CB-GPTQ, everything else BF16 (the issue's weights-only setting), the
# same 65,536 calibration tokens of data/code-calib.txt for both artifacts; ALL-KL against the BF16 teacher on
# the first $TOKENS tokens of data/code-eval.txt (one teacher dump, so every row has the same teacher_sha256).
# Rows: {plain, rotated} × {w4a4 (the artifact's contract), w4a16}, on the CPU engine, and on CUDA when
# DEVICES includes cuda; plus the rotated BF16 model itself (the equivalence check, should be ~0).
#
#   GRIDQ    gridq binary (default build/gridq)
#   WORK     scratch directory (default /tmp/gridq-rot-bench)
#   TOKENS   eval tokens (default 32768)
#   THREADS  quantize threads per artifact (default: half the cores; the two quantize runs go in parallel)
#   DEVICES  eval devices, space separated (default "cpu")
#   OUT      where results.jsonl and bench_log.txt go (default $WORK; per-run logs stay in $WORK)
#
#   bash bench/rotation_w4a16.sh                         # CPU only
#   DEVICES="cpu cuda" bash bench/rotation_w4a16.sh      # also the CUDA engine
set -euo pipefail
cd "$(dirname "$0")/.."
G=${GRIDQ:-build/gridq}
WORK=${WORK:-/tmp/gridq-rot-bench}
OUT=${OUT:-$WORK}
TOKENS=${TOKENS:-32768}
NPROC=$(nproc)
THREADS=${THREADS:-$(((NPROC + 1) / 2))}
DEVICES=${DEVICES:-cpu}
SRC=models/laguna-tiny-code
mkdir -p "$WORK" "$OUT"
RES="$OUT/results.jsonl"
: > "$RES"
log() { echo "== $(date +%T) $*" | tee -a "$OUT/bench_log.txt"; }

# Routed experts K16 v2 CB-GPTQ (laguna.json's encoder settings), everything else BF16.
RECIPE="$WORK/experts-k16-bf16.json"
cat > "$RECIPE" <<'EOF'
{"recipe": "bench/experts-k16-bf16", "version": 1, "model_type": "laguna",
 "calibration": {"tokens": 65536, "seq_len": 512, "holdout_every": 16}, "router_weighted_hessian": false,
 "rules": [
  {"match": "model\\.layers\\.\\d+\\.mlp\\.experts\\.\\d+\\.(gate|up|down)_proj\\.weight",
   "format": "NVFP4_CB_K16", "scale_coding": "two_tier", "codebook": "lattice", "encoder": "cb_gptq"},
  {"match": ".*", "format": "BF16"}],
 "encoders": {"cb_gptq": {"damp": 0.1, "block": 256, "step": "sub", "act_order": false, "scales": "lazy",
                          "holdout_gate": true}, "two_tier": {"tier": "max", "pilot_rows": 256, "refits": 2}}}
EOF

Q="--recipe $RECIPE --calib data/code-calib.txt --calib-tokens 65536 --seq-len 512 --threads $THREADS --quiet --overwrite --no-resume --json"
log "quantize plain and rotated ($THREADS threads each, in parallel)"
t0=$(date +%s)
$G quantize $SRC "$WORK/k16" $Q > "$WORK/quant_plain.json" 2> "$WORK/quant_plain.err" &
p1=$!
$G quantize $SRC "$WORK/k16rot" $Q --rotate hadamard > "$WORK/quant_rot.json" 2> "$WORK/quant_rot.err" &
p2=$!
wait $p1 || { tail -5 "$WORK/quant_plain.err"; exit 1; }
wait $p2 || { tail -5 "$WORK/quant_rot.err"; exit 1; }
log "quantize: $(($(date +%s) - t0)) s"

# The rotated BF16 model on its own: a run stopped after layer 0 keeps OUT.rotated-src (the test hook
# --stop-after-layer leaves the partial state in place), which is an ordinary BF16 checkpoint.
$G quantize $SRC "$WORK/rotsrc" $Q --rotate hadamard --stop-after-layer 0 > /dev/null 2>&1 || true

E="--text data/code-eval.txt --tokens $TOKENS --teacher-dump $WORK/teacher.st --json"
row() {  # name model device [contract]
  local name=$1 model=$2 dev=$3 c=${4:-}
  local args=""
  [ -n "$c" ] && args="--activation-contract $c"
  local t=$(date +%s)
  local errf="$WORK/eval_${name}_${dev}_${c:-art}.err"
  if j=$($G eval "$model" --teacher $SRC $E --device "$dev" $args 2> "$errf"); then
    echo "{\"row\": \"$name\", \"device\": \"$dev\", \"contract\": \"${c:-artifact}\", \"result\": $j}" >> "$RES"
    log "$name $dev ${c:-artifact}: $(echo "$j" | python3 -c 'import json,sys; d=json.load(sys.stdin); print("all_kl %.5f confident_kl %.5f top1 %.4f" % (d["all_kl"], d["confident_kl"], d["top1_agree"]))') ($(($(date +%s) - t)) s)"
  else
    log "$name $dev ${c:-artifact}: FAILED: $(tail -2 "$errf")"
  fi
}
# The first row writes the teacher dump with the CPU engine's teacher; every other row reuses it.
row plain "$WORK/k16" cpu w4a4
grep -h "activation contract" "$WORK"/eval_plain_cpu_w4a4.err | head -1 | tee -a "$OUT/bench_log.txt" || true
for dev in $DEVICES; do
  for c in w4a4 w4a16; do
    [ "$dev/$c" = cpu/w4a4 ] || row plain "$WORK/k16" "$dev" "$c"
    row rotated "$WORK/k16rot" "$dev" "$c"
  done
done
row plain_default "$WORK/k16" cpu  # the artifact's own contract (must equal w4a4)
if [ -d "$WORK/rotsrc.rotated-src" ]; then row rotated_bf16 "$WORK/rotsrc.rotated-src" cpu; fi
log "done"
