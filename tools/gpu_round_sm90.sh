#!/bin/bash
# One device round for the sm90 kernel: GPU tests, then the speed reading. Logs under $OUT.
set -o pipefail
export RAGGED_ATTN_SM90_PREBUILT=$PWD/.devcache/sm90 PYTHONPATH=$PWD:$PYTHONPATH PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv
timeout ${TEST_S:-330} python3 -m pytest tests/gpu/test_kernel_sm90.py -q -rfEs -p no:cacheprovider \
  --timeout 90 -o timeout_method=thread ${PYTEST_K:+-k "$PYTEST_K"} --junitxml=$OUT/gpu.xml 2>&1 \
  | tee $OUT/gpu.log | grep -vE "^tests/gpu.*PASSED" | tail -${TAIL:-60}
[ -n "$NO_BENCH" ] || timeout ${BENCH_S:-150} python3 tools/bench_sm90.py 2>&1 | tee $OUT/bench.log
