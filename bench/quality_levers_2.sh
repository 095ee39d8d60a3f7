#!/usr/bin/env bash
# Issue 15 item 2 (better codes at a fixed format) on the bundled model: one row per CB-GPTQ lever, each an
# artifact with routed experts NVFP4_CB_K16 v2 (2.28125 bpw) and everything else BF16 (the weights-only
# setting of bench/rotation_w4a16.sh, whose recipe this writes with the row's encoder settings), scored with
# `gridq eval --teacher` on
#   - data/code-eval.txt (first EVAL_TOKENS tokens) under each contract of CONTRACTS, one teacher dump;
#   - a held-out calibration split: the last 200,000 bytes of data/code-calib.txt (from a line start), which
#     no calibration run here reads (CALIB_TOKENS <= 393,216 tokens covers the first ~1.25 MB of the file's
#     1.5 MB), first HOLD_TOKENS tokens, w4a16, its own teacher dump. A lever becomes a default only if it
#     pays on both texts (never tune on the eval text alone).
#
# Usage: bench/quality_levers_2.sh [GRIDQ_BIN] [RESULT_STEM]
#   env: CALIB_TOKENS=65536 EVAL_TOKENS=32768 HOLD_TOKENS=16384 (0: skip) CONTRACTS="w4a16 w4a4" THREADS=0
#        WORK=/tmp/... ONLY="name ..." (a subset)
#        ROWS / EXTRA_ROWS: one row per line, "name|cb_gptq JSON overrides|more quantize args", e.g.
#          "refine-2s|{\"refine_passes\": 2, \"refine_scales\": true}|"
#          "damp-0.03|{\"damp\": 0.03}|"      "calib-128k||--calib-tokens 131072"
#          "learned||--codebooks learned"
# Writes RESULT_STEM.json (every quantize summary and eval) and RESULT_STEM.md (the table).
set -euo pipefail
cd "$(dirname "$0")/.."
GRIDQ="${1:-build/gridq}"
STEM="${2:-bench/results/$(date -u +%Y-%m-%d)-quality-levers-2}"
CALIB_TOKENS="${CALIB_TOKENS:-65536}"
[ "$CALIB_TOKENS" -le 393216 ] || { echo "CALIB_TOKENS $CALIB_TOKENS would read into the held-out bytes (at most 393216)" >&2; exit 2; }
EVAL_TOKENS="${EVAL_TOKENS:-32768}"
HOLD_TOKENS="${HOLD_TOKENS:-16384}"
CONTRACTS="${CONTRACTS:-w4a16 w4a4}"
THREADS="${THREADS:-0}"
MODEL=models/laguna-tiny-code
WORK="${WORK:-$(mktemp -d "${TMPDIR:-/tmp}/gridq_levers2.XXXXXX")}"
mkdir -p "$WORK" "$(dirname "$STEM")"
HOLD="$WORK/calib-heldout.txt"
python3 - "$HOLD" <<'EOF'
import sys
b = open("data/code-calib.txt", "rb").read()
tail = b[len(b) - 200000:]
open(sys.argv[1], "wb").write(tail[tail.index(b"\n") + 1:])
EOF

DEFAULT_ROWS='baseline|{}|
refine-1|{"refine_passes": 1}|
refine-3|{"refine_passes": 3}|
refine-3s|{"refine_passes": 3, "refine_scales": true}|
damp-0.01|{"damp": 0.01}|
damp-0.03|{"damp": 0.03}|
damp-0.3|{"damp": 0.3}|'
ROWS="${ROWS:-$DEFAULT_ROWS}"
[ -n "${EXTRA_ROWS:-}" ] && ROWS="$ROWS"$'\n'"$EXTRA_ROWS"

recipe() {  # name overrides -> recipe path (laguna.json's encoder settings + the overrides)
  python3 - "$WORK/$1.recipe.json" "$2" <<'EOF'
import json, sys
g = {"damp": 0.1, "block": 256, "step": "sub", "act_order": False, "scales": "lazy", "holdout_gate": True}
g.update(json.loads(sys.argv[2] or "{}"))
r = {"recipe": "bench/experts-k16-bf16", "version": 1, "model_type": "laguna",
     "calibration": {"tokens": 65536, "seq_len": 512, "holdout_every": 16}, "router_weighted_hessian": False,
     "rules": [{"match": "model\\.layers\\.\\d+\\.mlp\\.experts\\.\\d+\\.(gate|up|down)_proj\\.weight",
                "format": "NVFP4_CB_K16", "scale_coding": "two_tier", "codebook": "lattice", "encoder": "cb_gptq"},
               {"match": ".*", "format": "BF16"}],
     "encoders": {"cb_gptq": g, "two_tier": {"tier": "max", "pilot_rows": 256, "refits": 2}}}
json.dump(r, open(sys.argv[1], "w"))
EOF
  echo "$WORK/$1.recipe.json"
}

evalrow() {  # artifact text tokens dump contract out
  [ -s "$6" ] && return 0
  local teacher=(--teacher "$MODEL")
  [ -f "$4" ] && teacher=()
  "$GRIDQ" eval "$1" "${teacher[@]}" --teacher-dump "$4" --text "$2" --tokens "$3" --threads "$THREADS" \
    --device cpu --activation-contract "$5" --json >"$6.tmp"
  mv "$6.tmp" "$6"
}

runs=()
while IFS='|' read -r name over qargs; do
  [ -z "$name" ] && continue
  if [ -n "${ONLY:-}" ] && [[ " $ONLY " != *" $name "* ]]; then continue; fi
  runs+=("$name")
  printf '%s\n%s\n' "$over" "$qargs" >"$WORK/$name.args"
  if [ ! -s "$WORK/$name.quantize.json" ]; then
    echo "== $(date -u +%T) $name: quantize $over $qargs" >&2
    rec=$(recipe "$name" "$over")
    start=$(date +%s)
    ct=(--calib-tokens "$CALIB_TOKENS")
    [[ " $qargs " == *" --calib-tokens "* ]] && ct=()  # the row's own amount ("more calibration")
    # shellcheck disable=SC2086
    "$GRIDQ" quantize "$MODEL" "$WORK/$name" --recipe "$rec" --calib data/code-calib.txt "${ct[@]}" \
      --seq-len 512 --threads "$THREADS" $qargs --overwrite --no-resume --quiet \
      --json >"$WORK/$name.quantize.json.tmp"
    mv "$WORK/$name.quantize.json.tmp" "$WORK/$name.quantize.json"
    echo "$(($(date +%s) - start))" >"$WORK/$name.quantize.seconds"
  fi
  for c in $CONTRACTS; do
    echo "== $(date -u +%T) $name: eval $c" >&2
    evalrow "$WORK/$name" data/code-eval.txt "$EVAL_TOKENS" "$WORK/teacher.dump" "$c" "$WORK/$name.eval.$c.json"
  done
  if [ "$HOLD_TOKENS" -gt 0 ]; then
    echo "== $(date -u +%T) $name: eval held-out calibration w4a16" >&2
    evalrow "$WORK/$name" "$HOLD" "$HOLD_TOKENS" "$WORK/teacher-hold.dump" w4a16 "$WORK/$name.hold.w4a16.json"
  fi
done <<<"$ROWS"

python3 - "$STEM" "$WORK" "$CALIB_TOKENS" "$EVAL_TOKENS" "$HOLD_TOKENS" "$CONTRACTS" "${runs[@]}" <<'PYEOF'
import datetime, json, os, platform, subprocess, sys
stem, work, calib, ev, hold, contracts, runs = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6].split(), sys.argv[7:]
git = lambda *a: subprocess.run(["git", *a], capture_output=True, text=True).stdout.strip()
commit = os.environ.get("COMMIT") or (git("rev-parse", "--short", "HEAD") + ("-dirty" if git("status", "--porcelain", "--untracked-files=no") else ""))
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.processor())
P = lambda *a: os.path.join(work, *a)
load = lambda p: json.load(open(p)) if os.path.exists(p) else None
rows = []
for n in runs:
    over, qargs = open(P(n + ".args")).read().split("\n")[:2]
    q = load(P(n + ".quantize.json"))
    prov = (load(P(n, "quant_config.json")) or {}).get("provenance", {})
    ref = [s["refine"] for s in prov.get("linear_stats", {}).values() if isinstance(s, dict) and "refine" in s]
    refine = {"tensors": len(ref), "kept": sum(1 for x in ref if x.get("kept")),
              "f_before": sum(x["f_before"] for x in ref), "f_after": sum(x["f_after"] for x in ref),
              "codes_changed": sum(x["codes_changed"] for x in ref),
              "scales_changed": sum(x["scales_changed"] for x in ref)} if ref else None
    gates = [s.get("gate") for s in prov.get("linear_stats", {}).values() if isinstance(s, dict)]
    rows.append({"run": n, "cb_gptq_overrides": over, "quantize_args": qargs,
                 "quantize_seconds": int(open(P(n + ".quantize.seconds")).read()), "quantize": q,
                 "eval": {c: load(P(f"{n}.eval.{c}.json")) for c in contracts},
                 "holdout_calib_w4a16": load(P(n + ".hold.w4a16.json")), "refine": refine,
                 "gate_kept_nn": sum(1 for g in gates if g == "kept_nn")})
doc = {"date": datetime.date.today().isoformat(), "commit": commit, "machine": f"{cpu}, {os.cpu_count()} cores",
       "model": "models/laguna-tiny-code", "calib": {"file": "data/code-calib.txt", "tokens": calib},
       "eval": {"file": "data/code-eval.txt", "tokens": ev}, "holdout_calib": {"file": "last 200,000 bytes of data/code-calib.txt", "tokens": hold},
       "runs": rows}
json.dump(doc, open(stem + ".json", "w"), indent=1)
base = rows[0]
def kl(r, c): e = r["eval"].get(c); return e["all_kl"] if e else None
def hk(r): e = r["holdout_calib_w4a16"]; return e["all_kl"] if e else None
with open(stem + ".md", "w") as md:
    md.write(f"# Quality levers 2 (issue 15 item 2) on the bundled model ({doc['date']})\n\n")
    md.write(f"- machine: {doc['machine']}; commit {commit}; `bench/quality_levers_2.sh`\n")
    md.write(f"- routed experts NVFP4_CB_K16 v2 (2.28125 bpw), everything else BF16; calibration: first {calib} tokens of "
             f"`data/code-calib.txt`; eval: first {ev} tokens of `data/code-eval.txt`; held-out calibration split: "
             f"first {hold} tokens of the last 200,000 bytes of `data/code-calib.txt` (w4a16)\n\n")
    hdr = " | ".join(f"ALL-KL {c} (ratio)" for c in contracts)
    md.write(f"| row | cb_gptq overrides / args | {hdr} | held-out calib ALL-KL w4a16 (ratio) | refine: f after/before, kept | quantize s |\n")
    md.write("|---|---|" + "---|" * len(contracts) + "---|---|---|\n")
    for r in rows:
        cells = []
        for c in contracts:
            a, b = kl(r, c), kl(base, c)
            cells.append(f"{a:.5f} ({a / b:.3f})" if a is not None and b else "—")
        a, b = hk(r), hk(base)
        h = f"{a:.5f} ({a / b:.3f})" if a is not None and b else "—"
        f = r["refine"]
        fr = f"{f['f_after'] / f['f_before']:.3f}, {f['kept']}/{f['tensors']}" if f and f["f_before"] > 0 else "—"
        md.write(f"| {r['run']} | `{(r['cb_gptq_overrides'] + ' ' + r['quantize_args']).strip()}` | {' | '.join(cells)} | {h} | {fr} | {r['quantize_seconds']} |\n")
PYEOF
echo "wrote $STEM.md" >&2
