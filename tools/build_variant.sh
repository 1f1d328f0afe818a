#!/bin/bash
# Build another commit's kernels as a variant timed beside this tree's (tools/bench_issue10.py and
# tools/bench_paged_sm90.py with RAGGED_ATTN_VARIANTS=NAME), on the CPU box:
#   bash tools/build_variant.sh REF NAME [CLASS,CLASS,...]
# REF: a branch or commit (e.g. wip/issue10-q-before-k, or main~3 for a "base"); NAME: the folder
# under .devcache/sm90/; classes default to the bench's (bf16 LSE-on ragged classes, causal for every
# head dim, d128 unmasked, d128 paged). Uses a git worktree under /tmp (removed afterwards).
set -euo pipefail
ref=$1; name=$2
classes=${3:-sm_90a-d32x32-bf16-bf16-causal-lse-ragged,sm_90a-d64x64-bf16-bf16-causal-lse-ragged,sm_90a-d96x96-bf16-bf16-causal-lse-ragged,sm_90a-d128x128-bf16-bf16-causal-lse-ragged,sm_90a-d128x128-bf16-bf16-none-lse-ragged,sm_90a-d128x128-bf16-bf16-causal-lse-paged}
root=$(git rev-parse --show-toplevel)
wt=$(mktemp -d /tmp/variant-XXXX)
git -C "$root" worktree add -q --detach "$wt" "$ref"
trap 'git -C "$root" worktree remove --force "$wt"' EXIT
(cd "$wt" && CUTE_DSL_ARCH=sm_90a PYTHONPATH="$wt" python tools/prebuild_sm90.py "$root/.devcache/sm90/$name" \
  --jobs 2 --classes "$classes")
echo "built $ref ($(git -C "$root" rev-parse --short "$ref")) into .devcache/sm90/$name"
