#!/usr/bin/env bash
# Fits the working tree under the device tool's 64 MiB cap for a run that needs the HF-logits fixtures, the
# bundled model and the load generator, and puts it back afterwards (bench/pending/README.md, runbook).
#
#   bash bench/device_tree.sh shrink    # cut data/code-{eval,calib}.txt to 100 KB, move bench/results out,
#                                       # swap .gpupack/pysite.tar.xz for an httpx-only one; prints the size
#   bash bench/device_tree.sh restore   # undo every step of shrink (safe to run twice)
#   bash bench/device_tree.sh size      # bytes the device tool sends: tracked + untracked-not-ignored files
#                                       # (carry adds the .gpupack paths you name)
#
# Never commit while shrunk: `git status` shows the cut data files and the moved results as changes.
set -euo pipefail
cd "$(dirname "$0")/.."
keep=${GRIDQ_TREE_BACKUP:-/tmp/gridq-device-tree}
size() {
  (git ls-files -z; git ls-files -z --others --exclude-standard) | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1
}
case "${1:-}" in
  shrink)
    [ -e "$keep/shrunk" ] && { echo "device_tree: already shrunk (backup in $keep)" >&2; exit 1; }
    mkdir -p "$keep"
    for f in data/code-eval.txt data/code-calib.txt; do
      cp "$f" "$keep/$(basename "$f")"
      head -c 100000 "$keep/$(basename "$f")" > "$f"
    done
    mv bench/results "$keep/results"
    if [ -f .gpupack/pysite.tar.xz ]; then
      # bench/loadgen.py needs httpx and its dependencies only (0.8 MB instead of 4.8).
      mv .gpupack/pysite.tar.xz "$keep/pysite.tar.xz"
      rm -rf "$keep/pys" && mkdir -p "$keep/pys" && tar xJf "$keep/pysite.tar.xz" -C "$keep/pys"
      (cd "$keep/pys" && tar cJf "$OLDPWD/.gpupack/pysite.tar.xz" site/anyio* site/certifi* site/h11* \
        site/httpcore* site/httpx* site/idna* site/sniffio* site/typing_extensions*)
    fi
    touch "$keep/shrunk"
    echo "device_tree: $(size) bytes (cap 67108864, plus carry)"
    ;;
  restore)
    [ -e "$keep/shrunk" ] || { echo "device_tree: not shrunk"; exit 0; }
    for f in data/code-eval.txt data/code-calib.txt; do cp "$keep/$(basename "$f")" "$f"; done
    [ -d "$keep/results" ] && [ ! -e bench/results ] && mv "$keep/results" bench/results
    [ -f "$keep/pysite.tar.xz" ] && mv "$keep/pysite.tar.xz" .gpupack/pysite.tar.xz
    rm -f "$keep/shrunk"
    git status --short
    ;;
  size) size ;;
  *)
    sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
