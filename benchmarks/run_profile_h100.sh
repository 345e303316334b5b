#!/usr/bin/env bash
# Profile the H100 machine (llvm Sapphire Rapids + cuda sm_90) from a prebuilt bundle.
#
# Here (dev machine, full TVM), build what travels:
#   ../shared/gpu/pack-tvm-runtime.sh .devcarry            # -> .devcarry/tvm-runtime.tgz
#   python -m codl_tvm.profiler bundle --pair x86-cuda --arch sm_90 --mcpu sapphirerapids \
#       --num-cores 16 --quick --workload ../shared/workloads/conv2d.csv \
#       --workload ../shared/workloads/pool2d.csv --workload ../shared/workloads/dense.csv \
#       --shares 0.1,0.3,0.5,0.7,0.9,1.0 -o .devcarry/profile-bundle
# There (device tool, repo root, carry .devcarry):  bash benchmarks/run_profile_h100.sh
# Back here:
#   python -m codl_tvm.predictor train samples-x86-cuda.csv --kind codl -o predictor-x86-cuda.json
#   python benchmarks/predictor_report.py samples-x86-cuda.csv --test-models YOLO-V2 \
#       --markdown benchmarks/PREDICTOR-h100.md
#
# Runtime-only TVM, nothing but numpy + the TVM runtime is imported (bundle_runner.py is
# standalone). GPU libraries run first, then transfers, then CPU kernels cheapest first; the
# runner stops at its deadline (default 400 s, under the 8-minute budget with the unpacking and
# nvcc compiling each library once) and the rows it has are in $OUT. Rerunning resumes.
set -euo pipefail
OUT=${OUT:-$PWD/out}
DEADLINE_S=${DEADLINE_S:-400}
mkdir -p "$OUT" /tmp/site
tar xzf .devcarry/tvm-runtime.tgz -C /tmp/site
export PYTHONPATH=/tmp/site:$PWD TVM_USE_RUNTIME_LIB=1 PYTHONUNBUFFERED=1
{ nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader; lscpu | head -20; } \
  > "$OUT/machine.txt" 2>&1 || true
# keep our samples file if a previous run left one in the tree
[ -f .devcarry/samples-x86-cuda.csv ] && cp .devcarry/samples-x86-cuda.csv "$OUT/"
python3 codl_tvm/profiler/bundle_runner.py .devcarry/profile-bundle \
  -o "$OUT/samples-x86-cuda.csv" --deadline-s "$DEADLINE_S" --max-call-s 2 | tee "$OUT/runner.log"
wc -l "$OUT/samples-x86-cuda.csv"
