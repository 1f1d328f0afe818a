#!/bin/bash
# Host time per call, this tree against another commit (issue 10's "no regression" rule: an A/B on one
# host), with each tree's own tools/host_overhead.py in alternating processes, so a busy host falls on
# both alike.
#   on the CPU box:  bash tools/host_ab.sh prepare REF     # REF's tree into .devcache/hostab/REF
#   on the device (a warm call carrying [".devcache/hostab"], after ../shared/device/README.md's calls
#   1 and 2):        bash tools/host_ab.sh run REF [ROUNDS] # default 3 rounds; logs under $OUT (or /tmp)
# Each process compiles its tree's kernel of the tiny test class (JIT, ~20 s) unless
# RAGGED_ATTN_SM90_PREBUILT holds it; the rows printed are host_overhead.py's (median us per call).
set -euo pipefail
cmd=${1:?usage: host_ab.sh prepare|run REF [ROUNDS]}
ref=${2:?usage: host_ab.sh prepare|run REF [ROUNDS]}
root=$(cd "$(dirname "$0")/.." && pwd)
dir=$root/.devcache/hostab/$ref
if [ "$cmd" = prepare ]; then
  rm -rf "$dir" && mkdir -p "$dir"
  git -C "$root" archive "$ref" ragged_attn tools | tar -x -C "$dir"
  echo "prepared $ref ($(git -C "$root" rev-parse --short "$ref")) in $dir"
  exit 0
fi
[ "$cmd" = run ] || { echo "host_ab.sh: unknown command $cmd (prepare or run)"; exit 2; }
[ -d "$dir" ] || { echo "host_ab.sh: $dir is missing: run 'host_ab.sh prepare $ref' on the CPU box"; exit 2; }
[ -f /tmp/devcache/env.sh ] && source /tmp/devcache/env.sh
out=${OUT:-/tmp}
for round in $(seq 1 "${3:-3}"); do
  for side in this "$ref"; do
    tree=$root
    [ "$side" = this ] || tree=$dir
    log=$out/host_ab_${side//\//_}_$round.log
    (cd "$tree" && PYTHONPATH=$tree python3 tools/host_overhead.py > "$log" 2>&1) || echo "host_ab.sh: $side round $round failed: $log"
    echo "== $side, round $round"
    grep -E "^\| (bare|Plan|ragged_attn)" "$log" || tail -3 "$log"
  done
done
