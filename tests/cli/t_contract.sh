# Sourced by run_cli_tests.sh: `--activation-contract w4a4|w4a16` on the run commands (issue 15 item 4) and
# `quantize --rotate` in --help. Uses GRIDQ, MODEL, TMP, pass and fail from the runner. The bundled BF16 model
# has no FP4-CB layers, so the start-up line says nothing changes (the engine-level behaviour on an artifact is
# tests/runtime/activation_contract_test.cpp).
if out="$("$GRIDQ" generate "$MODEL" --prompt "def f(x):" --max-tokens 2 --device cpu --activation-contract w4a16 \
           2>"$TMP/contract.err")" && grep -q "activation contract w4a16: no FP4-CB layers, nothing changes" "$TMP/contract.err"; then
  pass "generate --activation-contract w4a16 names the contract in the device line"
else fail "generate --activation-contract w4a16" "$out $(cat "$TMP/contract.err")"; fi

if out="$("$GRIDQ" eval "$MODEL" --text "$ROOT/data/code-eval.txt" --tokens 64 --activation-contract w4a8 2>&1)"; then
  fail "eval --activation-contract w4a8 exits non-zero" "$out"
elif grep -q -- "--activation-contract" <<<"$out"; then
  pass "eval --activation-contract w4a8 is refused naming the flag"
else fail "eval --activation-contract w4a8 message names the flag" "$out"; fi

ok=1
for c in generate chat logits eval serve; do
  "$GRIDQ" "$c" --help 2>&1 | grep -q -- "--activation-contract" || { ok=0; fail "$c --help lists --activation-contract"; }
done
[ $ok = 1 ] && pass "generate/chat/logits/eval/serve --help list --activation-contract"
if "$GRIDQ" quantize --help 2>&1 | grep -q -- "--rotate hadamard"; then pass "quantize --help shows --rotate hadamard"
else fail "quantize --help shows --rotate hadamard"; fi
