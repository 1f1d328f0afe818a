#!/bin/bash
# round 3 (call b): other head dims' paged variants; the new pack-rows rule.
source /tmp/devcache/env.sh
export PYTHONPATH=$PWD:$PYTHONPATH RAGGED_ATTN_SM90_PREBUILT=$PWD/.devcache/s13/main PAGED_BENCH_FA4=0
LT=""
date -u
(
for lens in 8192 "$LT"; do
  echo "=== d64 lens=${lens:0:20}"
  PAGED_BENCH_D=64 PAGED_BENCH_LENS=$lens PAGED_BENCH_INTERLEAVED=10 RAGGED_ATTN_VARIANTS=pt128,d64t192,d64a,d64b timeout 120 python3 tools/bench_paged_sm90.py 2>&1 | grep -v Warning
  echo "=== d96 lens=${lens:0:20}"
  PAGED_BENCH_D=96 PAGED_BENCH_LENS=$lens PAGED_BENCH_INTERLEAVED=10 RAGGED_ATTN_VARIANTS=pt128,d96a timeout 100 python3 tools/bench_paged_sm90.py 2>&1 | grep -v Warning
  echo "=== d192 lens=${lens:0:20}"
  PAGED_BENCH_D=192 PAGED_BENCH_LENS=$lens PAGED_BENCH_INTERLEAVED=10 RAGGED_ATTN_VARIANTS=pt128,d192a timeout 100 python3 tools/bench_paged_sm90.py 2>&1 | grep -v Warning
done
) > $OUT/r3_dims.log 2>&1
date -u
PACK_BENCH_ROUNDS=10 timeout 150 python3 tools/bench_pack_rows.py > $OUT/r3_pack_rows.log 2>&1
date -u
grep -h -A16 "^interleaved" $OUT/r3_dims.log | grep -v "^|---"
tail -14 $OUT/r3_pack_rows.log
