# Sourced by run_cli_tests.sh (t_*.sh): tests of `gridq --help` and `gridq inspect`. Uses GRIDQ, ROOT, MODEL, PY, TMP,
# pass and fail from the runner.

# --- help ---
if out="$("$GRIDQ" --help 2>&1)" && grep -q "inspect" <<<"$out"; then pass "gridq --help lists inspect"
else fail "gridq --help" "$out"; fi
if out="$("$GRIDQ" inspect --help 2>&1)" && grep -q -- "--json" <<<"$out" && grep -q "Examples" <<<"$out"; then
  pass "gridq inspect --help"
else fail "gridq inspect --help" "$out"; fi

# --- human report of the bundled model ---
if out="$("$GRIDQ" inspect "$MODEL" 2>&1)" && grep -q "24,806,948" <<<"$out" && grep -q "routed_experts" <<<"$out"; then
  pass "inspect (table) reports 24,806,948 parameters"
else fail "inspect (table)" "$(tail -20 <<<"$out")"; fi

# --- JSON report, checked with Python's json against models/README.md ---
if "$GRIDQ" inspect "$MODEL" --json >"$TMP/inspect.json" 2>"$TMP/inspect.err"; then
  if "$PY" - "$TMP/inspect.json" <<'PYEOF'
import json, sys
r = json.load(open(sys.argv[1]))
assert r["schema"] == "gridq.inspect/1" and r["ok"] is True, r.get("error")
assert r["kind"] == "checkpoint" and r["quantization"] is None
assert r["totals"]["params"] == 24806948, r["totals"]
assert r["totals"]["bytes"] == 49613896, r["totals"]
want = {"routed_experts": 14155776, "attention": 3670016, "embed_tokens": 2097152, "lm_head": 2097152,
        "dense_mlp": 1572864, "shared_experts": 1179648, "routers": 18468, "g_proj": 10240, "norms": 5632}
got = {k: v["params"] for k, v in r["components"].items()}
assert got == want, got
assert len(r["modules"]) == 165, len(r["modules"])
assert sum(m["params"] for m in r["modules"]) == 24806948
for m in r["modules"]:
    assert m["format"] == "BF16" and m["rung"] is None, m
    assert abs(m["bpw"] - 16.0) < 1e-12, m
PYEOF
  then pass "inspect --json: params 24806948 and the README component split"
  else fail "inspect --json content"; fi
else fail "inspect --json exit status" "$(cat "$TMP/inspect.err")"; fi

# --- a corrupted copy must be refused with a message ---
cp -r "$MODEL" "$TMP/corrupt"
shard="$TMP/corrupt/model-00003-of-00004.safetensors"
chmod u+w "$shard"
truncate -s -1000 "$shard"
if out="$("$GRIDQ" inspect "$TMP/corrupt" 2>&1)"; then fail "inspect of a truncated shard exits non-zero"
elif grep -q "model-00003-of-00004.safetensors" <<<"$out"; then pass "inspect refuses a truncated shard: $(head -1 <<<"$out")"
else fail "inspect of a truncated shard names the file" "$out"; fi

cp -r "$MODEL" "$TMP/badshape"
chmod u+w "$TMP/badshape/config.json"
"$PY" - "$TMP/badshape/config.json" <<'PYEOF'
import json, sys
c = json.load(open(sys.argv[1]))
c["moe_intermediate_size"] = 128
json.dump(c, open(sys.argv[1], "w"), indent=2)
PYEOF
if out="$("$GRIDQ" inspect "$TMP/badshape" --json 2>"$TMP/bad.err")"; then fail "inspect of a config/tensor mismatch exits non-zero"
elif "$PY" -c 'import json,sys; r=json.load(sys.stdin); assert r["ok"] is False and "experts" in r["error"], r' <<<"$out" \
     && grep -q "gridq: error:" "$TMP/bad.err"; then pass "inspect refuses a shape mismatch (JSON error + stderr)"
else fail "inspect shape mismatch report" "$out $(cat "$TMP/bad.err")"; fi

# Issue 14 item 4: inspect runs the loader's config checks, so a value the loader refuses exits 1 naming the key.
for kv in num_key_value_heads=0 num_key_value_heads=8589934592 rms_norm_eps=-1 max_position_embeddings=0 \
          vocab_size=1000000000000; do
  key="${kv%%=*}"
  rm -rf "$TMP/badcfg"; cp -r "$MODEL" "$TMP/badcfg"; chmod u+w "$TMP/badcfg/config.json"
  "$PY" - "$TMP/badcfg/config.json" "$key" "${kv#*=}" <<'PYEOF'
import json, sys
c = json.load(open(sys.argv[1]))
c[sys.argv[2]] = json.loads(sys.argv[3])
json.dump(c, open(sys.argv[1], "w"), indent=2)
PYEOF
  out="$("$GRIDQ" inspect "$TMP/badcfg" 2>&1)"; rc=$?
  if [ "$rc" = 1 ] && grep -q "$key" <<<"$out"; then pass "inspect refuses $kv with exit 1"
  else fail "inspect of $kv exits 1 naming the key (rc=$rc)" "$out"; fi
done

if out="$("$GRIDQ" inspect "$TMP/does-not-exist" 2>&1)"; then fail "inspect of a missing dir exits non-zero"
else pass "inspect of a missing dir exits non-zero"; fi

# --- an artifact (attention as compressed-tensors FP8, the rest BF16) built by make_fp8_artifact.py ---
HERE="$(dirname "${BASH_SOURCE[0]}")"
if "$PY" "$HERE/make_fp8_artifact.py" "$MODEL" "$TMP/fp8art" --pins 2>"$TMP/mk.err"; then
  if "$GRIDQ" inspect "$TMP/fp8art" --json >"$TMP/art.json" 2>"$TMP/art.err" && "$PY" - "$TMP/art.json" <<'PYEOF'
import json, sys
r = json.load(open(sys.argv[1]))
assert r["ok"] and r["kind"] == "artifact", r
assert r["pins"] == "verified", r["pins"]
assert r["totals"]["params"] == 24806948, r["totals"]
q = r["quantization"]
assert q["quant_method"] == "gridbook" and q["layout_version"] == 1, q
assert q["groups"] == [{"name": "attention_fp8", "kind": "compressed-tensors", "format": "FP8_W8A8", "modules": 16}], q
attn = [m for m in r["modules"] if m["component"] == "attention"]
assert len(attn) == 16
for m in attn:
    rows, cols = m["shape"]
    assert m["format"] == "FP8_W8A8" and m["bytes"] == rows * cols + 4 * rows, m
assert r["components"]["attention"]["bytes"] == sum(m["bytes"] for m in attn)
assert all(m["format"] == "BF16" for m in r["modules"] if m["component"] != "attention")
PYEOF
  then pass "inspect --json of an FP8-attention artifact (formats, bytes, PINS verified)"
  else fail "inspect of an FP8-attention artifact" "$(cat "$TMP/art.err")"; fi

  # A file changed after pinning is refused and named.
  cp -r "$TMP/fp8art" "$TMP/pinbad"
  echo " " >>"$TMP/pinbad/quant_config.json"
  if out="$("$GRIDQ" inspect "$TMP/pinbad" 2>&1)"; then fail "inspect with a PINS mismatch exits non-zero"
  elif grep -q "quant_config.json" <<<"$out"; then pass "inspect refuses a file modified after PINS.json"
  else fail "PINS mismatch message names the file" "$out"; fi

  # Dropping the router from ignore leaves a Linear unclaimed (the substring-bug class of error).
  "$PY" "$HERE/make_fp8_artifact.py" "$MODEL" "$TMP/unclaimed"
  "$PY" - "$TMP/unclaimed/quant_config.json" <<'PYEOF'
import json, sys
q = json.load(open(sys.argv[1]))
q["ignore"].remove("model.layers.1.mlp.gate")
json.dump(q, open(sys.argv[1], "w"))
PYEOF
  if out="$("$GRIDQ" inspect "$TMP/unclaimed" 2>&1)"; then fail "inspect with an unclaimed Linear exits non-zero"
  elif grep -q "model.layers.1.mlp.gate" <<<"$out" && grep -q "not claimed" <<<"$out"; then
    pass "inspect refuses an unclaimed Linear"
  else fail "unclaimed Linear message" "$out"; fi
else
  fail "make_fp8_artifact.py" "$(cat "$TMP/mk.err")"
fi
