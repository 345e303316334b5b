#!/usr/bin/env bash
# Kernel benchmark on the H100 machine (runtime-only TVM). Prepare on the dev machine:
#   python benchmarks/kernels.py build --pair x86-cuda --out .devcarry/kernels-x86-cuda
#   ../shared/gpu/pack-tvm-runtime.sh .devcarry
# then, from the repo root on the H100 machine with .devcarry/ carried:
#   bash benchmarks/run_kernels_h100.sh
# Writes $OUT/kernels-h100.json, peak_gpu.json, kernels-h100-{gpu,lscpu}.txt and kernels-h100.log.
set -euo pipefail
OUT=${OUT:-/tmp/codl-out}
mkdir -p "$OUT" /tmp/site
tar xzf .devcarry/tvm-runtime.tgz -C /tmp/site
export PYTHONPATH=/tmp/site:$PWD TVM_USE_RUNTIME_LIB=1 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > "$OUT/kernels-h100-gpu.txt" || true
lscpu > "$OUT/kernels-h100-lscpu.txt" || true
nvcc -O3 -arch=sm_90 benchmarks/peak/peak_gpu.cu -o /tmp/peak_gpu
/tmp/peak_gpu | tee "$OUT/peak_gpu.json"
# nvcc compiles each library's CUDA source at load: warm the disk cache in parallel first
export CODL_CUDA_CACHE=/tmp/codl-nvcc-cache
for lib in .devcarry/kernels-x86-cuda/gpu_*.so; do
  python -c "import sys, tvm; from codl_tvm import runtime; runtime.enable_cuda(); \
tvm.runtime.load_module(sys.argv[1])" "$lib" &
done
wait
# guard under the 10-minute call: kernels print as they finish, so a cut-off run still leaves a log
timeout $((560 - SECONDS)) python benchmarks/kernels.py run .devcarry/kernels-x86-cuda \
  --json "$OUT/kernels-h100.json" --gpu-peak-json "$OUT/peak_gpu.json" --min-repeat-ms 20 \
  2>&1 | tee "$OUT/kernels-h100.log"
