#!/bin/bash
# Issue 10's next device round, one mode per device call (each fits the 600 s a call may run), in
# the order to make them; written in session 18 (2026-12-05, no GPU lent), from what sessions 13-17
# learned about device time (cold starts ~90 s, refusals 15-90 s each, a machine goes back 30 s
# after a call: make the calls back to back).
#
#   call  carry                                       command
#   1     [".devcache/a"]                             bash .devcache/a/bootstrap.sh
#   2     [".devcache/b", ".devcache/pv"]             source .devcache/b/bootstrap.sh >/dev/null 2>&1; bash tools/issue10_round.sh paged
#   3     [".devcache/vl4", ".devcache/ab"]           bash tools/issue10_round.sh tests
#   3b    []                                          bash tools/issue10_round.sh tests_l2h   (if l2h wins)
#   4     [".devcache/sweepcache"]                    bash tools/issue10_round.sh sweep
#   5     [".devcache/c"]                             bash .devcache/c/bootstrap.sh; bash tools/issue10_round.sh closing issue10
#   6     []                                          bash tools/issue10_round.sh closing serving
#   7-8   []                                          the same two again (the second run of the closing table)
#   8b    [".devcache/pv"]                            bash tools/issue10_round.sh closing_paged   (FA4 JIT: ~2 min a batch)
#   9     [".devcache/pv"]                            bash tools/issue10_round.sh ncu
#   10    []                                          bash tools/issue10_round.sh sanitize   (after 4, same machine)
#   11    [".devcache/pv"]                            bash tools/issue10_round.sh switch   (session 19: the paged kernel's cost after another kernel)
#   12    [".devcache/d192"]                          bash tools/issue10_round.sh d192   (session 19: DeepSeek's rows on H100, variants)
#   13    [".devcache/b", ".devcache/pv"]             source .devcache/b/bootstrap.sh >/dev/null 2>&1; PAGED_BENCH_CUDNN=0 ROUNDS=5 BENCH_S=80 TESTS_S=120 SPLIT_S=90 bash tools/issue10_round.sh variant wr paged_warp_release=True
#         (.devcache/pv holding only main's d128 / d64 objects and wr's: 1.6 MiB, built by the last line below, ~50 s)
#         Session 22 (H100) ran call 13 in 141 s, then calls 5-8 (closing issue10 53 s, serving 69 s, both again 95 s).
#   14    [".devcache/pv"]                            bash tools/issue10_round.sh switch_source   (session 22: cold code of each kind after a GEMM)
#         Session 23 (H100) ran the sweep (3001 passed, 76 s; its cache built here in 414 s), sanitize (clean),
#         tests/gpu/test_kernel_sm90.py with .devcache/sm90 (tools/prebuild_sm90.py --no-variants, 33 classes,
#         ~5 min here; 338 passed, 21 s) and switch_source (paged 327 / ragged 229 code blocks executed).
#         Still owed: calls 5-8 on an H200. The b bootstrap (55 MiB) and the sweep cache (31 MiB) do not fit
#         one call's 64 MiB: carry them in calls of their own.
#   15    [".devcache/b", ".devcache/d192x"]           source .devcache/b/bootstrap.sh >/dev/null 2>&1; bash tools/issue10_round.sh ncu_rows
#         Session 24 (H100): DRAM bytes of DeepSeek's short rows beside cuDNN (52 s) -> TileConfig.l2_group_max;
#         ncu_paged_rows / ncu_paged_source ([".devcache/pv"], 53 / 88 s: the paged class's steady state),
#         closing_paged with BATCHES="tail short long" ROUNDS=8 BENCH_S=140 (81 s: FA4's JIT is seconds, not
#         minutes), the sweep (85 s), GPU tests (162 + 85 s) and calls 5-8 (43 + 56 + 74 s).
#         .devcache/d192x: this tree's d128 / d192 / d64 causal LSE ragged objects and variant folders
#         (tools/prebuild_sm90.py --config l2_group_max=N).
#         Session 25 (H100; six start attempts refused, ~90-180 s of budget each: try a kind at most every
#         ~10 min): calls 1-2, then the sweep and the kernel GPU tests in ONE call (carry
#         [".devcache/sweepcache", ".devcache/sm90"]: 36 MiB, 283 s; 3001 + 770 passed), the adapter GPU
#         tests (85 s) and tools/bench_issue10.py d256 nomask with .devcache/nx (store_p; 33 s).
#         Next: calls 5-8 (+ `closing serving-full`, the suite without a mask, last run 2026-11-30),
#         call 13's paged_warp_release against the page-128 loop (.devcache/pv/wr is current: the
#         d128 paged object did not change with store_p), an H200 table when one comes.
#         Local caches at the session's end (6d527ce): .devcache/sweepcache at this digest (ready for the
#         sweep unless a kernel source changes), .devcache/sm90 (33 classes, current objects),
#         .devcache/nx (d256 / d128-no-mask objects: root current, old/ = 0be341d's d256, pp/, n176/).
#         Session 26 (H100; five start attempts refused, 15-180 s of budget each): calls 1-2 with
#         [".devcache/b", ".devcache/pv", ".devcache/q1"] (paged_warp_release: no change; longtail14 with its
#         lengths rounded up to multiples of 128 through PAGED_BENCH_LENS: the crossing blocks are ~1% of
#         the paged gap; q_stages 1 and d96's O conversion through tools/bench_issue10.py; 69 s), the sweep
#         and the kernel GPU tests in one call (278 s), then calls 5-8 with `closing serving-full` added
#         (47, 130 and 215 s: the second runs of all three suites and the adapter GPU tests in one call).
#         Next: serving-full's rows under 1.0 (d128 without a mask: 4 x 512 0.96-0.97 of cuDNN's padded
#         SDPA, 1 x 16384 0.96-0.99 of FA4): tools/bench_issue10.py "d128 nomask" with ISSUE10_LSE=0 (the
#         suites time ours' nolse class and FA4 without LSE) beside the no-mask variants in .devcache/nm
#         (tf0 turn_first_gemm=0, pp0 pingpong=0, eqr0 early_q_release=0, wge0 wg_epilogue=0, tos0
#         tma_o_store=0; lse and nolse objects, built at 0a9449e), then ncu of 4 x 512 beside cuDNN
#         and of 1 x 16384 beside FA4 (mode ncu_nomask, carry [".devcache/b", ".devcache/nm"]); an H200
#         table when one comes. First in line: eqr0 (early_q_release off), whose d128 no-mask LSE
#         interior loop takes FA4's P V wait
#         placement (docs/benchmarks/2026-12-07-h100-issue10-session26 section 6; the nolse class the
#         suites time has it already, so serving-full's 1 x 16384 gap wants ncu beside FA4): e.g. call 2
#         with [".devcache/b", ".devcache/nm"]:
#         ISSUE10_LSE=0 RAGGED_ATTN_SM90_PREBUILT=$PWD/.devcache/nm RAGGED_ATTN_VARIANTS=eqr0,tf0,pp0,wge0,tos0
#         BENCH_REPS=20 python3 tools/bench_issue10.py "d128 nomask" (and again with ISSUE10_LSE=1).
#         Session 27 (H100; five start attempts refused, ~600 s): eqr0 taken for the ragged d128
#         no-mask LSE class (two runs; the nolse class keeps early Q release); ISSUE10_ROWS wave
#         sweep (B x 512 no mask beside cuDNN: ours 3.4 us more fixed cost a launch, 6% less per wave);
#         ncu_nomask; the trace build (tools/trace_timeline.py, carry [".devcache/b", ".devcache/tk"]:
#         RAGGED_ATTN_SM90_PREBUILT=$PWD/.devcache/tk python3 tools/trace_timeline.py 4x512:32/8:128:nomask)
#         shows the MMA warpgroups waiting 0.6-1.9 us for each multi-block tile's Q.
#         Next (call 2: source .devcache/b/bootstrap.sh >/dev/null 2>&1; bash tools/issue10_round.sh qahead,
#         carry [".devcache/b", ".devcache/tk"]): TileConfig.ticket_early and q_ahead (docs/benchmarks/2026-12-07-h100-issue10-session27
#         section 4; objects in .devcache/tk: root = main's d128 none / causal nolse, tk1 / tk2
#         ticket_early 1 / 2, qa / qa2 q_ahead with ticket_early 1 / 2, qa32 qa with producer_regs 32;
#         trace/, t1/trace/, tqa/trace/ the trace builds of main, tk1, qa). Call 2 with
#         [".devcache/b", ".devcache/tk"]: ISSUE10_LSE=0 ISSUE10_PEERS=0 RAGGED_ATTN_SM90_PREBUILT=$PWD/.devcache/tk
#         RAGGED_ATTN_VARIANTS=tk1,tk2,qa,qa2,qa32 ISSUE10_ROWS=33x512:32/8:128:nomask BENCH_REPS=20
#         python3 tools/bench_issue10.py "h32/8 d128"; then for p in tk tk/t1 tk/tqa:
#         RAGGED_ATTN_SM90_PREBUILT=$PWD/.devcache/$p python3 tools/trace_timeline.py 4x512:32/8:128:nomask
#         (and 64x128:32/8:128:causal). A winner's GPU tests: RAGGED_ATTN_TEST_TILE_CONFIG=ticket_early=1,q_ahead=True
#         on tests/gpu/test_kernel_sm90.py test_batch_order_gpu.py test_pack_rows_gpu.py test_split_kv_gpu.py
#         (compiled there: no prebuilt objects), then turn it on in tile_config and run the sweep.
#         Session 28 (H200 after H100 / H200 refusals; of 1,800 s ~500 went to refusals and ~250 were
#         left, too little to start a machine again): qahead
#         (73 s; split as call 2 [".devcache/b"] then call 3 [".devcache/tk"]: b + tk + the tree passed
#         64 MiB), the GPU tests with ticket_early=1,q_ahead=True compiled there (682 passed, 433 s),
#         closing issue10 + serving-full with FA3 (176 s), qahead's bench again + closing serving (105 s).
#         Taken: qa2 (ticket_early 2 + q_ahead) in the d128 no-mask nolse class. Next (calls 1-2 with
#         [".devcache/a"] then [".devcache/b"], then `source /tmp/devcache/env.sh; export
#         PYTHONPATH=$PWD:$PYTHONPATH; bash tools/issue10_round.sh next28` with [".devcache/sweepcache",
#         ".devcache/sm90"] (the sweep at the qa2 config, the cache at its digest, and the kernel GPU
#         tests), then `... next28b` with [".devcache/q28", ".devcache/tk"] (lse_qahead, qa_from:
#         branch q-ahead-from's variants, clocks: is FA4's 1-2% on the long no-mask rows a
#         power-limited clock?, causal_trace); then the closing suites with [".devcache/c"].
#         Session 29 (no GPU lent): the tail split built (TileConfig.tail_split, off everywhere).
#         Its call, after next28: `source /tmp/devcache/env.sh; export PYTHONPATH=$PWD:$PYTHONPATH;
#         bash tools/issue10_round.sh tail` with [".devcache/tail"] (GPU tests, then its variant on
#         the long no-mask rows beside main and FA4; ~250 s). .devcache/sweepcache is rebuilt at this
#         session's kernel digest (c3fc9618); .devcache/sm90's objects are unchanged (every default
#         object is byte-identical to session 28's).
#
# Session 19 (H100) timings: paged 59 s, sweep 105 s, each closing suite ~90 s, sanitize 136 s; a
# machine goes back 30 s after a call (the next call then pays a fresh start and calls 1-2 again).
#
# Modes (logs under $OUT, short tables printed last):
#   paged    d128 paged / ragged at page 16 | 64 | 128 on 1 x 8192, longtail14, 64 x 128
#            (tools/paged_variants_round.sh) with the variants ck (page_crossing_k_box), cross
#            (page_box_crossing), l2h (l2_hints 1) and l2n (l2_hints 2), and the pool's locality: page 16 in order, shuffled
#            within 64-page windows (2 MiB), drawn from a pool 64 times larger; cuDNN's paged SDPA on
#            the same pools (is page 16's shuffled-pool loss the memory system's, whoever reads it?)
#   tests    vLLM's mixed batch, main against the l2h tree (tools/ab_tree.sh of a copy with l2_hints=1
#            on the d128 classes), decode rows and chunks apart too; then page_crossing_k_box's GPU
#            tests (NaN pools crossing len_k at pages 128 and 256)
#   tests_l2h  l2_hints 1's GPU tests (d128 classes, the batch order's and row packing's files)
#   sweep    the 3,000-problem sweep from the disk cache tools/sweep_cache.py built here
#   closing  `python -m ragged_attn bench --suite NAME` (issue10 or serving: ours, FA3, FA4, cuDNN
#            THD, cuDNN padded SDPA, torch varlen), $OUT/NAME/ (report.md, NAME.json)
#   closing_paged  the closing table's paged rows: main's d128 kernel, FA4 and cuDNN, page 16 / 64 /
#            128 (and 16 in order) on 1 x 8192, longtail14, 64 x 128
#   ncu_nomask  serving-full's d128 no-mask rows under ncu (sections), ours' nolse class beside cuDNN's
#            padded SDPA (4 x 512) and FA4 (1 x 16384); logs $OUT/ncu_nomask_*.log
#   qahead   session 27's producer variants (ticket_early, q_ahead; .devcache/tk) beside main on the
#            h32/8 d128 rows and 33 x 512, then the trace builds of main / tk1 / qa on 4 x 512 and 64 x 128;
#            logs $OUT/qahead_bench.log, $OUT/qahead_trace.log
#   next28   the sweep and the kernel GPU tests at the qa2 config (session 28's next round, call A)
#   tail     the tail split's GPU tests and its variant beside main and FA4 on the long no-mask rows
#            (session 29; carry [".devcache/tail"])
#   next28b  lse_qahead, qa_from, clocks and causal_trace (call B)
#   causal_trace  the trace builds of main and qa (.devcache/tk) on 1 x 16384 and 4 x 512 causal
#   qa_from  q_ahead from key block 0 / 1 (branch q-ahead-from) beside main's qa2 ($OUT/qa_from.log)
#   lse_qahead  the d128 no-mask LSE class with q_ahead (ticket_early 1 / 2) beside main ($OUT/lse_qahead.log)
#   clocks   SM clock and board power per system on the long no-mask rows (tools/probe_clocks.py)
#   ncu      page 16 in order / shuffled / windowed / spread, and page 128, under ncu on 64 x 128
#            (tools/ncu_paged_driver.py; DRAM bytes, L2 hit rate, duration)
#   switch   tools/probe_kernel_switch.py (each launch after a GEMM, after itself, after the other
#            kind) on d128 64 x 128, longtail14, 1 x 8192 and d64 64 x 128 at page 16, and d128 64 x
#            128 at page 128 (one box per stage) and 5 (the gather, no box), then ncu with
#            application replay on `tools/probe_kernel_switch.py --ncu` (duration and the warps' "no
#            instruction", long-scoreboard and barrier stalls of the paged / ragged launches after a
#            GEMM and after themselves: are they instruction fetches?)
#   variant NAME FIELDS  a paged variant built into .devcache/pv/NAME: the switch probe beside main
#            (PROBE_VARIANT), the interleaved paged / ragged rounds, its GPU tests with FIELDS (session
#            20: `variant wr paged_warp_release=True`; carry .devcache/b and the pv objects file by
#            file: the whole .devcache/pv with .devcache/b passes the 64 MiB carry limit)
#   d192     DeepSeek's rows (tools/bench_issue10.py h128/128) with d192 variants: n64s4 (tile_n 64,
#            4 stages; spills 76 bytes), n80s3 (tile_n 80, 3 stages), pp (ping-pong), n112 (tile_n 112)
#   sanitize compute-sanitizer racecheck and memcheck over d128 problems (tools/sanitize_sm90.py:
#            the d128 classes' batch order and stream mix live in producer warp 0's prologue), to
#            their summary lines (session 17's racecheck stopped at its 80 s limit before it)
# Objects (built on the CPU box, ignored by git; rebuild after any edit of ragged_attn/kernels/):
#   DIMS=128 bash tools/paged_variants_round.sh build ck=page_crossing_k_box=1 cross=page_box_crossing=1
#   for v in l2h=1 l2n=2; do CUTE_DSL_ARCH=sm_90a RAGGED_ATTN_DISK_CACHE=0 python tools/prebuild_sm90.py \
#     .devcache/pv/${v%=*} --no-variants --jobs 2 --config l2_hints=${v#*=} --classes \
#     sm_90a-d128x128-bf16-bf16-causal-lse-ragged,sm_90a-d128x128-bf16-bf16-causal-lse-paged; done
#   CUTE_DSL_ARCH=sm_90a python tools/prebuild_sm90.py .devcache/vl4 --no-variants --jobs 2 --classes \
#     sm_90a-d128x128-bf16-bf16-causal-{nolse,lse}-{paged,ragged}   (comma-separated)
#   bash tools/ab_tree.sh COPY l2h sm_90a-d128x128-bf16-bf16-causal-nolse-paged,sm_90a-d128x128-bf16-bf16-causal-nolse-ragged
#     (COPY: a copy of the tree with l2_hints=1 in tile_config's d128 return)
#   CUTE_DSL_ARCH=sm_90a python tools/sweep_cache.py .devcache/sweepcache --size 3000 --jobs 2
#   for v in "" n64s4:tile_n=64,num_stages=4 n80s3:tile_n=80,num_stages=3 pp:pingpong=1 n112:tile_n=112; do
#     CUTE_DSL_ARCH=sm_90a RAGGED_ATTN_DISK_CACHE=0 python tools/prebuild_sm90.py .devcache/d192${v:+/${v%%:*}} \
#     --no-variants --jobs 1 --classes sm_90a-d192x128-bf16-bf16-causal-lse-ragged ${v:+--config ${v#*:}}; done
#   DIMS="128 64" bash tools/paged_variants_round.sh build wr=paged_warp_release=1
set -o pipefail
USAGE="usage: issue10_round.sh paged|tests|tests_l2h|switch|switch_source|variant NAME FIELDS|d192|sweep|closing SUITE|closing_paged|ncu|ncu_rows|ncu_paged_rows|ncu_paged_source|sanitize|qahead|ncu_nomask|next28|next28b|lse_qahead|qa_from|clocks|causal_trace|tail"
mode=${1:?$USAGE}
source /tmp/devcache/env.sh
export PYTHONPATH=$PWD:$PYTHONPATH PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
short=$(python3 -c "print(','.join(['128'] * 64))")  # the 64 x 128 batch's lengths (PAGED_BENCH_LENS)
# probe_round TIMEOUT STOP "D PAGE LENS"...: tools/probe_kernel_switch.py on each config (main's objects in
# .devcache/pv; PROBE_VARIANT passes through), each run cut at TIMEOUT s; STOP 1: a run cut there
# (a hang?) ends the round with status 1
probe_round() {
  local limit=$1 stop=$2 cfg rc
  shift 2
  for cfg in "$@"; do
    set -- $cfg
    echo "=== d$1 page $2 ${3:0:12}"
    PAGED_BENCH_D=$1 PROBE_PAGE=$2 PAGED_BENCH_LENS=$3 BENCH_REPS=16 RAGGED_ATTN_SM90_PREBUILT=$PWD/.devcache/pv \
      timeout $limit python3 tools/probe_kernel_switch.py > $OUT/probe.log 2>&1
    rc=$?; grep -v Warn $OUT/probe.log | tail -${PROBE_TAIL:-26}
    if [ $rc = 124 ] && [ $stop = 1 ]; then echo "probe timed out (a hang?): stopping"; return 1; fi
  done
}
case $mode in
paged)
  DIMS=128 ROUNDS=${ROUNDS:-8} BENCH_S=${BENCH_S:-150} PAGED_BENCH_IN_ORDER=16 PAGED_BENCH_WINDOW=16:64 \
    PAGED_BENCH_SPREAD=16:64 bash tools/paged_variants_round.sh run ${VARIANTS:-ck cross l2h l2n}
  grep -h -A80 "^interleaved" $OUT/pv_d128.log | grep -E "^\| (cuDNN|FA4)"
  ;;
tests)
  # vLLM's batch first (what l2_hints is for), then page_crossing_k_box's GPU tests
  RAGGED_ATTN_SM90_PREBUILT=$PWD/.devcache/vl4 RAGGED_ATTN_AB_TREES=l2h=$PWD/.devcache/ab/l2h VLLM_BENCH_FA4=0 \
    VLLM_BENCH_PARTS=1 BENCH_REPS=15 VLLM_BENCH_SPLITS= timeout 200 python3 tools/bench_vllm_mixed.py 16 \
    > $OUT/vllm_l2h.log 2>&1
  grep "^|" $OUT/vllm_l2h.log | tail -30
  RAGGED_ATTN_TEST_TILE_CONFIG=page_crossing_k_box=True timeout 200 python3 -m pytest tests/gpu/test_paged_gpu.py \
    -q -n 8 -p no:cacheprovider > $OUT/tests_ck.log 2>&1
  tail -3 $OUT/tests_ck.log
  ;;
tests_l2h)
  # l2_hints 1's GPU tests (every class compiles on the device with the override: its own call)
  RAGGED_ATTN_TEST_TILE_CONFIG=l2_hints=1 timeout 540 python3 -m pytest tests/gpu/test_paged_gpu.py \
    tests/gpu/test_kernel_sm90.py tests/gpu/test_batch_order_gpu.py tests/gpu/test_pack_rows_gpu.py -q -n 8 \
    -p no:cacheprovider -k "d128 or batch_order or pack_rows" > $OUT/tests_l2h.log 2>&1
  tail -3 $OUT/tests_l2h.log
  ;;
sweep)
  rm -rf /tmp/sweepcache && cp -r .devcache/sweepcache /tmp/sweepcache && chmod -R go-w /tmp/sweepcache
  [ -d /tmp/sweepcache/uid$(id -u) ] || mv /tmp/sweepcache/uid* /tmp/sweepcache/uid$(id -u)
  RAGGED_ATTN_CACHE_DIR=/tmp/sweepcache RAGGED_ATTN_SWEEP=${SWEEP:-3000} timeout ${SWEEP_S:-560} \
    python3 -m pytest tests/gpu/test_sweep_gpu.py -q -n 8 -p no:cacheprovider -rfEs > $OUT/sweep.log 2>&1
  grep -E "passed|failed|FAILED|ERROR" $OUT/sweep.log | tail -20
  ;;
closing)
  suite=${2:?closing needs a suite: issue10 or serving}
  timeout ${CLOSING_S:-560} python3 -m ragged_attn bench --suite $suite --no-plots --out $OUT/$suite 2>&1 \
    | tail -${CLOSING_TAIL:-60}
  ;;
closing_paged)
  # the paged rows of the closing table: main's d128 kernel beside FA4 and cuDNN (each against its
  # own ragged row too), page 16 / 64 / 128, shuffled pools and page 16 in order
  for b in ${BATCHES:-long tail short}; do
    case $b in long) lens=8192;; tail) lens="";; short) lens=$short;; *) echo "closing_paged: unknown batch $b" >&2; exit 2;; esac
    echo "=== d128 $b"
    PAGED_BENCH_LENS=$lens PAGED_BENCH_FA4=1 PAGED_BENCH_IN_ORDER=16 PAGED_BENCH_INTERLEAVED=${ROUNDS:-12} \
      RAGGED_ATTN_SM90_PREBUILT=$PWD/.devcache/pv timeout ${BENCH_S:-180} python3 tools/bench_paged_sm90.py 2>&1 \
      | grep -v Warning
  done > $OUT/closing_paged.log 2>&1
  grep -E "^=== |^\| (ours|FA4|cuDNN)" $OUT/closing_paged.log | grep -v "GPU ms" | tail -60
  ;;
ncu)
  for pool in "16 0 0 1" "16 1 0 1" "16 0 64 1" "16 0 0 64" "64 0 0 1" "128 0 0 1"; do
    set -- $pool
    NCU_PAGE=$1 NCU_IN_ORDER=$2 NCU_WINDOW=$3 NCU_SPREAD=$4 PAGED_BENCH_LENS=$short RAGGED_ATTN_SM90_PREBUILT=$PWD/.devcache/pv \
      timeout 90 ncu --clock-control none --cache-control none -k regex:RaggedForwardSm90 --launch-skip 1 --launch-count 1 \
      --metrics dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct,gpu__time_duration.sum \
      python3 tools/ncu_paged_driver.py paged > $OUT/ncu_p$1_o$2_w$3_s$4.log 2>&1
    echo "page $1 in_order $2 window $3 spread $4:"; grep -E "dram__|lts__|gpu__time" $OUT/ncu_p$1_o$2_w$3_s$4.log
  done
  ;;
ncu_nomask)
  # Session 26: serving-full's d128 no-mask rows under 1.0, ours' nolse class (as the suites call it)
  # beside the peer that wins each: 4 x 512 beside cuDNN's padded SDPA (native GQA), 1 x 16384 beside
  # FA4 without LSE; sections for time, throughput, stalls and memory (tools/ncu_issue10.py).
  export RAGGED_ATTN_SM90_PREBUILT=${RAGGED_ATTN_SM90_PREBUILT:-$PWD/.devcache/nm} ISSUE10_LSE=0
  for pick in "4x512 h32/8 d128 nomask|cuDNN SDPA padded enable_gqa" "1x16384 h32/8 d128 nomask|FA4"; do
    row=${pick%%|*}; peer=${pick#*|}; name=${row// /_}; log="$OUT/ncu_nomask_${name//\//-}.log"
    echo "=== $row: ours, $peer"
    timeout ${NCU_S:-200} ncu --clock-control none --profile-from-start off --section SpeedOfLight \
      --section WarpStateStats --section LaunchStats --section Occupancy --section MemoryWorkloadAnalysis \
      python3 tools/ncu_issue10.py "$row" ours "$peer" > "$log" 2>&1
    grep -E "^profiled|Duration|DRAM Throughput|L2 Hit|Compute \(SM\)|Issue Slots Busy|No Eligible|Grid Size|Registers Per" "$log" | cut -c1-120
  done
  ;;
qahead)
  # Session 27's variants (carry [".devcache/b", ".devcache/tk"]): main's d128 none / causal nolse
  # beside ticket_early 1 / 2 (tk1, tk2) and q_ahead (qa, qa2, qa32), then the trace builds of main,
  # tk1 and qa (tools/trace_timeline.py) on a multi-block and a one-block row.
  ISSUE10_LSE=0 ISSUE10_PEERS=0 RAGGED_ATTN_SM90_PREBUILT=$PWD/.devcache/tk RAGGED_ATTN_VARIANTS=tk1,tk2,qa,qa2,qa32 \
    ISSUE10_ROWS=33x512:32/8:128:nomask BENCH_REPS=${BENCH_REPS:-20} timeout ${BENCH_S:-240} \
    python3 tools/bench_issue10.py "h32/8 d128" > $OUT/qahead_bench.log 2>&1
  grep "^| " $OUT/qahead_bench.log
  for p in tk tk/t1 tk/tqa; do
    for row in 4x512:32/8:128:nomask 64x128:32/8:128:causal; do
      echo "=== $p"
      RAGGED_ATTN_SM90_PREBUILT=$PWD/.devcache/$p timeout 60 python3 tools/trace_timeline.py $row --reps 20 2>&1 | grep -v -i warn
    done
  done > $OUT/qahead_trace.log
  grep -E "^===|^[0-9]+x|GPU time|tile [123]:|producer:" $OUT/qahead_trace.log
  ;;
next28)
  # Session 28's next round, call A (carry [".devcache/sweepcache", ".devcache/sm90"], ~260 s): the
  # sweep at the qa2 config, then the kernel GPU tests at main's config (.devcache/sm90 holds the d128
  # no-mask nolse class at q_ahead with ticket_early 2 since session 29). Call B:
  # next28b with [".devcache/q28", ".devcache/tk"]. Then a call with [".devcache/c"]:
  # bash .devcache/c/bootstrap.sh; for s in issue10 serving-full serving; do bash tools/issue10_round.sh closing $s; done
  SWEEP_S=${SWEEP_S:-150} bash "$0" sweep
  RAGGED_ATTN_SM90_PREBUILT=$PWD/.devcache/sm90 timeout ${TESTS_S:-300} python3 -m pytest tests/gpu/test_kernel_sm90.py \
    tests/gpu/test_batch_order_gpu.py tests/gpu/test_pack_rows_gpu.py tests/gpu/test_split_kv_gpu.py \
    tests/gpu/test_paged_gpu.py -q -n 8 -p no:cacheprovider > $OUT/gpu_tests.log 2>&1
  grep -E "passed|failed|FAILED|ERROR" $OUT/gpu_tests.log | tail -20
  ;;
next28b)
  # Call B (carry [".devcache/q28", ".devcache/tk"], ~300 s): lse_qahead, qa_from, clocks, causal_trace.
  BENCH_S=100 bash "$0" lse_qahead
  BENCH_S=110 bash "$0" qa_from
  CLOCKS_S=120 bash "$0" clocks
  bash "$0" causal_trace
  ;;
tail)
  # Session 29 (carry [".devcache/tail"], ~250 s): the tail split (TileConfig.tail_split, off in every
  # class): its GPU tests, then the d128 no-mask classes built with it (variant `tail`) beside main and
  # FA4 on the long no-mask rows it splits (1 x 16384 at 32 / 28 / 64 heads, 2 x 8192 at 64) and on
  # rows it leaves whole (4 x 512, 16 x 256, mixed14, 33 x 512: a launch without pieces runs a copy
  # traced without the split, its loop main's, tools/sass_static.py), then the trace builds' CTA exits
  # on 1 x 16384 (the last wave).
  # .devcache/tail: root = main's d128 none lse / nolse objects, tail/ = the same classes (and the
  # fp16 nolse one) with tail_split=1 (tools/prebuild_sm90.py --config tail_split=1), trace/ and
  # trace/tail/ the LSE class's trace builds without and with it.
  RAGGED_ATTN_SM90_PREBUILT=$PWD/.devcache/tail timeout ${TESTS_S:-200} python3 -m pytest tests/gpu/test_tail_split_gpu.py \
    -q -p no:cacheprovider > $OUT/tail_tests.log 2>&1
  grep -E "passed|failed|FAILED|ERROR|Error" $OUT/tail_tests.log | tail -20
  # The nolse class beside the peers (what the suites time), then the LSE class beside main alone.
  for lse in 0 1; do
    ISSUE10_LSE=$lse ISSUE10_PEERS=$((1 - lse)) RAGGED_ATTN_SM90_PREBUILT=$PWD/.devcache/tail RAGGED_ATTN_VARIANTS=tail \
      ISSUE10_ROWS=1x16384:28/4:128:nomask,1x16384:64/8:128:nomask,33x512:32/8:128:nomask \
      BENCH_REPS=${BENCH_REPS:-20} timeout ${BENCH_S:-150} python3 tools/bench_issue10.py "d128 nomask" > $OUT/tail_bench_lse$lse.log 2>&1
    grep "^| " $OUT/tail_bench_lse$lse.log
  done
  # The 1 x 16384 rows again after the suites' rest (~2.7 ms before each launch, not 300 us).
  ISSUE10_REST_US=2700 ISSUE10_LSE=0 RAGGED_ATTN_SM90_PREBUILT=$PWD/.devcache/tail RAGGED_ATTN_VARIANTS=tail \
    ISSUE10_ROWS=1x16384:28/4:128:nomask,1x16384:64/8:128:nomask BENCH_REPS=${BENCH_REPS:-20} timeout ${BENCH_S:-150} \
    python3 tools/bench_issue10.py "1x16384 h32/8 d128 nomask" ISSUE10_ROWS > $OUT/tail_bench_rest.log 2>&1
  grep "^| " $OUT/tail_bench_rest.log
  # The last wave itself: the trace builds (LSE class) without and with the tail split, CTA exits.
  for flag in "" --tail; do
    RAGGED_ATTN_SM90_PREBUILT=$PWD/.devcache/tail timeout 60 python3 tools/trace_timeline.py 1x16384:32/8:128:nomask \
      --reps 8 $flag 2>&1 | grep -v -i warn
  done > $OUT/tail_trace.log
  grep -E "^1x|GPU time|exit" $OUT/tail_trace.log
  ;;
lse_qahead)
  # Session 28: the d128 no-mask LSE class (early Q release off) with q_ahead, ticket_early 1 / 2
  # (carry [".devcache/q28"]: root = main's none lse / nolse objects, lqa / lqa2 the variants).
  ISSUE10_LSE=1 ISSUE10_PEERS=0 RAGGED_ATTN_SM90_PREBUILT=$PWD/.devcache/q28 RAGGED_ATTN_VARIANTS=lqa,lqa2 \
    ISSUE10_ROWS=33x512:32/8:128:nomask BENCH_REPS=${BENCH_REPS:-20} timeout ${BENCH_S:-120} \
    python3 tools/bench_issue10.py "h32/8 d128 nomask" > $OUT/lse_qahead.log 2>&1
  grep "^| " $OUT/lse_qahead.log
  ;;
clocks)
  # Session 28: SM clock and board power while ours and the peers run the long no-mask rows back to
  # back (tools/probe_clocks.py): is FA4's 1-2% lead on 1 x 16384 a power-limited clock?
  timeout -s INT ${CLOCKS_S:-120} python3 tools/probe_clocks.py ${CLOCK_ROWS:-llama3-8b/1x16384-full llama3-70b/1x16384-full} \
    --systems ${CLOCK_SYSTEMS:-ragged_attn,fa4,sdpa-cudnn} --phases 2 --phase-s 1.0 --rest-us 0,2700 > $OUT/clocks.log 2>&1
  grep "^|" $OUT/clocks.log
  ;;
rest)
  # Session 30 (carry [".devcache/b", ".devcache/s30"]): the long no-mask rows, ours'
  # nolse class beside FA4 / cuDNN, after rests of 300, 2,700 and 20,000 us before each launch
  # (FA4 leads by 1-2% in the suites' ~2.7 ms rests, trails under ncu: is the verdict the rest's?),
  # and 1 x 16896 at 32/8 heads: 4,224 tiles, exactly 32 waves of 132 (no last wave; 1 x 16384 has
  # 4 tiles in its last): does FA4's lead follow our last wave?
  for r in ${RESTS:-300 2700 20000}; do
    echo "=== rest $r us"
    ISSUE10_REST_US=$r ISSUE10_LSE=0 RAGGED_ATTN_SM90_PREBUILT=$PWD/.devcache/s30 \
      ISSUE10_ROWS=1x16896:32/8:128:nomask,1x16384:28/4:128:nomask,1x16384:64/8:128:nomask BENCH_REPS=${BENCH_REPS:-15} \
      timeout ${BENCH_S:-100} python3 tools/bench_issue10.py "1x16384 h32/8 d128 nomask" ISSUE10_ROWS 2>&1 | grep -v -i warn
  done > $OUT/rest.log
  grep -E "^===|^\| " $OUT/rest.log
  ;;
order)
  # Session 30 (after the c bootstrap: FA3 in the set, as in the suites): the long rows timed with the
  # old rotating rounds (each system always after the same one) and the balanced rounds the harness
  # uses now (tools/probe_order.py), with each system's median by the system before it.
  timeout ${ORDER_S:-200} python3 tools/probe_order.py llama3-8b/1x16384-full qwen2.5-7b/1x16384-full \
    llama3-70b/1x16384-full --reps ${ORDER_REPS:-20} > $OUT/order_full.log 2>&1
  timeout ${ORDER_S:-120} python3 tools/probe_order.py llama3-8b/1x16384 --suite serving --rest-us 2700 \
    --reps ${ORDER_REPS:-20} > $OUT/order_causal.log 2>&1
  grep -h -v -i warn $OUT/order_full.log $OUT/order_causal.log | grep -v "^$" | cut -c1-200 | tail -90
  ;;
libpath)
  # Session 30's lead (carry [".devcache/b", ".devcache/s30"], ~150 s): on an H100 at 2.7 ms rests the
  # library call (ragged_attn.attention, tools/probe_order.py) ran 1 x 16384 (32/8, no mask) at 741
  # TFLOP/s and tools/bench_issue10.py's launch_forward of the same class at 763 (FA4 757-759 in
  # both). tools/probe_library_path.py times the library call, with out=, launch_forward of the
  # in-process JIT, of the prebuilt object (one out / a new out each call) and of the library's own
  # function, beside FA4, in one process; then the timing module's GPU test. Build .devcache/s30 first
  # (~1 min): CUTE_DSL_ARCH=sm_90a python tools/prebuild_sm90.py .devcache/s30 --no-variants --classes \
  #   sm_90a-d128x128-bf16-bf16-none-nolse-ragged,sm_90a-d128x128-bf16-bf16-none-lse-ragged
  RAGGED_ATTN_SM90_PREBUILT=$PWD/.devcache/s30 timeout ${LIBPATH_S:-200} python3 tools/probe_library_path.py \
    --reps ${LIBPATH_REPS:-12} > $OUT/libpath.log 2>&1
  grep -v -i warn $OUT/libpath.log | grep -v "^$" | cut -c1-240
  # The process around the call: the suite's row with FA4 alone beside ours, then with cuDNN's THD
  # graph (FlashInfer's cuDNN prefill) in the process too (a persisting-L2 set-aside would show).
  for systems in ragged_attn,fa4 ragged_attn,fa4,cudnn; do
    timeout 120 python3 tools/probe_order.py llama3-8b/1x16384-full --systems $systems --reps 8 2>&1 \
      | grep -v -i warn | grep -E "persisting|^\| (ragged_attn|fa4|cudnn) \|" | cut -c1-160
  done
  timeout 60 python3 -m pytest tests/test_bench_timing.py -q -m gpu -p no:cacheprovider 2>&1 | tail -2
  ;;
ncu_rows)
  # Session 24: DRAM bytes, L2 hit rate and time of each kernel of issue 10's rows (tools/ncu_issue10.py;
  # ours from RAGGED_ATTN_SM90_PREBUILT, default .devcache/d192x) beside the peers, caches flushed
  # before each kernel (ncu's default): does a row move more bytes than its tensors hold?
  export RAGGED_ATTN_SM90_PREBUILT=${RAGGED_ATTN_SM90_PREBUILT:-$PWD/.devcache/d192x}
  IFS=';' read -ra ROWSET <<< "${NCU_ROWS:-4x512 h128/128 d192;16x256 h128/128 d192;64x128 h128/128 d192}"
  IFS=',' read -ra IMPLS <<< "${NCU_IMPLS:-ours,cuDNN SDPA padded}"
  for row in "${ROWSET[@]}"; do
    echo "=== $row"
    name=${row// /_}; log="$OUT/ncu_rows_${name//\//-}.log"
    timeout ${NCU_S:-120} ncu --clock-control none --profile-from-start off \
      --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct,lts__t_sectors_srcunit_tex_op_read.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed,launch__grid_size \
      python3 tools/ncu_issue10.py "$row" "${IMPLS[@]}" > "$log" 2>&1
    grep -E "^profiled|^  [a-zA-Z_]|dram__|lts__|gpu__time|sm__thr|launch__grid|Error" "$log" | cut -c1-150
  done
  ;;
ncu_paged_rows)
  # Session 24: the paged class's steady state against the ragged one's (ncu serializes the launches,
  # so no switch cost), d128 longtail14 and 1 x 8192: ragged, paged page 16 and 128, caches flushed
  for lens in "" 8192; do
    for which in "ragged 16" "paged 16" "paged 128"; do
      set -- $which
      NCU_PAGE=$2 PAGED_BENCH_LENS=$lens RAGGED_ATTN_SM90_PREBUILT=$PWD/.devcache/pv \
        timeout 90 ncu --clock-control none -k regex:RaggedForwardSm90 --launch-skip 1 --launch-count 1 \
        --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct,lts__t_sectors_srcunit_tex_op_read.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed,smsp__inst_executed.sum,smsp__average_warps_issue_stalled_no_instruction_per_issue_active.ratio,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio \
        python3 tools/ncu_paged_driver.py $1 > $OUT/ncu_pr_${lens:-longtail14}_$1_$2.log 2>&1
      echo "=== ${lens:-longtail14} $1 page $2"
      grep -E "dram__|lts__|gpu__time|sm__thr|smsp__|Error|ERR" $OUT/ncu_pr_${lens:-longtail14}_$1_$2.log
    done
  done
  ;;
ncu_paged_source)
  # Session 24: where the paged class's extra L2 sectors and long-scoreboard stalls sit (per SASS
  # line), d128 1 x 8192 (and longtail14), ragged against paged page 128 (the same one box a stage)
  for lens in 8192 ""; do
    for which in "ragged 16" "paged 128"; do
      set -- $which
      tag=${lens:-longtail14}_$1_$2
      rm -f /tmp/nps_$tag.ncu-rep
      NCU_PAGE=$2 PAGED_BENCH_LENS=$lens RAGGED_ATTN_SM90_PREBUILT=$PWD/.devcache/pv \
        timeout 150 ncu --clock-control none -k regex:RaggedForwardSm90 --launch-skip 1 --launch-count 1 \
        --section SourceCounters --section WarpStateStats --section MemoryWorkloadAnalysis_Tables -f -o /tmp/nps_$tag \
        python3 tools/ncu_paged_driver.py $1 > $OUT/nps_$tag.log 2>&1
      if [ ! -f /tmp/nps_$tag.ncu-rep ]; then echo "=== $tag: no report (see nps_$tag.log)"; continue; fi
      ncu --import /tmp/nps_$tag.ncu-rep --page source --csv --print-source sass | gzip > $OUT/nps_$tag.csv.gz
      ncu --import /tmp/nps_$tag.ncu-rep --page details --print-details all > $OUT/nps_$tag.txt 2>&1
      echo "=== $tag: $(zcat $OUT/nps_$tag.csv.gz | wc -l) sass lines"; grep -E "Duration|Warp Cycles Per Issued" $OUT/nps_$tag.txt | head -3
    done
  done
  ;;
switch)
  probe_round 90 0 "128 16 $short" "128 16 " "128 16 8192" "64 16 $short" "128 128 $short" "128 5 $short" \
    | tee $OUT/switch.log
  PAGED_BENCH_LENS=$short RAGGED_ATTN_SM90_PREBUILT=$PWD/.devcache/pv timeout 240 ncu --replay-mode application \
    --cache-control none --clock-control none -k regex:RaggedForwardSm90 --metrics gpu__time_duration.sum,$(
    )smsp__average_warps_issue_stalled_no_instruction_per_issue_active.ratio,$(
    )smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,$(
    )smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio \
    python3 tools/probe_kernel_switch.py --ncu > $OUT/ncu_switch.log 2>&1
  grep -E "RaggedForward|gpu__time_duration|stalled" $OUT/ncu_switch.log | head -40
  ;;
switch_source)
  # Session 22's question: is the switch cost (code state shared by the GPU) proportional to the code
  # a launch fetches cold? Per-instruction counters and stall samples (SourceCounters) of the probe's
  # --ncu sequence (GEMM, paged twice, GEMM, ragged twice; application replay, no flush), page 16,
  # d128 64 x 128: compare executed lines and no-instruction samples of each kind after the GEMM
  # (python3 tools/ncu_sass_summary.py $OUT/switch_source.csv --kernel N --regions).
  PAGED_BENCH_LENS=$short RAGGED_ATTN_SM90_PREBUILT=$PWD/.devcache/pv timeout ${NCU_S:-300} ncu --replay-mode application \
    --cache-control none --clock-control none -k regex:RaggedForwardSm90 --section SourceCounters --section WarpStateStats \
    -f -o /tmp/switch_source python3 tools/probe_kernel_switch.py --ncu > $OUT/switch_source_run.log 2>&1
  echo "ncu rc $?"; tail -3 $OUT/switch_source_run.log
  ncu --import /tmp/switch_source.ncu-rep --page source --csv --print-source sass > $OUT/switch_source.csv 2>&1
  # (session 23: the CSV, tens of MB, does not come back whole: the footprint and stall reasons of each
  # launch are printed here, and the CSV comes back gzipped)
  for k in 0 1 2 3; do python3 tools/ncu_sass_summary.py $OUT/switch_source.csv --kernel $k --opcodes 3 --footprint | head -6; done
  gzip -9 $OUT/switch_source.csv
  ;;
variant)
  # A paged tile-config variant built into .devcache/pv/NAME (tools/paged_variants_round.sh build
  # NAME=FIELDS): the switch probe beside main's paged and ragged builds (d128 64 x 128 and
  # longtail14, d64 64 x 128, page 16), the interleaved paged / ragged rounds (d128), then its GPU
  # tests on the causal d128 and the d64 paged classes (compiled here with FIELDS)
  name=${2:?variant needs NAME FIELDS, e.g. variant wr paged_warp_release=True}; fields=${3:?variant needs FIELDS}
  # PROBE_CAUSE (default on): the switch probe's launches that tell code state from data state (session 21)
  PROBE_CAUSE=${PROBE_CAUSE:-1} PROBE_VARIANT=$name probe_round 45 1 "128 16 $short" "128 16 " "64 16 $short" \
    | tee $OUT/switch_$name.log
  [ "${PIPESTATUS[0]}" = 0 ] || exit 1
  DIMS=${DIMS:-128} ROUNDS=${ROUNDS:-6} BENCH_S=${BENCH_S:-120} bash tools/paged_variants_round.sh run $name
  RAGGED_ATTN_TEST_TILE_CONFIG=$fields timeout ${TESTS_S:-150} python3 -m pytest tests/gpu/test_paged_gpu.py \
    -q -n 8 -p no:cacheprovider -x -k "(cTrue and d128) or d64 or decode_rows or cuda_graph" > $OUT/tests_$name.log 2>&1
  echo "tests rc $?"; tail -3 $OUT/tests_$name.log
  # session 21's split_kv=False GPU check (batch invariance; the public API compiles the d128 causal classes here)
  timeout ${SPLIT_S:-120} python3 -m pytest tests/gpu/test_split_kv_gpu.py \
    -q -p no:cacheprovider -rfEs -k batch_invariant > $OUT/tests_split_kv_off.log 2>&1
  echo "split_kv=False tests rc $?"; tail -3 $OUT/tests_split_kv_off.log
  ;;
d192)
  RAGGED_ATTN_SM90_PREBUILT=$PWD/.devcache/d192 RAGGED_ATTN_VARIANTS=n64s4,n80s3,pp,n112 BENCH_REPS=${BENCH_REPS:-15} \
    timeout ${BENCH_S:-300} python3 tools/bench_issue10.py h128/128 > $OUT/d192.log 2>&1
  grep "^| " $OUT/d192.log | tail -40
  ;;
sanitize)
  # the sweep's classes compiled (mode sweep's copy, same warm machine): nothing compiles under the sanitizer
  [ -d /tmp/sweepcache ] && export RAGGED_ATTN_CACHE_DIR=/tmp/sweepcache
  for tool in racecheck memcheck; do
    SANITIZE_DQK=128 timeout ${SANITIZE_S:-270} compute-sanitizer --tool $tool python3 tools/sanitize_sm90.py 4 \
      > $OUT/sanitize_$tool.log 2>&1
    echo "$tool rc $?:"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|hazard|problem|ok" $OUT/sanitize_$tool.log | tail -8
  done
  ;;
*)
  echo "$USAGE" >&2
  exit 2
  ;;
esac
