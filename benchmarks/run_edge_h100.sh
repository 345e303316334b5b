#!/usr/bin/env bash
# The x86-cuda pair on the GPU machine twice: the full GPU, and an edge-class GPU (MPS, 8 SMs).
# Prepare here (full TVM), see benchmarks/BENCH.md "Reproduce":
#   ../shared/gpu/pack-tvm-runtime.sh .devcarry
#   codl-tvm profile-bundle --pair x86-cuda --arch sm_90 --mcpu sapphirerapids --num-cores 16 \
#       --quick --body 12 --pointwise 6 --seed 7 -o /tmp/calib       # random ops, no zoo model
#   python benchmarks/bench_models.py build --plans cpu-only --models $MODELS --bundle-mb 80 \
#       -o /tmp/oracle
#   tar czf .devcarry/calib.tgz -C /tmp calib; tar czf .devcarry/oracle.tgz -C /tmp/oracle oracle-bundle
# There (device tool, carry those and .devcarry/tvm-runtime.tgz), one call per stage:
#   bash benchmarks/run_edge_h100.sh calib [edge|full]  # -> $OUT/calib.tgz: calib-{full,edge}.csv
#     + facts (both configurations by default)
#   bash benchmarks/run_edge_h100.sh oracle edge|full  # -> $OUT/oracle.tgz: oracle-*.csv + facts
#   bash benchmarks/run_edge_h100.sh checks [TAG]  # verify_models + split_determinism, both
#     configs -> $OUT/{verify,determinism}[-TAG]-{full,edge}.json
#     (carry checks.tgz: tar czf .devcarry/checks.tgz -C .devcarry verify determinism)
#   bash benchmarks/run_edge_h100.sh options [TAG]  # build_options.py run, both configs
#     -> $OUT/build-options[-TAG]-{full,edge}.json
# TAG names a variant build in the result files (e.g. kernel-slices: both checks scripts'
# build --no-block-copies; codl: build_options.py build --plans-from, under benchmarks/results/).
# Here: calibrate, plan and build (benchmarks/BENCH.md "Reproduce"), pack bench.tgz; there:
#   bash benchmarks/run_edge_h100.sh threads  # the bench bundle's plans at several CPU pool
#     sizes (benchmarks/cpu_threads.py; after the bench stage in the same call, its bundle;
#     else carry threads.tgz: tar czf .devcarry/threads.tgz -C BUILD bench-edge)
#     -> $OUT/cpu-threads-edge.json
#   bash benchmarks/run_edge_h100.sh interference  # codl's guarded plans, load-time against
#     adaptive guard, while other processes take CPU cores -> $OUT/interference-edge.json
#   bash benchmarks/run_edge_h100.sh drift  # a bench bundle's CPU-only model timed over minutes
#     (benchmarks/cpu_drift.py, two processes) -> $OUT/cpu-drift-{1,2}.json
#   bash benchmarks/run_edge_h100.sh bench [edge|full]  # -> $OUT/bench-{full,edge}.json
#     (a variant build carried as bench-edge-TAG is timed too, in the same call:
#     $OUT/bench-edge-TAG.json; the edge time is shared between the builds)
set -euo pipefail
STAGE=$1
TAG=${2:-}  # checks, options: a variant build's name in the result files
PCT=${MPS_PERCENT:-5}
OUT=${OUT:-/tmp/codl-out}
RES=/tmp/codl-res
mkdir -p "$OUT" "$RES" /tmp/site /tmp/work
tar xzf .devcarry/tvm-runtime.tgz -C /tmp/site
export PYTHONPATH=/tmp/site:$PWD TVM_USE_RUNTIME_LIB=1 PYTHONUNBUFFERED=1
export CODL_CUDA_CACHE=/tmp/codl-cuda-cache
{ nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader; lscpu | head -20; } \
  > "$OUT/machine.txt" 2>&1 || true
RUNNER="python3 codl_tvm/profiler/bundle_runner.py"
edge() { OUT=$OUT bash benchmarks/edge_gpu.sh "$PCT" "$@"; }

case $STAGE in
calib)
  tar xzf .devcarry/calib.tgz -C /tmp/work
  ON=${2:-both}  # a call that also benches one configuration calibrates only that one
  if [ "$ON" != edge ]; then
    timeout 200 $RUNNER /tmp/work/calib -o $RES/calib-full.csv --deadline-s 150 --rounds 2 \
      --warm-jobs 14 --max-call-s 2 2>&1 | tail -3 || echo "calib-full failed"
  fi
  if [ "$ON" != full ]; then
    # nvcc's cache is warm where the full GPU ran first; else this run compiles first
    WARM=$([ "$ON" = edge ] && echo "--warm-jobs 14" || true)
    edge timeout 200 $RUNNER /tmp/work/calib -o $RES/calib-edge.csv --deadline-s 170 \
      --rounds 2 --max-call-s 2 $WARM 2>&1 | tail -3 || echo "calib-edge failed"
  fi
  tar czf "$OUT/calib.tgz" -C $RES . ;;
oracle)  # $2: edge (default) or full
  tar xzf .devcarry/oracle.tgz -C /tmp/work
  ON=${2:-edge}
  WRAP=$([ "$ON" = edge ] && echo edge || true)
  $WRAP timeout 520 $RUNNER /tmp/work/oracle-bundle -o $RES/oracle-$ON.csv --deadline-s 420 \
    --rounds 1 --warm-jobs 14 --max-call-s 2 2>&1 | tail -4 || echo "oracle-$ON failed"
  tar czf "$OUT/oracle.tgz" -C $RES . ;;
options)  # python benchmarks/build_options.py build --pair x86-cuda-h100 --out .devcarry/build-options
  tar xzf .devcarry/build-options.tgz -C /tmp/work
  O=build-options${TAG:+-$TAG}
  timeout 200 python3 benchmarks/build_options.py run /tmp/work/build-options \
    -o "$OUT/$O-full.json" --rounds 15 2>&1 | tail -12 || echo "$O-full failed"
  edge timeout 250 python3 benchmarks/build_options.py run /tmp/work/build-options \
    -o "$OUT/$O-edge.json" --rounds 15 2>&1 | tail -12 || echo "$O-edge failed" ;;
checks)  # verify_models.py build -o .devcarry/verify; split_determinism.py build (see each)
  tar xzf .devcarry/checks.tgz -C /tmp/work
  for on in full edge; do
    WRAP=$([ "$on" = edge ] && echo edge || true)
    V=verify${TAG:+-$TAG}-$on D=determinism${TAG:+-$TAG}-$on
    $WRAP timeout 120 python3 benchmarks/verify_models.py run /tmp/work/verify \
      -o "$OUT/$V.json" 2>&1 | grep -v Warn | tail -14 || echo "$V failed"
    $WRAP timeout 130 python3 benchmarks/split_determinism.py run /tmp/work/determinism \
      -o "$OUT/$D.json" 2>&1 | grep -v Warn | awk '$2 != "0.00e+00"' | tail -20 \
      || echo "$D failed"
  done ;;
bench)  # $2: both (default), edge or full
  tar xzf .devcarry/bench.tgz -C /tmp/work
  ON=${2:-both}
  # ADAPT=1: guarded plans keep choosing call after call (codl_tvm.adaptive_guard)
  # BENCH_MODELS: a comma-separated subset of the bundle's models (a shorter call)
  BENCH="python3 -m codl_tvm.planner.bundle --rounds ${ROUNDS:-7} --jobs 14 ${ADAPT:+--adapt}
    ${BENCH_MODELS:+--models $BENCH_MODELS}"
  if [ "$ON" != edge ]; then
    timeout 280 $BENCH /tmp/work/bench-full -o "$OUT/bench-full.json" --deadline-s 250 \
      > "$OUT/bench-full.log" 2>&1 || echo "bench-full: see bench-full.log"
    tail -n 40 "$OUT/bench-full.log"
  fi
  if [ "$ON" != full ]; then  # bench-edge and any variant build beside it (bench-edge-TAG)
    DIRS=$(cd /tmp/work && ls -d bench-edge*)
    N=$(echo $DIRS | wc -w)
    EDGE_S=${EDGE_S:-540}  # seconds for all the edge builds (a shorter call: EDGE_S=300)
    for D in $DIRS; do
      edge timeout $((EDGE_S / N)) $BENCH /tmp/work/$D -o "$OUT/$D.json" \
        --deadline-s $(((EDGE_S - 40) / N)) > "$OUT/$D.log" 2>&1 || echo "$D: see $D.log"
      tail -n 40 "$OUT/$D.log"
    done
  fi ;;
threads)  # benchmarks/cpu_threads.py on a bench bundle: bench.tgz's, where the bench stage ran
  # in this call, else one carried as threads.tgz (bench-edge); THREAD_MODELS: which models
  [ -d /tmp/work/bench-edge ] || tar xzf .devcarry/threads.tgz -C /tmp/work
  S=${THREADS_S:-330}
  edge timeout $((S + 120)) python3 benchmarks/cpu_threads.py run /tmp/work/bench-edge \
    --threads "${THREADS:-16,15,14,12}" --rounds "${ROUNDS:-21}" --deadline-s "$S" \
    --models "${THREAD_MODELS:-}" -o "$OUT/cpu-threads-edge.json" 2>&1 | grep -v Warn | tail -60 ;;
drift)  # benchmarks/cpu_drift.py: a bench bundle's CPU-only model over time, two processes
  [ -d /tmp/work/bench-edge ] || [ -d /tmp/work/bench-full ] || tar xzf .devcarry/bench.tgz -C /tmp/work
  B=$(ls -d /tmp/work/bench-edge /tmp/work/bench-full 2>/dev/null | head -1)
  edge bash -c "python3 benchmarks/cpu_drift.py run $B --model ${DRIFT_MODEL:-posenet} \
      -o $OUT/cpu-drift-1.json && python3 benchmarks/cpu_drift.py run $B \
      --model ${DRIFT_MODEL:-posenet} --phases probe,alone,probe -o $OUT/cpu-drift-2.json" \
    2>&1 | grep -v Warn ;;
interference)  # benchmarks/interference.py: codl's guarded plans while 8 processes spin
  # (carry interf.tgz: a bench-edge build's MODEL/{codl,gpu-only,cpu-only} folders)
  tar xzf .devcarry/interf.tgz -C /tmp/work
  B=/tmp/work/bench-edge M=${INTERF_MODELS:-yolo-v2,vgg-16}
  for a in $B/*/codl $B/*/codl/alternatives/* $B/*/gpu-only $B/*/cpu-only; do
    python3 -m codl_tvm.planner.bundle --warm "$a" &  # nvcc's kernels, all at once
  done; wait
  edge timeout "${INTERF_S:-400}" python3 benchmarks/interference.py run $B --models $M \
    --hogs "${HOGS:-8}" --phase-s "${PHASE_S:-15}" -o "$OUT/interference-edge.json" 2>&1 \
    | grep -v Warn | tail -40 ;;
*) echo "stage: calib | oracle | options | checks | bench | threads | drift | interference" >&2
   exit 1 ;;
esac
