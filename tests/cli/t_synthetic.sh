# Sourced by run_cli_tests.sh (t_*.sh): `gridq serve --synthetic NAME` builds its random full-size weights on the
# GPU, so on a device that is not CUDA it is refused before anything listens, naming the flag and the device.
# (It runs on the GPU machine: bench/gpu_engine.sh step "synth".) Uses GRIDQ, MODEL, TMP, pass and fail.
if out="$(timeout 30 "$GRIDQ" serve "$MODEL" --synthetic laguna-s-2.1 --device cpu --port 0 2>&1)"; then
  fail "serve --synthetic --device cpu exits non-zero" "$out"
elif grep -q -- "--synthetic laguna-s-2.1: the synthetic models are built on the GPU" <<<"$out" &&
  grep -q "device: cpu" <<<"$out" && ! grep -q "listening" <<<"$out"; then
  pass "serve --synthetic on the cpu is refused before listening: $(grep -m1 error <<<"$out")"
else fail "serve --synthetic --device cpu message" "$out"; fi

if out="$("$GRIDQ" serve --help 2>&1)" && grep -q -- "--synthetic" <<<"$out" && grep -q "Examples" <<<"$out"; then
  pass "serve --help shows --synthetic and examples"
else fail "serve --help" "$out"; fi
