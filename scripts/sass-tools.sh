#!/usr/bin/env bash
# Installs NVIDIA's disassemblers (cuobjdump, nvdisasm: PyPI nvidia-cuda-cuobjdump / nvidia-cuda-nvdisasm)
# into .venv and prints the directory that holds them: the workstation's CUDA toolkit has nvcc and ptxas but
# not these, and gpu-engine.md §4 wants instruction counts taken here, before a kernel is timed on the GPU.
#   bash scripts/sass-tools.sh
#   "$(bash scripts/sass-tools.sh)/cuobjdump" -sass build/CMakeFiles/gridq_cuda.dir/src/runtime/cuda/gemv_cb_k16.cu.o \
#     > /tmp/k16.sass && .venv/bin/python bench/sass_loops.py /tmp/k16.sass 'DecCBILi16ELi2EEELi1ELi0E'
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm >&2
dir=$(.venv/bin/python - <<'PY'
import glob, os, sys
hits = glob.glob(os.path.join(sys.prefix, "lib", "python*", "site-packages", "nvidia", "*", "bin", "cuobjdump"))
print(os.path.dirname(hits[0]) if hits else "")
PY
)
[ -n "$dir" ] || { echo "sass-tools: cuobjdump not found after install" >&2; exit 1; }
chmod +x "$dir"/cuobjdump "$dir"/nvdisasm 2>/dev/null || true
echo "$dir"
