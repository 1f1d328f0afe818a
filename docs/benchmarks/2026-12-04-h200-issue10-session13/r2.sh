#!/bin/bash
source /tmp/devcache/env.sh
export PYTHONPATH=$PWD:$PYTHONPATH RAGGED_ATTN_SM90_PREBUILT=$PWD/.devcache/s13/main PAGED_BENCH_FA4=0
LT=""
L64=$(python3 -c "print(','.join(['128'] * 64))")
date -u
(
for lens in 8192 "$LT" "$L64"; do
  echo "=== d128 lens=${lens:0:20}"
  PAGED_BENCH_LENS=$lens PAGED_BENCH_INTERLEAVED=12 RAGGED_ATTN_VARIANTS=t2box64,w4,s64w4,s16w4 timeout 150 python3 tools/bench_paged_sm90.py 2>&1 | grep -v Warning
done
) > $OUT/r2_box_warps.log 2>&1
date -u
(
for lens in 8192 "$LT"; do
  echo "=== d64 lens=${lens:0:20}"
  PAGED_BENCH_D=64 PAGED_BENCH_LENS=$lens PAGED_BENCH_INTERLEAVED=10 RAGGED_ATTN_VARIANTS=pt128,d64t192g,d64t192 timeout 120 python3 tools/bench_paged_sm90.py 2>&1 | grep -v Warning
done
) > $OUT/r2_d64.log 2>&1
date -u
grep -h -A14 "^interleaved" $OUT/r2_*.log | grep -v "^|---"
