#!/usr/bin/env bash
# CPU measurement noise vs TVM thread count on the H100 machine's 16-vCPU KVM guest.
#
# Session 2 found two visits of one CPU sample agree within +-10% only 54% of the time with
# TVM's pool on all 16 vCPUs (PREDICTOR.md), which caps any predictor's CPU accuracy. This
# times the same CPU profiling bundle under several thread settings, one after another in one
# device call, with the profiler's rounds protocol; back here `python -m codl_tvm.profiler
# noise` of each CSV gives the agreement, and the rows give the speed cost.
#
# Here:   python -m codl_tvm.profiler bundle --pair x86-cuda ... -o .devcarry/profile-bundle-cpu
#         (CPU jobs only) and ../shared/gpu/pack-tvm-runtime.sh .devcarry
# There:  bash benchmarks/run_noise_threads_h100.sh   (carry .devcarry/tvm-runtime.tgz and
#         .devcarry/profile-bundle-cpu; env SETTINGS, PER_SETTING_S)
set -euo pipefail
OUT=${OUT:-$PWD/out}
PER_SETTING_S=${PER_SETTING_S:-70}
# "threads:bind" pairs; bind=0 sets TVM_BIND_THREADS=0 (no pinning of the pool's workers)
SETTINGS=${SETTINGS:-"16:1 15:1 12:1 8:1 16:0"}
source benchmarks/h100_env.sh  # runtime-only TVM, PYTHONPATH, $OUT/machine.txt
for s in $SETTINGS; do
  t=${s%%:*}; b=${s##*:}
  echo "== TVM_NUM_THREADS=$t TVM_BIND_THREADS=$b"
  TVM_NUM_THREADS=$t TVM_BIND_THREADS=$b python3 codl_tvm/profiler/bundle_runner.py \
    .devcarry/profile-bundle-cpu -o "$OUT/noise-t$t-b$b.csv" --deadline-s "$PER_SETTING_S" \
    --rounds 3 --min-repeat-ms 10 --max-sample-ms 60 | tail -3
done
