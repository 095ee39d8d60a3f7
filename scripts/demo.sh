#!/usr/bin/env bash
# The README's main job on the bundled model: inspect the BF16 checkpoint, then generate Python with it.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${GRIDQ_BIN:-build/gridq}
MODEL=models/laguna-tiny-code
echo "== gridq inspect $MODEL"
"$BIN" inspect "$MODEL"
echo
echo "== gridq generate $MODEL --prompt 'def fibonacci(n):'"
"$BIN" generate "$MODEL" --prompt "def fibonacci(n):" --max-tokens 96
