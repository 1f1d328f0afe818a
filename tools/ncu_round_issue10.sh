#!/bin/bash
# ncu (full section set, clocks left alone) on issue 10's rows, ours beside the peers, in one device
# call (after ../shared/device/README.md's call 1; call 2 carries [".devcache/b", ".devcache/sm90"]):
#   source .devcache/b/bootstrap.sh >/dev/null 2>&1; bash tools/ncu_round_issue10.sh
# Environment: NCU_ROWS ("row|impl,impl;row|impl" pairs for tools/ncu_issue10.py), NCU_SET (default
# full), NCU_SOURCE=1 (also each kernel's SASS with its per-instruction counters and stall samples,
# $OUT/ncu_<n>_sass.csv). Writes $OUT/ncu_<n>.txt (the details page of each row's report).
set -o pipefail
source /tmp/devcache/env.sh
export RAGGED_ATTN_SM90_PREBUILT=$PWD/.devcache/sm90 PYTHONPATH=$PWD:$PYTHONPATH PYTHONUNBUFFERED=1
ROWS=${NCU_ROWS:-"64x128 h32/8 d128|ours,cuDNN SDPA padded enable_gqa;16x256 h32/8 d128|ours,cuDNN SDPA padded enable_gqa"}
n=0
IFS=';' read -ra PAIRS <<< "$ROWS"
for pair in "${PAIRS[@]}"; do
  row=${pair%%|*}; IFS=',' read -ra IMPLS <<< "${pair#*|}"
  n=$((n + 1))
  timeout ${NCU_S:-200} ncu --clock-control none --profile-from-start off --set ${NCU_SET:-full} -f -o /tmp/ncu_$n \
    python3 tools/ncu_issue10.py "$row" "${IMPLS[@]}" >> $OUT/ncu_runs.log 2>&1
  grep -E "^profiled|Error|error" $OUT/ncu_runs.log | head -20
  ncu --import /tmp/ncu_$n.ncu-rep --page details --print-details all > $OUT/ncu_$n.txt 2>&1
  if [ -n "$NCU_SOURCE" ]; then
    ncu --import /tmp/ncu_$n.ncu-rep --page source --csv --print-source sass > $OUT/ncu_${n}_sass.csv 2>&1
    echo "sass: $(wc -l < $OUT/ncu_${n}_sass.csv) lines"
  fi
  echo "$row: $(grep -c 'Section: GPU Speed Of Light' $OUT/ncu_$n.txt) kernels"
done
