#!/usr/bin/env bash
# Co-execution of single YOLO-V2 convs on the GPU machine, on the full GPU and on the GPU held
# to a few SMs by CUDA MPS (an edge-class GPU beside the same CPU). Prepare here:
#   ../shared/gpu/pack-tvm-runtime.sh .devcarry
#   python benchmarks/coexec_conv.py build --out .devcarry/coexec
#   tar czf .devcarry/coexec.tgz -C .devcarry coexec
#   # optional: whole models, native against Python stream functions (streams_ab.py)
#   python benchmarks/streams_ab.py build --out .devcarry/streams-ab
#   tar czf .devcarry/streams-ab.tgz -C .devcarry streams-ab
# There, from the repo root with .devcarry/tvm-runtime.tgz and .devcarry/coexec.tgz carried:
#   bash benchmarks/run_coexec_gpu.sh [MPS_PERCENT (default 5)] [suite|traces|models|all (default)]
#     [full|edge|both (default): the configurations; one call per configuration fits 600 s]
# (models: streams_ab.py alone). Writes coexec-{full,edge}.{json,log}, coexec-traces-{full,edge}.txt (benchmarks/trace_split.py),
# streams-ab-{full,edge}.json (where streams-ab.tgz was carried) and coexec-machine.txt to
# $OUT: the names under benchmarks/results/.
set -euo pipefail
PCT=${1:-5}
WHAT=${2:-all}
ON=${3:-both}
OUT=${OUT:-/tmp/codl-out}
mkdir -p "$OUT" /tmp/site /tmp/coexec
tar xzf .devcarry/tvm-runtime.tgz -C /tmp/site
tar xzf .devcarry/coexec.tgz -C /tmp/coexec
[ -f .devcarry/streams-ab.tgz ] && tar xzf .devcarry/streams-ab.tgz -C /tmp/coexec
export PYTHONPATH=/tmp/site:$PWD TVM_USE_RUNTIME_LIB=1 PYTHONUNBUFFERED=1
export CODL_CUDA_CACHE=/tmp/codl-cuda-cache
{ nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv; lscpu | head -25; } \
  > "$OUT/coexec-machine.txt" 2>&1 || true
art=/tmp/coexec/coexec
run() {  # $1: SMs label, $2: result name
  timeout 330 python benchmarks/coexec_conv.py run "$art" --json "$OUT/$2.json" --jobs 14 \
    --rounds 3 --sms "$1" 2>&1 | tee "$OUT/$2.log"
}
whole_models() {  # $1: SMs label, $2: result name
  [ -d /tmp/coexec/streams-ab ] || return 0
  timeout 200 python benchmarks/streams_ab.py run /tmp/coexec/streams-ab --json "$OUT/$2.json" \
    --sms "$1" 2>&1 | tee "$OUT/$2.log"
}
sms() { python -c 'import torch; print(torch.cuda.get_device_properties(0).multi_processor_count)'; }

trace() {  # $1: label; the rest: SHAPE/VARIANT artifacts (appended to the label's file)
  local label=$1; shift
  local f="$OUT/coexec-traces-$label.txt"
  timeout 100 python benchmarks/trace_split.py "${@/#/$art/}" >> "$f" 2>&1 || echo "trace failed" >> "$f"
}
python_streams() {  # the same traces with the Python stream functions (codl_tvm.streams)
  local label=$1; shift
  echo "== with the Python stream functions (CODL_TVM_STREAMS=python)" >> "$OUT/coexec-traces-$label.txt"
  CODL_TVM_STREAMS=python trace "$label" "$@"
}
rm -f "$OUT"/coexec-traces-*.txt
if [ "$ON" != edge ]; then
case $WHAT in suite|all) run "$(sms)" coexec-full ;; esac
case $WHAT in suite|all|models) whole_models "$(sms)" streams-ab-full ;; esac
# row splits with block copies and with slice / concat kernels (their twins), and GPU-only
[ "$WHAT" = suite ] || [ "$WHAT" = models ] || trace full 13x13x1024-512-k1s1/H_0.9 13x13x1024-512-k1s1/H_0.9_kernel-slices \
  104x104x64-128-k3s1/H_0.9 104x104x64-128-k3s1/H_0.9_gpu-copies \
  104x104x64-128-k3s1/H_0.9_kernel-slices 104x104x64-128-k3s1/gpu-only
[ "$WHAT" = suite ] || [ "$WHAT" = models ] || python_streams full 13x13x1024-512-k1s1/H_0.9 104x104x64-128-k3s1/H_0.9
fi
[ "$ON" != full ] || exit 0

# the edge configuration: MPS holds this process's kernels to a few SMs; always stopped
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
nvidia-cuda-mps-control -d
trap 'echo quit | nvidia-cuda-mps-control' EXIT
export CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=$PCT
n=$(sms)
echo "MPS ${PCT}%: $n SMs" | tee -a "$OUT/coexec-machine.txt"
case $WHAT in suite|all) run "$n" coexec-edge ;; esac
case $WHAT in suite|all|models) whole_models "$n" streams-ab-edge ;; esac
[ "$WHAT" = suite ] || [ "$WHAT" = models ] || trace edge 104x104x64-128-k3s1/H_0.8 104x104x64-128-k3s1/H_0.8_gpu-copies \
  104x104x64-128-k3s1/H_0.8_kernel-slices 104x104x64-128-k3s1/H_0.7 \
  104x104x64-128-k3s1/H_0.7_kernel-slices 104x104x64-128-k3s1/gpu-only
[ "$WHAT" = suite ] || [ "$WHAT" = models ] || python_streams edge 104x104x64-128-k3s1/H_0.8 104x104x64-128-k3s1/H_0.7
