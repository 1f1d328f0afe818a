#!/bin/bash
# One device round for the sm90 kernel: GPU tests (kernel + public API), then the speed reading.
# Logs under $OUT. Kernels of the kernel tests come prebuilt from .devcache/sm90
# (tools/prebuild_sm90.py, rebuilt from the current sources); the API tests compile their own.
set -o pipefail
export RAGGED_ATTN_SM90_PREBUILT=$PWD/.devcache/sm90 PYTHONPATH=$PWD:$PYTHONPATH PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv
timeout ${TEST_S:-330} python3 -m pytest ${TESTS:-tests/gpu/test_kernel_sm90.py} -q -rfEs -p no:cacheprovider \
  -n ${WORKERS:-4} --timeout 120 -o timeout_method=thread ${PYTEST_K:+-k "$PYTEST_K"} \
  --junitxml=$OUT/gpu.xml 2>&1 | tee $OUT/gpu.log | grep -vE "^tests/gpu.*PASSED" | tail -${TAIL:-60}
[ -n "$NO_BENCH" ] || timeout ${BENCH_S:-150} python3 tools/bench_sm90.py ${BENCH_ARGS} 2>&1 | tee $OUT/bench.log
