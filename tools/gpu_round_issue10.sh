#!/bin/bash
# One device call for the sm90 kernel (after ../shared/device/README.md's call 1, carrying
# .devcache/a): correctness gate, then the speed table, logs under $OUT. Learned on 2026-12-02: every
# cold start costs ~100 s of device budget (two staging calls plus the idle tail), so put the whole
# round into call 2 and keep the variants prebuilt on the CPU box:
#   CUTE_DSL_ARCH=sm_90a python tools/prebuild_sm90.py .devcache/sm90 --no-variants   # test classes
#   (and any variant builds into .devcache/sm90/<variant>/, see tools/bench_issue10.py: another git
#   ref with tools/build_variant.sh, or this tree's classes with TileConfig fields replaced:
#   python tools/prebuild_sm90.py .devcache/sm90/l2kv --classes C1,C2 --config l2_kv_head_groups=1)
# Learned on 2026-12-03: refusals ("no device machine could be started") cost 15 s each and a
# cold start can be 10-40 minutes away; the FA3 wheel (.devcache/c) and any extra folder can ride
# a first call of their own (c before a works: its wheel installs with b's).
# Call 2: carry [".devcache/b", ".devcache/sm90"], command
#   source .devcache/b/bootstrap.sh >/dev/null 2>&1; bash tools/gpu_round_issue10.sh
# Environment: SWEEP (problems of the sweep gate, default 1000; 0 skips it), TESTS (default
# tests/gpu), RAGGED_ATTN_VARIANTS (variants timed beside ours), ROWS (bench row substrings),
# NO_BENCH=1, TEST_S / BENCH_S (time limits; one call may run 600 s at most), PAGED=1 (also
# tools/bench_paged_sm90.py: $OUT/paged.log), SERVING=1 (also `python -m ragged_attn bench --suite
# serving`: $OUT/serving/, SERVING_S its limit; the peers need .devcache/c for FA3).
set -o pipefail
source /tmp/devcache/env.sh
export RAGGED_ATTN_SM90_PREBUILT=$PWD/.devcache/sm90 PYTHONPATH=$PWD:$PYTHONPATH PYTHONUNBUFFERED=1
export RAGGED_ATTN_SWEEP=${SWEEP:-1000}
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
IGNORE=""
[ "${SWEEP:-1000}" = "0" ] && IGNORE="--ignore=tests/gpu/test_sweep_gpu.py"
timeout ${TEST_S:-360} python3 -m pytest ${TESTS:-tests/gpu} -m gpu -q -rfEs -p no:cacheprovider -n 14 \
  --timeout 250 --tb=line $IGNORE --junitxml=$OUT/gpu.xml > $OUT/gpu.log 2>&1
grep -E "^(FAILED|ERROR)|^E   .*(Error|case)|passed|failed" $OUT/gpu.log | grep -v DEBUG | tail -${TAIL:-40}
[ -n "$NO_BENCH" ] || timeout ${BENCH_S:-180} python3 tools/bench_issue10.py ${ROWS} 2>&1 | tee $OUT/bench.log | grep "^|"
[ -z "$PAGED" ] || timeout ${PAGED_S:-100} python3 tools/bench_paged_sm90.py 2>&1 | tee $OUT/paged.log | grep "^|"
[ -z "$SERVING" ] || timeout ${SERVING_S:-240} python3 -m ragged_attn bench --suite serving --no-plots \
  --out $OUT/serving 2>&1 | tail -${SERVING_TAIL:-60}
