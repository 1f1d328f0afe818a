#!/bin/bash
# round 5: sanitizers at page 16 (16-key boxes from four warps) and 64; paged GPU tests with every dim's new config.
source /tmp/devcache/env.sh
export PYTHONPATH=$PWD:$PYTHONPATH PYTHONUNBUFFERED=1
date -u
for dq in 128 64; do
  SANITIZE_DQK=$dq SANITIZE_PAGE=16 timeout 100 compute-sanitizer --tool racecheck python3 tools/sanitize_sm90.py 2 > $OUT/r5_race_d${dq}_p16.log 2>&1; echo "race d$dq rc=$?"; tail -3 $OUT/r5_race_d${dq}_p16.log
done
SANITIZE_DQK=128 SANITIZE_PAGE=16 timeout 80 compute-sanitizer --tool memcheck python3 tools/sanitize_sm90.py 2 > $OUT/r5_mem_d128_p16.log 2>&1; echo "mem rc=$?"; tail -3 $OUT/r5_mem_d128_p16.log
date -u
timeout 280 python3 -m pytest tests/gpu/test_paged_gpu.py -q -rfEs -p no:cacheprovider -n 8 2>&1 | tail -4 | tee $OUT/r5_paged.log
date -u
