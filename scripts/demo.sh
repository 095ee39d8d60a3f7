#!/usr/bin/env bash
# The README's main job on the bundled model: inspect the BF16 checkpoint, quantize it into a gridbook
# artifact with the `laguna` recipe (CB-GPTQ on 64k calibration tokens), verify and inspect the artifact,
# measure it against the BF16 teacher on held-out text, and generate Python with it.
# The artifact goes to build/demo/ (ours to replace: a rerun overwrites it, nothing else is touched).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${GRIDQ_BIN:-build/gridq}
MODEL=models/laguna-tiny-code
OUT=${DEMO_OUT:-build/demo/laguna-tiny-code-gridbook}
mkdir -p "$(dirname "$OUT")"

echo "== gridq inspect $MODEL"
"$BIN" inspect "$MODEL"
echo
echo "== gridq quantize $MODEL $OUT --recipe laguna --calib data/code-calib.txt"
"$BIN" quantize "$MODEL" "$OUT" --recipe laguna --calib data/code-calib.txt --overwrite --no-resume
echo
echo "== gridq pin $OUT --verify && gridq inspect $OUT"
"$BIN" pin "$OUT" --verify
"$BIN" inspect "$OUT"
echo
echo "== gridq eval $OUT --teacher $MODEL --text data/code-eval.txt --tokens 8192"
"$BIN" eval "$OUT" --teacher "$MODEL" --text data/code-eval.txt --tokens 8192
echo
echo "== gridq generate $OUT --prompt 'def fibonacci(n):'"
"$BIN" generate "$OUT" --prompt "def fibonacci(n):" --max-tokens 96
echo
echo "Serve it with: $BIN serve $OUT --port 8000   (OpenAI-compatible API; docs/serving.md)"
