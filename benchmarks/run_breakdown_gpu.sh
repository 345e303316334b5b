#!/usr/bin/env bash
# Where CPU-bound splits spend their time (benchmarks/split_breakdown.py), on the full GPU and
# on the GPU held to a few SMs by MPS, with a CUPTI trace of each split whose VM calls are
# rows of their own (benchmarks/trace_split.py --vm-calls). Prepare here:
#   ../shared/gpu/pack-tvm-runtime.sh .devcarry
#   python benchmarks/split_breakdown.py build --out .devcarry/breakdown
# There, from the repo root with .devcarry/tvm-runtime.tgz and .devcarry/breakdown carried:
#   [ON=edge|full] [DIR=BUILD] bash benchmarks/run_breakdown_gpu.sh [MPS_PERCENT (default 5)]
# Writes split-breakdown-{full,edge}.json and split-traces-{full,edge}.txt to $OUT (the names
# under benchmarks/results/).
set -euo pipefail
PCT=${1:-5}
OUT=${OUT:-/tmp/codl-out}
mkdir -p "$OUT" /tmp/site
tar xzf .devcarry/tvm-runtime.tgz -C /tmp/site
export PYTHONPATH=/tmp/site:$PWD TVM_USE_RUNTIME_LIB=1 PYTHONUNBUFFERED=1
export CODL_CUDA_CACHE=/tmp/codl-cuda-cache
DIR=${DIR:-.devcarry/breakdown}
splits=$(python3 -c "import json; print(' '.join('$DIR/' + r['path'] + '/split'
  for r in json.load(open('$DIR/index.json'))['runs']))")
measure() {  # $1: label, $2: SMs
  timeout 200 python3 benchmarks/split_breakdown.py run $DIR --json "$OUT/split-breakdown-$1.json" \
    --sms "$2" --rounds 7 2>&1 | tee "$OUT/split-breakdown-$1.log" || echo "breakdown $1 failed"
  # shellcheck disable=SC2086  # one artifact per word
  timeout 120 python3 benchmarks/trace_split.py --vm-calls $splits > "$OUT/split-traces-$1.txt" 2>&1 \
    || echo "traces $1 failed"
}
sms() { python3 -c 'import torch; print(torch.cuda.get_device_properties(0).multi_processor_count)'; }
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/split-breakdown-machine.txt"
ON=${ON:-both}
[ "$ON" = edge ] || measure full "$(sms)"
[ "$ON" != full ] || exit 0
# shellcheck disable=SC2016  # expanded by the inner shell, after MPS has started
OUT=$OUT bash benchmarks/edge_gpu.sh "$PCT" bash -c "$(declare -f measure); DIR=$DIR OUT=$OUT \
  splits='$splits' measure edge \$EDGE_SMS"
