#!/usr/bin/env bash
# Quality levers of issue 15 on the bundled model: today's gridq rows (CB-GPTQ K16, RTN K16, the proxy
# allocator at 2.28125 and 2.5625 bpw) and one row per lever (the measured allocator at three budgets, next to
# the uniform rung that fits each), all scored with `gridq eval --teacher` on data/code-eval.txt against one
# teacher dump (quantizer.md §8: compare only rows with one teacher_sha256).
#
# Usage: bench/quality_levers.sh [GRIDQ_BIN] [RESULT_STEM]
#   env: CALIB_TOKENS=65536 EVAL_TOKENS=32768 THREADS=0 DEVICE=cpu WORK=/tmp/... ONLY="name ..." (a subset)
#        EXTRA_ROWS: more rows, one per line, "name|quantize args|eval args" (the args are split on spaces),
#        BUDGET_FORMATS: the candidates of every budget row (default K12,K16,K20,K24)
#        COMMIT: the commit to record (where the tree has no .git)
#          e.g. EXTRA_ROWS=$'rot-k16|--recipe laguna --rotate hadamard|\nk16-w4a16|--recipe laguna|--activation-contract w4a16'
#        A row whose quantize args equal an earlier row's reuses that artifact (only the eval differs).
# Budget rows share one pricing pass: the candidates are priced once (a budget run stopped after its last
# layer) and each budget row finishes a copy of it by resuming, which gives the bytes a fresh run would
# (the staged candidates do not depend on the budget; docs/quantize.md "Resuming").
# Writes RESULT_STEM.json (every quantize summary and eval) and RESULT_STEM.md (the table), default
# bench/results/DATE-quality-levers.
set -euo pipefail
cd "$(dirname "$0")/.."
GRIDQ="${1:-build/gridq}"
STEM="${2:-bench/results/$(date -u +%Y-%m-%d)-quality-levers}"
CALIB_TOKENS="${CALIB_TOKENS:-65536}"
EVAL_TOKENS="${EVAL_TOKENS:-32768}"
THREADS="${THREADS:-0}"
DEVICE="${DEVICE:-cpu}"  # the eval backend (CPU: the reference forward)
MODEL=models/laguna-tiny-code
WORK="${WORK:-$(mktemp -d "${TMPDIR:-/tmp}/gridq_levers.XXXXXX")}"
mkdir -p "$WORK" "$(dirname "$STEM")"
DUMP="$WORK/teacher.dump"
LAST_LAYER=$(python3 -c "import json; print(json.load(open('$MODEL/config.json'))['num_hidden_layers'] - 1)")
BUDGET_FORMATS="${BUDGET_FORMATS:-NVFP4_CB_K12,NVFP4_CB_K16,NVFP4_CB_K20,NVFP4_CB_K24}"
export BUDGET_FORMATS
COMMON=(--calib data/code-calib.txt --calib-tokens "$CALIB_TOKENS" --threads "$THREADS")
BUDGET=(--budget-formats "$BUDGET_FORMATS")  # every budget row and the pricing pass
PRICE=(--recipe laguna --budget-bpw 2.0 "${BUDGET[@]}")  # the pricing pass (any feasible budget: it stops before choosing)

ROWS="cbgptq-k16|--recipe laguna|
proxy-2.28125|--recipe laguna --budget-bpw 2.28125 --budget-score proxy|
proxy-2.5625|--recipe laguna --budget-bpw 2.5625 --budget-score proxy|
measured-2.28125|--recipe laguna --budget-bpw 2.28125|
measured-2.5625|--recipe laguna --budget-bpw 2.5625|
uniform-k12|--recipe experts-k12|
measured-2.0|--recipe laguna --budget-bpw 2.0|
rtn-k16|--recipe laguna --method rtn|"
[ -n "${EXTRA_ROWS:-}" ] && ROWS="$ROWS"$'\n'"$EXTRA_ROWS"

priced() {  # the shared pricing pass, once per WORK
  [ -d "$WORK/priced.partial" ] && return 0
  echo "== pricing every budget candidate once" >&2
  local start; start=$(date +%s)
  "$GRIDQ" quantize "$MODEL" "$WORK/priced" "${PRICE[@]}" "${COMMON[@]}" --stop-after-layer "$LAST_LAYER" \
    --no-resume --quiet >/dev/null
  [ -d "$WORK/priced.partial" ] || { echo "pricing pass did not stop before finishing" >&2; exit 1; }
  echo "$(($(date +%s) - start))" >"$WORK/priced.seconds"
}

declare -A art_of  # quantize args -> artifact
runs=()
while IFS='|' read -r name qargs eargs; do
  [ -z "$name" ] && continue
  if [ -n "${ONLY:-}" ] && [[ " $ONLY " != *" $name "* ]]; then continue; fi
  runs+=("$name")
  printf '%s\n%s\n' "$qargs" "$eargs" >"$WORK/$name.args"
  art="${art_of[$qargs]:-}"
  if [ -z "$art" ]; then
    art="$WORK/$name"
    art_of[$qargs]="$art"
    if [ ! -s "$WORK/$name.quantize.json" ]; then
      echo "== $name: quantize $qargs" >&2
      # shellcheck disable=SC2086
      extra=()
      if [[ " $qargs " == *" --budget-bpw "* ]]; then
        priced
        rm -rf "$art.partial" && cp -r "$WORK/priced.partial" "$art.partial"
        extra=("${BUDGET[@]}")
      fi
      start=$(date +%s)
      # shellcheck disable=SC2086
      "$GRIDQ" quantize "$MODEL" "$art" $qargs "${extra[@]}" "${COMMON[@]}" --overwrite --quiet --json \
        >"$WORK/$name.quantize.json.tmp"
      mv "$WORK/$name.quantize.json.tmp" "$WORK/$name.quantize.json"
      echo "$(($(date +%s) - start))" >"$WORK/$name.quantize.seconds"
    fi
  fi
  echo "$art" >"$WORK/$name.artifact"
  [ -s "$WORK/$name.eval.json" ] && continue
  echo "== $name: eval $eargs" >&2
  teacher=(--teacher "$MODEL")
  [ -f "$DUMP" ] && teacher=()  # the first eval writes the dump, the others reuse it
  # shellcheck disable=SC2086
  "$GRIDQ" eval "$art" "${teacher[@]}" --teacher-dump "$DUMP" --text data/code-eval.txt \
    --tokens "$EVAL_TOKENS" --threads "$THREADS" --device "$DEVICE" $eargs --json >"$WORK/$name.eval.json.tmp"
  mv "$WORK/$name.eval.json.tmp" "$WORK/$name.eval.json"
done <<<"$ROWS"

python3 - "$STEM" "$WORK" "$GRIDQ" "$CALIB_TOKENS" "$EVAL_TOKENS" "${runs[@]}" <<'PYEOF'
import json, os, platform, subprocess, sys, datetime
stem, work, gridq, calib_tokens, eval_tokens, runs = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), sys.argv[6:]
git = lambda *a: subprocess.run(["git", *a], capture_output=True, text=True).stdout.strip()
commit = os.environ.get("COMMIT") or (git("rev-parse", "--short", "HEAD") + ("-dirty" if git("status", "--porcelain", "--untracked-files=no") else ""))
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.processor())
rd = lambda n, ext: open(os.path.join(work, n + ext)).read()
rows = []
for name in runs:
    qargs, eargs = rd(name, ".args").split("\n")[:2]
    art = rd(name, ".artifact").strip()
    src = os.path.basename(art)
    q = json.loads(rd(src, ".quantize.json"))
    secs = int(rd(src, ".quantize.seconds"))
    rows.append({"run": name, "quantize_args": qargs, "eval_args": eargs, "artifact_of": src,
                 "quantize_seconds": secs, "quantize": q, "eval": json.loads(rd(name, ".eval.json"))})
shas = {r["eval"]["teacher_sha256"] for r in rows}
assert len(shas) == 1, f"runs were scored against different teachers: {shas}"
priced = int(rd("priced", ".seconds")) if os.path.exists(os.path.join(work, "priced.seconds")) else None
doc = {"budget_formats": os.environ.get("BUDGET_FORMATS", "NVFP4_CB_K12,NVFP4_CB_K16,NVFP4_CB_K20,NVFP4_CB_K24"), "date": datetime.date.today().isoformat(), "commit": commit, "machine": f"{cpu}, {os.cpu_count()} cores",
       "model": "models/laguna-tiny-code", "calib": {"file": "data/code-calib.txt", "tokens": calib_tokens},
       "eval": {"file": "data/code-eval.txt", "tokens": eval_tokens, "teacher_sha256": shas.pop()},
       "pricing_seconds": priced, "runs": rows}
json.dump(doc, open(stem + ".json", "w"), indent=1)

def routed_bpw(q):  # bits per routed-expert weight: the allocation's bpw, else the CB format's
    if q.get("allocation"): return q["allocation"]["bpw"]
    cb = {k: v for k, v in q["formats"].items() if k.startswith(("NVFP4_CB", "FP8_CB"))}
    return sum(v["bytes"] * 8 for v in cb.values()) / max(1, sum(v["params"] for v in cb.values()))
def plan(q):
    a = q.get("allocation")
    if not a: return ", ".join(k for k in sorted(q["formats"]) if k.startswith(("NVFP4_CB", "FP8_CB")))
    s = " / ".join(u["format"].replace("NVFP4_CB_", "") for u in a["units"])
    if a.get("measured"): s += f" ({a['measured']['chosen']})"
    return s
by = {r["run"]: r for r in rows}
with open(stem + ".md", "w") as md:
    e0 = rows[0]["eval"]
    md.write(f"# Quality levers on the bundled model ({doc['date']})\n\n")
    md.write(f"- machine: {doc['machine']}; commit {doc['commit']}; `bench/quality_levers.sh`\n")
    md.write(f"- calibration: first {calib_tokens} tokens of `data/code-calib.txt`; evaluation: first {eval_tokens} tokens "
             f"of `data/code-eval.txt`, {e0['positions']} positions, teacher (BF16) PPL {e0['teacher_ppl']:.4f}, one "
             f"teacher dump (teacher_sha256 {doc['eval']['teacher_sha256'][:16]}…)\n")
    md.write(f"- budget candidates: {doc['budget_formats']}\n")
    if priced is not None:
        md.write(f"- budget rows share one pricing pass ({priced} s); their quantize s is the finish from it\n")
    md.write("\n| row | routed bpw | routed rungs (layers 1-3) | ALL-KL | confident-KL | top-1 | PPL | quantize s |\n")
    md.write("|---|---|---|---|---|---|---|---|\n")
    for r in rows:
        e, q = r["eval"], r["quantize"]
        md.write(f"| {r['run']} | {routed_bpw(q):.5f} | {plan(q)} | {e['all_kl']:.5f} | {e['confident_kl']:.5f} | "
                 f"{e['top1_agree']:.4f} | {e['ppl']:.4f} | {r['quantize_seconds']} |\n")
    md.write("\nRatios (ALL-KL):\n\n")
    def ratio(a, b, what):
        if a in by and b in by:
            md.write(f"- {a} / {b}: {by[a]['eval']['all_kl'] / by[b]['eval']['all_kl']:.3f} ({what})\n")
    ratio("measured-2.0", "uniform-k12", "≤ 1: never worse than the uniform rung that fits")
    ratio("measured-2.28125", "cbgptq-k16", "≤ 1: never worse than the uniform rung that fits")
    ratio("measured-2.5625", "cbgptq-k16", "≤ 1: never worse than the uniform rung that fits")
    ratio("measured-2.28125", "proxy-2.28125", "vs today's mixed plan")
    ratio("measured-2.5625", "proxy-2.5625", "issue 15 target ≤ 0.91")
    ratio("proxy-2.28125", "cbgptq-k16", "today: the proxy plan against uniform K16")
print(open(stem + ".md").read())
PYEOF
