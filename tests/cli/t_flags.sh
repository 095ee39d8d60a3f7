# Sourced by run_cli_tests.sh: flag values of the run commands (issue 14 items 5 and 12). A value the server
# would refuse in a request, or that makes no sense, is refused at start-up with the flag named; help shows
# defaults and says MODEL may be an artifact; a --max-tokens past the context is warned about.

# refuse CMD ARGS... FLAG: the command exits non-zero before loading anything and names FLAG.
refuse() {
  local flag="${*: -1}" out
  if out="$("$GRIDQ" "${@:1:$#-1}" 2>&1)"; then fail "refuses $flag" "exit 0: $out"
  elif grep -q -- "$flag" <<<"$out"; then pass "refuses ${*:1:$#-1}"
  else fail "refuses $flag (flag not named)" "$out"; fi
}
for cmd in generate chat; do
  p=(); [ "$cmd" = generate ] && p=(--prompt hi)
  refuse $cmd "$MODEL" "${p[@]}" --temperature -0.5 --temperature
  refuse $cmd "$MODEL" "${p[@]}" --temperature nan --temperature
  refuse $cmd "$MODEL" "${p[@]}" --top-p 0 --top-p
  refuse $cmd "$MODEL" "${p[@]}" --top-p 1.5 --top-p
  refuse $cmd "$MODEL" "${p[@]}" --top-k -2 --top-k
  refuse $cmd "$MODEL" "${p[@]}" --min-p 2 --min-p
  refuse $cmd "$MODEL" "${p[@]}" --repetition-penalty 0 --repetition-penalty
  refuse $cmd "$MODEL" "${p[@]}" --presence-penalty 3 --presence-penalty
  refuse $cmd "$MODEL" "${p[@]}" --max-tokens -1 --max-tokens
  refuse $cmd "$MODEL" "${p[@]}" --threads -1 --threads
done
refuse eval "$MODEL" --text "$ROOT/data/code-eval.txt" --tokens -5 --tokens
refuse logits "$MODEL" --input x --output y --threads -1 --threads
refuse bench prefill --synthetic laguna-tiny-code --lengths 0 --lengths
refuse bench decode --synthetic laguna-tiny-code --batches 0 --batches

# Help: defaults shown and MODEL may be an artifact.
for cmd in generate chat eval logits; do
  out="$("$GRIDQ" $cmd --help 2>&1)"
  if grep -q "artifact" <<<"$out" && grep -q "Examples" <<<"$out" && grep -q -- "--threads INT:INT in \[0 - 4096\]=0" <<<"$out"; then
    pass "$cmd --help: examples, artifacts, defaults"
  else fail "$cmd --help" "$out"; fi
done
for cmd in pin render-chat tokenize inspect quantize; do
  if grep -q "Examples" <<<"$("$GRIDQ" $cmd --help 2>&1)"; then pass "$cmd --help has examples"
  else fail "$cmd --help has no examples"; fi
done

# A --max-tokens past the model's context (max_position_embeddings) is warned about, and only then.
mkdir -p "$TMP/shortctx"
for f in "$MODEL"/*; do ln -sf "$f" "$TMP/shortctx/"; done
rm "$TMP/shortctx/config.json"
"$PY" -c "import json,sys; c=json.load(open(sys.argv[1])); c['max_position_embeddings']=8; json.dump(c, open(sys.argv[2],'w'))" \
  "$MODEL/config.json" "$TMP/shortctx/config.json"
out="$("$GRIDQ" generate "$TMP/shortctx" --prompt hi --max-tokens 2 --threads 2 2>&1)"
if ! grep -q "past the context" <<<"$out"; then pass "generate: no context warning within the context"
else fail "generate: warned within the context" "$out"; fi
out="$("$GRIDQ" generate "$TMP/shortctx" --prompt hi --max-tokens 12 --threads 2 2>&1)"
if grep -q "past the context of 8 tokens" <<<"$out"; then pass "generate: --max-tokens past the context warned"
else fail "generate: no warning past the context" "$out"; fi

# gridq eval: a progress line with the ETA on a terminal's stderr (through script(1)), nothing on a pipe, and
# stdout stays the JSON either way.
if command -v script >/dev/null; then
  out="$(script -qec "'$GRIDQ' eval '$MODEL' --text '$ROOT/data/code-eval.txt' --tokens 96 --window 16 --threads 2 --json" /dev/null 2>&1)"
  if grep -q "eval: window 1/6, .* ETA" <<<"$out"; then pass "eval: progress and ETA on a terminal"
  else fail "eval: no progress on a terminal" "$out"; fi
fi
if out="$("$GRIDQ" eval "$MODEL" --text "$ROOT/data/code-eval.txt" --tokens 96 --window 16 --threads 2 --json 2>"$TMP/eval.err")" &&
   "$PY" -c "import json,sys; json.loads(sys.argv[1])" "$out" && ! grep -q "ETA" "$TMP/eval.err"; then
  pass "eval: no progress line off a terminal, JSON stdout"
else fail "eval off a terminal" "$out $(cat "$TMP/eval.err")"; fi
