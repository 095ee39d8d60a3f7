#!/usr/bin/env bash
# Overlays for `bench/gpu_engine.sh` step "variants": for each git ref given, the files the ref changed since
# it forked from HEAD (git merge-base), as they are in that ref, under .gpupack/var-<ref>/ (ignored, carried to
# the GPU machine). Refused where HEAD changed the same file since the fork (the overlay would undo it: rebase
# the ref first). An argument ending in .patch (bench/pending/: changes written without a GPU, kept in the
# tree because a new session's checkout has main only) is applied to HEAD's files instead, into
# .gpupack/var-<name>/; A+B applies patch B on top of patch A; bench/pending/NAME.tests (a gtest filter) and
# NAME.nobench (build and test, do not time) beside a patch go with it. Prints the GRIDQ_VARIANTS value to use.
#
#   bash bench/make_variants.sh grouped-diet bench/pending/grouped-2buf.patch
#   GRIDQ_STEPS="build tests variants benchab" GRIDQ_VARIANTS="$(bash bench/make_variants.sh a b | tail -1)" ...
#
# Files deleted in a ref are not supported (the step lays files over the tree; it cannot remove one).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -eq 0 ] || [ "$1" = "--help" ]; then
  sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'
  exit 0
fi
# Patches p1+p2+...: applied in turn to HEAD's files, the result under .gpupack/var-<names>/.
from_patches() {
  local spec=$1 name="" files="" p tmp
  IFS=+ read -ra ps <<< "$spec"
  for p in "${ps[@]}"; do
    [ -f "$p" ] || { echo "make_variants: no patch file '$p'" >&2; exit 1; }
    name="${name:+$name+}$(basename "$p" .patch)"
    files="$files $(git apply --numstat "$p" | cut -f3)"
  done
  d=".gpupack/var-$name"
  tmp=$(mktemp -d)
  # shellcheck disable=SC2086
  for f in $(echo $files | tr ' ' '\n' | sort -u); do
    git cat-file -e "HEAD:$f" 2> /dev/null && mkdir -p "$tmp/$(dirname "$f")" && git show "HEAD:$f" > "$tmp/$f"
  done
  for p in "${ps[@]}"; do
    (cd "$tmp" && git apply "$OLDPWD/$p") || { echo "make_variants: $p does not apply to HEAD (rebase it)" >&2; exit 1; }
  done
  rm -rf "$d" && mkdir -p "$d" && cp -r "$tmp"/. "$d"/ && rm -rf "$tmp"
  # The patches' own test filters (bench/pending/NAME.tests, joined) and bench choice (NAME.nobench).
  local tests=""
  for p in "${ps[@]}"; do
    [ -f "${p%.patch}.tests" ] && tests="${tests:+$tests:}$(tr -d '\n' < "${p%.patch}.tests")"
    [ -f "${p%.patch}.nobench" ] && touch "$d/.nobench"
  done
  [ -n "$tests" ] && printf '%s' "$tests" > "$d/.tests"
  echo "$d: $(find "$d" -type f | wc -l) file(s) from $spec" >&2
  dirs+=("$d")
}
dirs=()
for ref in "$@"; do
  if [[ $ref == *.patch ]]; then
    from_patches "$ref"
    continue
  fi
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
