#!/bin/bash
# round 3 (call c, warm): the shipped tree's GPU tests for paged and pack rows (kernels compiled here).
source /tmp/devcache/env.sh
export PYTHONPATH=$PWD:$PYTHONPATH PYTHONUNBUFFERED=1
date -u
timeout 400 python3 -m pytest tests/gpu/test_paged_gpu.py tests/gpu/test_pack_rows_gpu.py -q -rfEs -p no:cacheprovider -n 8 2>&1 | tail -15 | tee $OUT/r3c_tests.log
date -u
