#!/bin/bash
# Paged K/V variants timed beside this tree's paged class, interleaved (tools/bench_paged_sm90.py),
# in one device call. Two halves:
#   bash tools/paged_variants_round.sh build NAME=FIELD=VALUE[,FIELD=VALUE] ...   (CPU box, ~15 s each)
#     builds this tree's ragged and paged classes of every D in $DIMS (default 128) into
#     .devcache/pv/ and each variant's paged class into .devcache/pv/NAME/ (TileConfig fields
#     replaced, tools/prebuild_sm90.py --config), e.g.
#     bash tools/paged_variants_round.sh build cross=page_box_crossing=1 w1=page_box_warps=1
#   bash tools/paged_variants_round.sh run NAME ...        (device, after ../shared/device/README.md's
#     call 1; call 2 carries [".devcache/b", ".devcache/pv"] and runs
#     `source .devcache/b/bootstrap.sh >/dev/null 2>&1; bash tools/paged_variants_round.sh run cross w1`)
#     times page 16 / 64 / 128 for 1 x 8192, longtail14 and 64 x 128 ($BATCHES: any of long, tail,
#     short) at every D in $DIMS, ROUNDS interleaved rounds (default 12); logs $OUT/pv_d<D>.log and
#     prints the interleaved tables. The bench's "max abs diff vs ragged" column is the first
#     correctness check of a variant. The bench's own environment passes through (e.g.
#     PAGED_BENCH_IN_ORDER=16 PAGED_BENCH_WINDOW=16:64 PAGED_BENCH_SPREAD=16:64 for the pool's
#     locality, PAGED_BENCH_CUDNN=0); PAGED_BENCH_FA4=1 times FA4 too (off by default: its JIT
#     compiles take minutes).
# Written after session 13 (2026-12-04), whose variant builds were lost with the session's
# ignored .devcache: keep the commands here, not in .devcache.
set -o pipefail
mode=$1; shift
DIMS=${DIMS:-128}
cls() { case $1 in 64) echo d64x64;; 96) echo d96x96;; 128) echo d128x128;; 192) echo d192x128;; *) echo "unknown D $1" >&2; exit 2;; esac; }
if [ "$mode" = build ]; then
  export CUTE_DSL_ARCH=sm_90a RAGGED_ATTN_DISK_CACHE=0
  for d in $DIMS; do
    c=$(cls $d)
    python tools/prebuild_sm90.py .devcache/pv --no-variants --jobs 2 \
      --classes sm_90a-$c-bf16-bf16-causal-lse-ragged,sm_90a-$c-bf16-bf16-causal-lse-paged || exit 1
    for v in "$@"; do
      python tools/prebuild_sm90.py ".devcache/pv/${v%%=*}" --no-variants --jobs 1 \
        --classes sm_90a-$c-bf16-bf16-causal-lse-paged --config "${v#*=}" || exit 1
    done
  done
  du -sh .devcache/pv
elif [ "$mode" = run ]; then
  source /tmp/devcache/env.sh
  export PYTHONPATH=$PWD:$PYTHONPATH RAGGED_ATTN_SM90_PREBUILT=$PWD/.devcache/pv PAGED_BENCH_FA4=${PAGED_BENCH_FA4:-0}
  variants=$(IFS=,; echo "$*")
  short=$(python3 -c "print(','.join(['128'] * 64))")
  for d in $DIMS; do
    for b in ${BATCHES:-long tail short}; do
      case $b in long) lens=8192;; tail) lens="";; short) lens=$short;; esac
      echo "=== d$d $b"
      PAGED_BENCH_D=$d PAGED_BENCH_LENS=$lens PAGED_BENCH_INTERLEAVED=${ROUNDS:-12} RAGGED_ATTN_VARIANTS=$variants \
        timeout ${BENCH_S:-150} python3 tools/bench_paged_sm90.py 2>&1 | grep -v Warning
    done > $OUT/pv_d$d.log 2>&1
    grep -h -A40 "^interleaved" $OUT/pv_d$d.log | grep "^| ours"
    grep -h "FAILED" $OUT/pv_d$d.log
  done
else
  echo "usage: bash tools/paged_variants_round.sh build NAME=FIELDS ... | run NAME ..." >&2
  exit 2
fi
