#!/usr/bin/env bash
# Issue 2's measurement on the H100 machine (runtime-only TVM). Prepare here:
#   ../shared/gpu/pack-tvm-runtime.sh .devcarry
#   python benchmarks/coexec_conv.py build --pair h100 --out .devcarry/coexec
#   tar czf .devcarry/coexec.tgz -C .devcarry coexec
# There, from the repo root with .devcarry/tvm-runtime.tgz and .devcarry/coexec.tgz carried:
#   bash benchmarks/run_coexec_h100.sh
set -euo pipefail
OUT=${OUT:-/tmp/codl-out}
mkdir -p "$OUT" /tmp/site /tmp/coexec
tar xzf .devcarry/tvm-runtime.tgz -C /tmp/site
tar xzf .devcarry/coexec.tgz -C /tmp/coexec
export PYTHONPATH=/tmp/site:$PWD TVM_USE_RUNTIME_LIB=1 PYTHONUNBUFFERED=1
export CODL_CUDA_CACHE=/tmp/codl-cuda-cache
{ nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv; lscpu | head -25; } \
  > "$OUT/machine.txt" 2>&1 || true
timeout 540 python benchmarks/coexec_conv.py run /tmp/coexec/coexec --json "$OUT/coexec-h100.json" \
  --jobs 14 2>&1 | tee "$OUT/coexec-h100.log"
