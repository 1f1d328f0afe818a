#!/bin/bash
# round 4: vLLM's mixed batch (page 16) beside FA3 / FA4; sweep 3000; sanitizers at page 16.
bash .devcache/c/bootstrap.sh >/dev/null 2>&1
source /tmp/devcache/env.sh
export PYTHONPATH=$PWD:$PYTHONPATH PYTHONUNBUFFERED=1
date -u
RAGGED_ATTN_SM90_PREBUILT=$PWD/.devcache/ship13 VLLM_BENCH_PARTS=1 BENCH_REPS=15 timeout 240 python3 tools/bench_vllm_mixed.py 16 > $OUT/r4_vllm.log 2>&1
date -u
tail -30 $OUT/r4_vllm.log
RAGGED_ATTN_SWEEP=3000 timeout 300 python3 -m pytest tests/gpu/test_sweep_gpu.py -q -rfEs -p no:cacheprovider 2>&1 | tail -5 | tee $OUT/r4_sweep.log
date -u
