# Sourced by run_cli_tests.sh (t_*.sh): tests of `gridq eval` with and without --teacher. Uses GRIDQ, ROOT, MODEL,
# PY, TMP, pass and fail from the runner. Small token counts keep these cheap.
EVAL_TEXT="$ROOT/data/code-eval.txt"

# --- without a teacher: the plain perplexity keys, no teacher keys ---
if out="$("$GRIDQ" eval "$MODEL" --text "$EVAL_TEXT" --tokens 128 --window 64 --json 2>"$TMP/eval.err")" &&
   "$PY" -c 'import json,sys; r=json.loads(sys.argv[1]); assert r["positions"]==126 and r["windows"]==2 and r["ppl"]>1, r; assert "all_kl" not in r, r' "$out"; then
  pass "eval --json without --teacher: ppl over 126 positions"
else fail "eval --json without --teacher" "$out $(cat "$TMP/eval.err")"; fi

# --- the model as its own teacher: KL exactly 0, top-1 100%, the documented keys ---
if out="$("$GRIDQ" eval "$MODEL" --teacher "$MODEL" --text "$EVAL_TEXT" --tokens 256 --window 64 --json 2>"$TMP/eval.err")" &&
   "$PY" - "$out" <<'PYEOF'
import json, sys
r = json.loads(sys.argv[1])
for k in ["ppl", "teacher_ppl", "all_kl", "confident_kl", "top1_agree", "positions", "confident_positions",
          "top1_agree_confident", "teacher_sha256", "windows", "tokens"]:
    assert k in r, k
assert r["positions"] == 4 * 63 and r["windows"] == 4 and r["tokens"] == 256, r
assert r["all_kl"] == 0.0 and r["top1_agree"] == 1.0, r
assert abs(r["teacher_ppl"] - r["ppl"]) < 1e-5 * r["ppl"], r
assert len(r["teacher_sha256"]) == 64 and int(r["teacher_sha256"], 16) >= 0, r
PYEOF
then pass "eval --teacher (self): all_kl 0, top1_agree 1 over 252 positions"
else fail "eval --teacher (self)" "$out $(cat "$TMP/eval.err")"; fi

# --- refusals: a teacher with another tokenizer.json, a missing teacher directory ---
mkdir -p "$TMP/othertok"
for f in "$MODEL"/*; do ln -s "$f" "$TMP/othertok/$(basename "$f")"; done
rm "$TMP/othertok/tokenizer.json"
{ cat "$MODEL/tokenizer.json"; echo " "; } >"$TMP/othertok/tokenizer.json"
if out="$("$GRIDQ" eval "$MODEL" --teacher "$TMP/othertok" --text "$EVAL_TEXT" --tokens 128 --window 64 2>&1)"; then
  fail "eval --teacher with another tokenizer exits non-zero" "$out"
elif grep -q "othertok/tokenizer.json" <<<"$out" && grep -q "laguna-tiny-code/tokenizer.json" <<<"$out"; then
  pass "eval refuses a teacher with another tokenizer: $(head -1 <<<"$out")"
else fail "eval tokenizer refusal names both files" "$out"; fi
if out="$("$GRIDQ" eval "$MODEL" --teacher "$TMP/no-such-teacher" --text "$EVAL_TEXT" --tokens 128 2>&1)"; then
  fail "eval --teacher with a missing directory exits non-zero" "$out"
elif grep -q "no-such-teacher" <<<"$out"; then pass "eval refuses a missing teacher: $(head -1 <<<"$out")"
else fail "eval missing-teacher message names the directory" "$out"; fi

# --- teacher dump: written once, reused with identical numbers, refused for another window set ---
DUMP="$TMP/teacher.safetensors"
if a="$("$GRIDQ" eval "$MODEL" --teacher "$MODEL" --teacher-dump "$DUMP" --text "$EVAL_TEXT" --tokens 128 --window 64 --json 2>"$TMP/d1.err")" &&
   b="$("$GRIDQ" eval "$MODEL" --teacher-dump "$DUMP" --text "$EVAL_TEXT" --tokens 128 --window 64 --json 2>"$TMP/d2.err")" &&
   grep -q "teacher is not run" "$TMP/d2.err" &&
   "$PY" -c 'import json,sys; a,b=(json.loads(x) for x in sys.argv[1:]); assert all(a[k]==b[k] for k in ["teacher_sha256","all_kl","teacher_ppl","positions","ppl"]), (a,b)' "$a" "$b"; then
  pass "eval --teacher-dump: written, then reused with the same hash and numbers"
else fail "eval --teacher-dump round trip" "$a | $b | $(cat "$TMP/d1.err" "$TMP/d2.err" 2>/dev/null)"; fi
if out="$("$GRIDQ" eval "$MODEL" --teacher-dump "$DUMP" --text "$EVAL_TEXT" --tokens 128 --window 32 2>&1)"; then
  fail "eval with a dump of another window exits non-zero" "$out"
elif grep -q -- "--window 64" <<<"$out"; then pass "eval refuses a dump made with another window: $(grep -m1 "gridq: error" <<<"$out")"
else fail "eval dump window refusal" "$out"; fi
