#!/bin/bash
# Session 13 round 1: pack-rows rule, page_tma_small 64/16 at d128, page_tma 128 for d64/d96/d192.
source /tmp/devcache/env.sh
export PYTHONPATH=$PWD:$PYTHONPATH RAGGED_ATTN_SM90_PREBUILT=$PWD/.devcache/s13/main PAGED_BENCH_FA4=0
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv | tee $OUT/gpu.txt
date -u
LT=""  # longtail14 default
L64=$(python3 -c "print(','.join(['128'] * 64))")
(
for lens in 8192 "$LT" "$L64"; do
  echo "=== d128 lens=${lens:0:20}"
  PAGED_BENCH_LENS=$lens PAGED_BENCH_INTERLEAVED=12 RAGGED_ATTN_VARIANTS=t2box64,t2box16 timeout 150 python3 tools/bench_paged_sm90.py 2>&1 | grep -v Warning
done
) > $OUT/r1_box_small.log 2>&1
date -u
(
for d in 64 96 192; do for lens in 8192 "$LT"; do
  echo "=== d$d lens=${lens:0:20}"
  PAGED_BENCH_D=$d PAGED_BENCH_LENS=$lens PAGED_BENCH_INTERLEAVED=10 RAGGED_ATTN_VARIANTS=pt128 timeout 120 python3 tools/bench_paged_sm90.py 2>&1 | grep -v Warning
done; done
) > $OUT/r1_pt128_dims.log 2>&1
date -u
PACK_BENCH_ROUNDS=10 timeout 200 python3 tools/bench_pack_rows.py > $OUT/r1_pack_rows.log 2>&1
date -u
tail -n 4 $OUT/*.log
