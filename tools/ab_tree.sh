#!/bin/bash
# Another tree's kernels timed in the same process as this tree's (tools/bench_issue10.py's
# RAGGED_ATTN_AB_TREES): when the other tree's compiled entries take other arguments (a
# RAGGED_ATTN_VARIANTS object must share this tree's launch_forward), its package travels beside
# ours under another name, with its own prebuilt objects.
#   bash tools/ab_tree.sh SRC LABEL [CLASSES]
# SRC: a commit or branch of this repository (git archive), or a directory holding a checkout.
# Writes .devcache/ab/LABEL/ragged_attn_LABEL (the package, its absolute imports renamed) and
# .devcache/ab/LABEL/sm90 (tools/prebuild_sm90.py of that tree: CLASSES, comma-separated, or every
# test class). Carry [".devcache/ab"] to the device, then
#   RAGGED_ATTN_AB_TREES=LABEL=$PWD/.devcache/ab/LABEL python3 tools/bench_issue10.py ROWS...
set -euo pipefail
src=${1:?usage: ab_tree.sh SRC LABEL [CLASSES]}
label=${2:?usage: ab_tree.sh SRC LABEL [CLASSES]}
root=$(cd "$(dirname "$0")/.." && pwd)
dir=$root/.devcache/ab/$label
tmp=$(mktemp -d)
if [ -d "$src" ]; then
  cp -r "$src/ragged_attn" "$src/tools" "$src/tests" "$tmp/"
else
  git -C "$root" archive "$src" ragged_attn tools tests | tar -x -C "$tmp"
fi
rm -rf "$dir" && mkdir -p "$dir"
(cd "$tmp" && CUTE_DSL_ARCH=sm_90a python3 tools/prebuild_sm90.py "$dir/sm90" --no-variants --jobs 2 \
  ${3:+--classes "$3"})
pkg=ragged_attn_$label
mv "$tmp/ragged_attn" "$dir/$pkg"
grep -rl --include=*.py -E "(from|import) ragged_attn\b" "$dir/$pkg" | xargs -r sed -i -E "s/(from|import) ragged_attn\b/\1 $pkg/g"
rm -rf "$tmp"
echo "prepared $src as $pkg in $dir"
