#!/usr/bin/env bash
# Run a command on an edge-class GPU: CUDA MPS holds the process to a share of the SMs.
#   bash benchmarks/edge_gpu.sh PERCENT COMMAND [ARGS...]
# Starts the MPS control daemon, sets CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=PERCENT for the command,
# records the SM count the command's processes see (TVM's and torch's) in $OUT/edge-sms.txt and
# in $EDGE_SMS, runs the command, and stops MPS however the command ends. MPS changes no GPU
# setting (compute mode stays Default); 5% and below give 8 SMs of an H100 or H200.
set -euo pipefail
PCT=$1; shift
OUT=${OUT:-/tmp/codl-out}
mkdir -p "$OUT"
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
nvidia-cuda-mps-control -d
trap 'echo quit | nvidia-cuda-mps-control' EXIT
export CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=$PCT
EDGE_SMS=$(python3 -c 'import tvm; from codl_tvm.runtime import enable_cuda; enable_cuda()
print(tvm.cuda(0).multi_processor_count)')
TORCH_SMS=$(python3 -c 'import torch; print(torch.cuda.get_device_properties(0).multi_processor_count)' \
  2>/dev/null || echo "-")
export EDGE_SMS
echo "MPS ${PCT}%: ${EDGE_SMS} SMs (TVM), ${TORCH_SMS} (torch)" | tee -a "$OUT/edge-sms.txt"
"$@"
