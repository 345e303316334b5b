#!/usr/bin/env bash
# Profile the H100 machine (llvm Sapphire Rapids + cuda sm_90) from a prebuilt bundle.
#
# Here (dev machine, full TVM), build what travels:
#   ../shared/gpu/pack-tvm-runtime.sh .devcarry            # -> .devcarry/tvm-runtime.tgz
#   codl-tvm profile-bundle --pair x86-cuda --arch sm_90 --mcpu sapphirerapids \
#       --num-cores 16 --quick --workload ../shared/workloads/conv2d.csv \
#       --workload ../shared/workloads/pool2d.csv --workload ../shared/workloads/dense.csv \
#       --shares 0.1,0.3,0.5,0.7,0.9,1.0 -o .devcarry/profile-bundle
# There (device tool, repo root, carry .devcarry):  bash benchmarks/run_profile_h100.sh
# Back here: put the samples in codl_tvm/data/samples-x86-cuda-h100.csv, then
#   bash benchmarks/predictor_reports.sh    # retrain + every figure of benchmarks/PREDICTOR.md
#
# Runtime-only TVM, nothing but numpy + the TVM runtime is imported (bundle_runner.py and its
# sibling rounds.py are standalone). Every library is loaded (nvcc compiles each once), then
# every kernel is visited ROUNDS times, round-robin over GPU / CPU / copy libraries and
# reshuffled each round; a visit warms up and times repeats of >= MIN_REPEAT_MS (capped per
# visit). No visit starts past the deadline (default 400 s, under the 8-minute budget); rows
# keep the rounds they got, $OUT/samples-x86-cuda.csv.rounds.jsonl lets a rerun resume.
# Reproducibility of the run (the ceiling of any predictor): the noise table at the end.
set -euo pipefail
OUT=${OUT:-$PWD/out}
DEADLINE_S=${DEADLINE_S:-400}
ROUNDS=${ROUNDS:-3}
MIN_REPEAT_MS=${MIN_REPEAT_MS:-10}
source benchmarks/h100_env.sh  # runtime-only TVM, PYTHONPATH, $OUT/machine.txt
# keep our samples file if a previous run left one in the tree
for f in samples-x86-cuda.csv samples-x86-cuda.csv.rounds.jsonl; do
  if [ -f ".devcarry/$f" ]; then cp ".devcarry/$f" "$OUT/"; fi
done
python3 codl_tvm/profiler/bundle_runner.py .devcarry/profile-bundle \
  -o "$OUT/samples-x86-cuda.csv" --deadline-s "$DEADLINE_S" --max-call-s 2 \
  --rounds "$ROUNDS" --min-repeat-ms "$MIN_REPEAT_MS" --warm-jobs 14 | tee "$OUT/runner.log"
wc -l "$OUT/samples-x86-cuda.csv"
# back here: codl-tvm profile-noise samples-x86-cuda.csv  (agreement of the rounds)
