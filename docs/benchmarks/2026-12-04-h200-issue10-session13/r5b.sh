#!/bin/bash
source /tmp/devcache/env.sh
export PYTHONPATH=$PWD:$PYTHONPATH PYTHONUNBUFFERED=1
date -u
RAGGED_ATTN_SWEEP=3000 timeout 420 python3 -m pytest tests/gpu/test_sweep_gpu.py -q -rfEs -p no:cacheprovider 2>&1 | tail -4 | tee $OUT/r5_sweep.log
date -u
