#!/usr/bin/env bash
# Overlays for `bench/gpu_engine.sh` step "variants": for each git ref given, the files the ref changed since
# it forked from HEAD (git merge-base), as they are in that ref, under .gpupack/var-<ref>/ (ignored, carried to
# the GPU machine). Refused where HEAD changed the same file since the fork (the overlay would undo it: rebase
# the ref first). Prints the GRIDQ_VARIANTS value to use.
#
#   bash bench/make_variants.sh grouped-diet grouped-diet-2buf
#   GRIDQ_STEPS="build tests variants benchab" GRIDQ_VARIANTS="$(bash bench/make_variants.sh a b | tail -1)" ...
#
# Files deleted in a ref are not supported (the step lays files over the tree; it cannot remove one).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -eq 0 ] || [ "$1" = "--help" ]; then
  sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'
  exit 0
fi
dirs=()
for ref in "$@"; do
  git rev-parse --verify -q "$ref^{commit}" > /dev/null || { echo "make_variants: '$ref' is not a git ref" >&2; exit 1; }
  base=$(git merge-base HEAD "$ref")
  d=".gpupack/var-${ref//\//-}"
  rm -rf "$d" && mkdir -p "$d"
  n=0
  while IFS=$'\t' read -r status path; do
    case "$status" in
      D) echo "make_variants: $ref deletes $path (not supported)" >&2; exit 1 ;;
      *)
        if ! git diff --quiet "$base" HEAD -- "$path"; then
          echo "make_variants: HEAD changed $path since $ref forked from it: rebase $ref first" >&2
          exit 1
        fi
        mkdir -p "$d/$(dirname "$path")" && git show "$ref:$path" > "$d/$path" && n=$((n + 1))
        ;;
    esac
  done < <(git diff --name-status "$base" "$ref" | awk -F'\t' '{print substr($1, 1, 1) "\t" $NF}')
  echo "$d: $n file(s) from $ref" >&2
  dirs+=("$d")
done
echo "${dirs[*]}"
