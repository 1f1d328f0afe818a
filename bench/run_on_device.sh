#!/usr/bin/env bash
# Benchmarks on the GPU machine, after the device bootstrap (../shared/device/README.md):
#   call 1 (carry .devcache/a):  bash .devcache/a/bootstrap.sh
#   call 2 (carry .devcache/b):  source .devcache/b/bootstrap.sh && bash bench/run_on_device.sh SUITE...
#   warm machine:                source /tmp/devcache/env.sh && bash bench/run_on_device.sh SUITE...
# Writes under $OUT, flat (at most 8 files come back): <suite>.json per suite, report.md,
# tflops.png, host_us.png, compiles.png and bench.log. Keep each suite under ~6 minutes and a call
# under 10. Back here, several calls' results become one report:
#   python -m ragged_attn bench merge DIR1 DIR2 ... --out docs/benchmarks/<date>-h200
set -uo pipefail
cd "$(dirname "$0")/.."
: "${OUT:?OUT is set on the device machine}"
[ $# -gt 0 ] || set -- dense-long serving
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv \
    2>&1 | tee "$OUT/bench.log"
python3 -m ragged_attn.bench --suite "$@" --out "$OUT" ${BENCH_ARGS:-} 2>&1 | tee -a "$OUT/bench.log"
rc=${PIPESTATUS[0]}
ls -la "$OUT" | tee -a "$OUT/bench.log"
exit "$rc"
