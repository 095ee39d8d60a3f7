#!/usr/bin/env bash
# Quality of every shipped recipe on the bundled model: quantize with each encoder (CB-GPTQ and the RTN
# baseline), then score the artifact against the BF16 teacher with `gridq eval --teacher` on held-out text.
# All candidates are scored against one teacher dump, so their numbers are a same-run A/B (quantizer.md §8:
# compare only rows with one teacher_sha256).
#
# Usage: bench/recipe_quality.sh [GRIDQ_BIN] [RESULT_STEM]
#   env: RECIPES="laguna all-fp8 ..." METHODS="cb-gptq rtn" CALIB_TOKENS=65536 EVAL_TOKENS=8192 WORK=/tmp/...
# Writes RESULT_STEM.json (every eval and quantize summary) and RESULT_STEM.md (the table), default
# bench/results/DATE-cpu-recipe-quality.
set -euo pipefail
cd "$(dirname "$0")/.."
GRIDQ="${1:-build/gridq}"
STEM="${2:-bench/results/$(date -u +%Y-%m-%d)-cpu-recipe-quality}"
RECIPES="${RECIPES:-laguna all-fp8 experts-k12 experts-k20 experts-fp8cb}"
METHODS="${METHODS:-cb-gptq rtn}"
CALIB_TOKENS="${CALIB_TOKENS:-65536}"
EVAL_TOKENS="${EVAL_TOKENS:-8192}"
MODEL=models/laguna-tiny-code
WORK="${WORK:-$(mktemp -d "${TMPDIR:-/tmp}/gridq_recipes.XXXXXX")}"
mkdir -p "$WORK" "$(dirname "$STEM")"
DUMP="$WORK/teacher.dump"

runs=()
for recipe in $RECIPES; do
  for method in $METHODS; do
    name="$recipe.$method"
    art="$WORK/$name"
    runs+=("$name")
    # Resumable: a run whose eval is already in WORK is kept (rerun with the same WORK to finish a table).
    [ -s "$WORK/$name.eval.json" ] && continue
    echo "== $name: quantize" >&2
    start=$(date +%s)
    "$GRIDQ" quantize "$MODEL" "$art" --recipe "$recipe" --method "$method" --calib data/code-calib.txt \
      --calib-tokens "$CALIB_TOKENS" --overwrite --no-resume --quiet --json >"$WORK/$name.quantize.json"
    echo "$(($(date +%s) - start))" >"$WORK/$name.quantize.seconds"
    echo "== $name: eval" >&2
    teacher=(--teacher "$MODEL")
    [ -f "$DUMP" ] && teacher=()   # the first run writes the dump, the others reuse it
    "$GRIDQ" eval "$art" "${teacher[@]}" --teacher-dump "$DUMP" --text data/code-eval.txt \
      --tokens "$EVAL_TOKENS" --json >"$WORK/$name.eval.json.tmp"
    mv "$WORK/$name.eval.json.tmp" "$WORK/$name.eval.json"
  done
done

python3 - "$STEM" "$WORK" "$GRIDQ" "$CALIB_TOKENS" "$EVAL_TOKENS" "${runs[@]}" <<'PYEOF'
import json, os, platform, subprocess, sys, datetime
stem, work, gridq, calib_tokens, eval_tokens, runs = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), sys.argv[6:]
commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True).stdout.strip() != ""
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.processor())
rows = []
for name in runs:
    q = json.load(open(os.path.join(work, name + ".quantize.json")))
    e = json.load(open(os.path.join(work, name + ".eval.json")))
    secs = int(open(os.path.join(work, name + ".quantize.seconds")).read())
    rows.append({"run": name, "quantize_seconds": secs, "quantize": q, "eval": e})
shas = {r["eval"]["teacher_sha256"] for r in rows}
assert len(shas) == 1, f"runs were scored against different teachers: {shas}"
doc = {"date": datetime.date.today().isoformat(), "commit": commit + ("-dirty" if dirty else ""),
       "machine": f"{cpu}, {os.cpu_count()} cores", "model": "models/laguna-tiny-code",
       "calib": {"file": "data/code-calib.txt", "tokens": calib_tokens},
       "eval": {"file": "data/code-eval.txt", "tokens": eval_tokens, "teacher_sha256": shas.pop()},
       "runs": rows}
json.dump(doc, open(stem + ".json", "w"), indent=1)

def bpw(q):
    f = q["formats"]
    return ", ".join(f"{k} {v['bpw']:.5g}" for k, v in sorted(f.items()) if k != "BF16")
teacher_ppl = rows[0]["eval"]["teacher_ppl"]
with open(stem + ".md", "w") as md:
    md.write(f"# Recipe quality on the bundled model ({doc['date']})\n\n")
    md.write(f"- machine: {doc['machine']}; commit {doc['commit']}; `bench/recipe_quality.sh`\n")
    md.write(f"- calibration: first {calib_tokens} tokens of `data/code-calib.txt` (512-token windows)\n")
    md.write(f"- evaluation: first {eval_tokens} tokens of `data/code-eval.txt` (disjoint), 512-token windows, "
             f"{rows[0]['eval']['positions']} positions, {rows[0]['eval']['confident_positions']} confident; "
             f"teacher (BF16) PPL {teacher_ppl:.4f}; every row scored against one teacher dump "
             f"(teacher_sha256 {doc['eval']['teacher_sha256'][:16]}…)\n\n")
    md.write("| recipe | method | quantized formats (bpw) | ALL-KL | confident-KL | top-1 | top-1 (confident) | PPL | quantize s |\n")
    md.write("|---|---|---|---|---|---|---|---|---|\n")
    for r in rows:
        e, q = r["eval"], r["quantize"]
        recipe, method = r["run"].split(".", 1)
        md.write(f"| {recipe} | {method} | {bpw(q)} | {e['all_kl']:.4f} | {e['confident_kl']:.4f} | "
                 f"{e['top1_agree']:.4f} | {e['top1_agree_confident']:.4f} | {e['ppl']:.4f} | {r['quantize_seconds']} |\n")
    by = {r["run"]: r["eval"] for r in rows}
    md.write("\nCB-GPTQ / RTN confident-KL ratio per recipe (quantizer.md: CB-GPTQ must beat RTN):\n\n")
    for recipe in dict.fromkeys(r["run"].split(".", 1)[0] for r in rows):
        g, t = by.get(recipe + ".cb-gptq"), by.get(recipe + ".rtn")
        if g and t and t["confident_kl"]:
            md.write(f"- {recipe}: {g['confident_kl'] / t['confident_kl']:.3f}\n")
print(open(stem + ".md").read())
PYEOF
