# Sourced by run_cli_tests.sh (t_*.sh): `--device cpu|cuda|auto` on the run commands. Uses GRIDQ, MODEL, TMP,
# pass and fail from the runner. Two generated tokens each: these check the choice and its messages, not the
# model. The machine the CLI tests run on is assumed to have no usable GPU (CI has none); where it has one,
# the cuda/auto expectations below are skipped.
DEV_PROMPT="def add(a, b):"

# --- cpu: runs, and says so once on stderr ---
if out="$("$GRIDQ" generate "$MODEL" --prompt "$DEV_PROMPT" --max-tokens 2 --device cpu 2>"$TMP/dev.err")" &&
   grep -q "^def add(a, b):" <<<"$out" && [ "$(grep -c "device: cpu (--device cpu)" "$TMP/dev.err")" -eq 1 ]; then
  pass "generate --device cpu runs and logs 'device: cpu (--device cpu)' once"
else fail "generate --device cpu" "$out $(cat "$TMP/dev.err")"; fi

# --- an unknown value: refused at parse time, naming the flag and the values ---
if out="$("$GRIDQ" generate "$MODEL" --prompt "$DEV_PROMPT" --max-tokens 2 --device bogus 2>&1)"; then
  fail "generate --device bogus exits non-zero" "$out"
elif grep -q -- "--device" <<<"$out" && grep -q "cpu, cuda or auto" <<<"$out" && ! grep -q "^def add" <<<"$out"; then
  pass "generate --device bogus is refused: $(head -1 <<<"$out")"
else fail "generate --device bogus message names --device and the values" "$out"; fi

# --- cuda without a usable GPU: an error that says why, nothing generated (never a silent cpu run) ---
if "$GRIDQ" generate "$MODEL" --prompt "$DEV_PROMPT" --max-tokens 2 --device auto 2>&1 >/dev/null |
   grep -q "device: cuda"; then
  echo "SKIP --device cuda/auto refusal tests: this machine has a usable GPU"
else
  if "$GRIDQ" generate "$MODEL" --prompt "$DEV_PROMPT" --max-tokens 2 --device cuda >"$TMP/cuda.out" 2>"$TMP/cuda.err"; then
    fail "generate --device cuda without a GPU exits non-zero" "$(cat "$TMP/cuda.out" "$TMP/cuda.err")"
  elif grep -q "gridq: error: --device cuda: " "$TMP/cuda.err" && grep -q "use --device cpu or auto" "$TMP/cuda.err" &&
       [ ! -s "$TMP/cuda.out" ] && ! grep -q "device: cpu" "$TMP/cuda.err"; then
    pass "generate --device cuda without a GPU is refused: $(head -1 "$TMP/cuda.err")"
  else fail "generate --device cuda refusal (message, no output, no cpu run)" "$(cat "$TMP/cuda.out" "$TMP/cuda.err")"; fi

  # serve refuses before it listens (no "listening on" line, no model loaded).
  if out="$("$GRIDQ" serve "$MODEL" --port 0 --device cuda 2>&1)"; then
    fail "serve --device cuda without a GPU exits non-zero" "$out"
  elif grep -q "gridq: error: --device cuda: " <<<"$out" && ! grep -q "listening on" <<<"$out"; then
    pass "serve --device cuda without a GPU is refused before listening"
  else fail "serve --device cuda refusal" "$out"; fi

  # quantize --device cuda: refused before any work (no OUT.partial), naming the flag and why.
  if out="$("$GRIDQ" quantize "$MODEL" "$TMP/qdev" --recipe laguna --calib "$ROOT/data/code-calib.txt" \
      --calib-tokens 1024 --device cuda --quiet 2>&1)"; then
    fail "quantize --device cuda without a GPU exits non-zero" "$out"
  elif grep -q -- "--device cuda: " <<<"$out" && [ ! -e "$TMP/qdev.partial" ] && [ ! -e "$TMP/qdev" ]; then
    pass "quantize --device cuda without a GPU is refused before any work: $(head -1 <<<"$out")"
  else fail "quantize --device cuda refusal" "$out"; fi

  # --- auto (the default): cpu, and the line says why not cuda ---
  if out="$("$GRIDQ" generate "$MODEL" --prompt "$DEV_PROMPT" --max-tokens 2 2>"$TMP/auto.err")" &&
     grep -q "^def add(a, b):" <<<"$out" && grep -q "device: cpu (--device auto: .\+)" "$TMP/auto.err"; then
    pass "generate (--device auto) runs on cpu and says why: $(grep "device:" "$TMP/auto.err")"
  else fail "generate --device auto" "$out $(cat "$TMP/auto.err")"; fi
fi

# --- the other commands take the same flag: bench refuses cpu, eval reports its device ---
if out="$("$GRIDQ" bench kernels --device cpu 2>&1)"; then fail "bench kernels --device cpu exits non-zero" "$out"
elif grep -q -- "--device cpu" <<<"$out" && grep -q "cuda" <<<"$out"; then
  pass "bench kernels refuses --device cpu: $(head -1 <<<"$out")"
else fail "bench kernels --device cpu message" "$out"; fi
for sub in decode prefill; do
  if out="$("$GRIDQ" bench $sub --synthetic laguna-s-2.1 --device cpu 2>&1)"; then
    fail "bench $sub --device cpu exits non-zero" "$out"
  elif grep -q -- "bench $sub: --device cpu" <<<"$out" && grep -q "CUDA" <<<"$out"; then
    pass "bench $sub refuses --device cpu: $(head -1 <<<"$out")"
  else fail "bench $sub --device cpu message" "$out"; fi
done
if "$GRIDQ" eval "$MODEL" --text "$ROOT/data/code-eval.txt" --tokens 32 --window 16 --device cpu >/dev/null 2>"$TMP/ev.err" &&
   grep -q "device: cpu (--device cpu)" "$TMP/ev.err"; then
  pass "eval --device cpu logs its device"
else fail "eval --device cpu" "$(cat "$TMP/ev.err")"; fi
if out="$("$GRIDQ" generate "$MODEL" --prompt "$DEV_PROMPT" --gpu-memory-utilization 0 2>&1)"; then
  fail "generate --gpu-memory-utilization 0 exits non-zero" "$out"
elif grep -q -- "--gpu-memory-utilization" <<<"$out" && grep -q "(0, 1]" <<<"$out"; then
  pass "generate refuses --gpu-memory-utilization 0: $(head -1 <<<"$out")"
else fail "generate --gpu-memory-utilization 0 message" "$out"; fi
